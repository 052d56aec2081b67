"""Transactional adds survive SIGKILL: every committed transaction's task delivered once, no other.

Real processes (tests/outbox/crash_worker.py) run ndb transactions through pullqueue.compat on a
shared datastore (the SDK's stub over /rpc_http), Pub/Sub (emulator) and a Firestore name
registry (emulator); they and a sweeper are SIGKILLed at random moments, round after round, and
restarted. Then the test sweeps once past the grace period and drains the queue as a worker does.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pullqueue.adapters.pubsub import PubSubBackend
from pullqueue.dedupe import connect_registry
from pullqueue.listen import free_port
from pullqueue.outbox.layout import KIND
from tests.bridge.test_go_sdk import APPENGINE_PACKAGE, GAE_ENV, GO_SOURCES, GOPATH_PACKAGES
from tests.outbox.crash_worker import GRACE_SECONDS, LOCK_SECONDS
from tests.support.datastore_server import APP_ID, DatastoreServer, ids_of
from tests.support.emulators import shared_emulator_host

ROOT = Path(__file__).resolve().parents[2]
IDS = 400
BRIDGE_IDS = 200
BRIDGE_ROUNDS = 6
"""Through the bridge each transaction takes twice the calls (two hops) and each restart of the
bridge waits for it to serve: fewer keep the run short, the apps at work every round."""
APPS = 3
ROUNDS = 8
"""Rounds of one kill each. Victims are dealt from a shuffled deck of every process (the apps,
the sweeper, the bridge), dealt again once empty: 8 rounds deal each of the 4 processes twice,
6 rounds through the bridge each of the 5 at least once (an app already finished is not
killed). Picked at random each round, as before, 10 rounds left the sweeper unkilled in 6% of
runs and 8 the bridge in 17%."""
APP_SECONDS = 150
BRIDGE_START_SECONDS = 60
"""How long the apps may take to finish once the kills stop (they take seconds; an app retries a
call to a bridge that is down for at most a minute, tests/outbox/crash_worker.py)."""


def spawn(env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.outbox.crash_worker", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(env["CRASH_LOG"], "ab"),
    )


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL process if it runs, and reap it."""
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    process.wait()


def dump_stacks(
    apps: list[subprocess.Popen[bytes]], others: list[subprocess.Popen[bytes]], go: bool
) -> None:
    """Have each live process write every thread's stack to its log: SIGUSR1 (faulthandler) for
    the Python ones, SIGQUIT for a Go app (it prints its goroutines and exits)."""
    for process in [*apps, *others]:
        if process.poll() is None:
            go_app = go and process in apps
            process.send_signal(signal.SIGQUIT if go_app else signal.SIGUSR1)
    time.sleep(1.0)


def build_go_app(tmp_path: Path) -> Path:
    """tests/bridge/go/crashapp built against the Go SDK of the OS packages."""
    go = shutil.which("go")
    if go is None or not APPENGINE_PACKAGE.is_dir():
        pytest.fail(
            "the Go SDK crash test needs Go and google.golang.org/appengine from the OS packages:"
            " apt-get install -y golang-go golang-google-appengine-dev"
        )
    env = {
        **os.environ,
        "GO111MODULE": "off",
        "GOPATH": f"{tmp_path / 'gopath'}:{GOPATH_PACKAGES}",
        # Go's build cache is safe to share: later runs skip rebuilding the SDK.
        "GOCACHE": os.environ.get("GOCACHE")
        or str(Path(tempfile.gettempdir()) / "pullqueue-gocache"),
        "GOFLAGS": "",
    }
    binary = tmp_path / "crashapp"
    subprocess.run(
        [go, "build", "-o", str(binary), "."],
        cwd=GO_SOURCES / "crashapp", env=env, check=True, timeout=300,
    )  # fmt: skip
    return binary


class Datastore:
    """Where the apps of one API keep their entities, as the test reads them."""

    def __init__(self, api: str, server: DatastoreServer, project: str) -> None:
        self.api, self.server, self.project = api, server, project

    @property
    def url(self) -> str:
        if self.api == "cloud-ndb":
            return f"datastore://{self.project}"
        return f"appengine://{self.server.host}?app={APP_ID}"

    def ids(self, kind: str) -> set[Any]:
        if self.api == "cloud-ndb":
            from google.cloud import datastore

            query = datastore.Client(project=self.project).query(kind=kind)
            query.keys_only()
            return {entity.key.id_or_name for entity in query.fetch()}
        if kind == KIND:
            from google.appengine.datastore import datastore_pb

            request = datastore_pb.Query(app=APP_ID, kind=KIND, keys_only=True)
            result = datastore_pb.QueryResult()
            self.server.stub.MakeSyncCall("datastore_v3", "RunQuery", request, result)
            return {entity.key.path.element[-1].name for entity in result.result}
        return set(ids_of(self.server, kind))


@pytest.mark.timeout(600)
@pytest.mark.parametrize("api", ["bundled-ndb", "cloud-ndb", "bridge-python-sdk", "bridge-go-sdk"])
def test_sigkill_anywhere_loses_no_committed_task_and_publishes_none_rolled_back(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, api: str
) -> None:
    project = f"pq-{uuid.uuid4().hex[:12]}"
    registry_url = f"firestore://pullqueue-test?collection=outbox-{uuid.uuid4().hex[:12]}"
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", shared_emulator_host("pubsub"))
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", shared_emulator_host("firestore"))
    if api == "cloud-ndb":
        monkeypatch.setenv("DATASTORE_EMULATOR_HOST", shared_emulator_host("datastore"))
    server = DatastoreServer().start()
    store = Datastore(api, server, project)
    prefix = {"cloud-ndb": "cloud-", "bridge-python-sdk": "bridge-"}.get(api, "")
    go_app = build_go_app(tmp_path) if api == "bridge-go-sdk" else None
    bridge_port = free_port()
    log = os.environ.get("CRASH_LOG") or str(tmp_path / "crash.log")
    env = {
        **os.environ,
        "DATASTORE_HOST": server.host,
        "DATASTORE_PROJECT": project,
        "PULLQUEUE_URL": f"pubsub://{project}",
        "PULLQUEUE_AUTO_CREATE": "1",
        "PULLQUEUE_DEDUPE_URL": registry_url,
        "PULLQUEUE_SWEEP_LOCK_SECONDS": str(LOCK_SECONDS),
        "PULLQUEUE_SWEEP_GRACE_SECONDS": str(GRACE_SECONDS),
        "BRIDGE_HOST": f"127.0.0.1:{bridge_port}",
        "CRASH_LOG": log,
    }

    bridged = api.startswith("bridge-")
    ids = BRIDGE_IDS if bridged else IDS
    sweeper = "cloud-sweeper" if api == "cloud-ndb" else "sweeper"
    starters = {"sweeper": lambda: spawn(env, sweeper)}

    def spawn_app(k: int) -> subprocess.Popen[bytes]:
        """App k of APPS: it takes every APPS-th id from k + 1."""
        span = (str(k + 1), str(APPS), str(ids + 1))
        if go_app is None:
            return spawn(env, f"{prefix}app", *span)
        host, _, port = env["BRIDGE_HOST"].rpartition(":")
        return subprocess.Popen(
            [str(go_app), *span],
            env={**env, **GAE_ENV, "GAE_APPLICATION": APP_ID, "API_HOST": host, "API_PORT": port},
            stdout=subprocess.DEVNULL,
            stderr=open(log, "ab"),
        )

    if bridged:
        # The bridge publishes after each commit and sweeps every second itself; a sweeper
        # process sweeps the same outbox through the same upstream.
        starters["bridge"] = lambda: spawn_bridge(env, bridge_port, server.host)

    rng = random.Random(os.environ.get("PULLQUEUE_CRASH_SEED"))
    kills: Counter[str] = Counter()
    apps: dict[int, subprocess.Popen[bytes]] = {}
    others: dict[str, subprocess.Popen[bytes]] = {}
    deck: list[int | str] = []
    began = time.monotonic()
    try:
        # Provision the topic and subscriptions once, before anyone is killed.
        PubSubBackend(project, auto_create=True, names=None).close()
        for _ in range(BRIDGE_ROUNDS if bridged else ROUNDS):
            for name, start in starters.items():
                if name not in others or others[name].poll() is not None:
                    others[name] = start()
            for k in range(APPS):
                if k not in apps or apps[k].poll() is not None:
                    apps[k] = spawn_app(k)
            time.sleep(rng.uniform(0.2, 2.0))
            if not deck:
                deck = [*range(APPS), *starters]
                rng.shuffle(deck)
            victim = deck.pop()
            process = others[victim] if isinstance(victim, str) else apps[victim]
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.wait()
                kills[str(victim)] += 1
        stop(others.pop("sweeper"))
        sweeping_stopped = time.monotonic()
        if bridged and others["bridge"].poll() is not None:
            others["bridge"] = starters["bridge"]()  # the apps finish through a bridge
        # The apps finish the ids left without being killed.
        for k in range(APPS):
            if apps[k].poll() is not None and apps[k].returncode != 0:
                apps[k] = spawn_app(k)
        for k, process in apps.items():
            try:
                code = process.wait(timeout=APP_SECONDS)
            except subprocess.TimeoutExpired:
                dump_stacks([*apps.values()], [*others.values()], go_app is not None)
                pytest.fail(f"app {k} did not finish in {APP_SECONDS} s; stacks in {log}")
            assert code == 0, f"app {k} exited {code}; its output in {log}"
        apps_done = time.monotonic()
        for process in others.values():
            stop(process)  # the bridge, killed too: whatever it was publishing, the sweep does
            sweeping_stopped = time.monotonic()  # it sweeps too
        ran = time.monotonic() - began
        committed = store.ids("Order")
        assert committed == {i for i in range(1, ids + 1) if i % 5}, (
            "every transaction committed once"
        )
        # The bound: a sweep after the grace period (and the lock of a sweeper killed holding a
        # task) publishes whatever a crash left staged. The last entry was staged before the apps
        # finished, the last lock taken before the last sweeping process was stopped; a sweep
        # sooner would skip an entry, and the test would fail, not pass.
        left = len(store.ids(KIND))
        settled = max(apps_done + GRACE_SECONDS, sweeping_stopped + LOCK_SECONDS) + 0.5
        time.sleep(max(settled - time.monotonic(), 0.0))
        swept = subprocess.run(
            [sys.executable, "-c", "from pullqueue.cli import main; main()", "sweep", "--json",
             "--datastore", store.url, "--grace",
             str(GRACE_SECONDS)],
            env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert swept.returncode == 0, swept.stderr
        assert store.ids(KIND) == set()
        delivered = drain(project, registry_url)
        print(
            f"{api}: kills {dict(kills)} in {ran:.1f} s, staged after the kills {left},"
            f" sweep {swept.stdout.strip()}"
        )
        assert not {int(p) for p in delivered} - committed, "a rolled-back task was delivered"
        missing = committed - {int(p) for p in delivered}
        if missing:
            # Tell a task the drain did not reach (a lease answered empty three times while it
            # was there) from one that is not in the queue at all.
            time.sleep(5)
            later = drain(project, registry_url)
            pytest.fail(
                f"committed tasks not delivered: {sorted(missing)}; a second drain 5 s later"
                f" delivered {sorted(int(p) for p in later)}; processes' output in {log}"
            )
        twice = {p: n for p, n in delivered.items() if n > 1}
        assert not twice, f"delivered more than once: {twice}"
    finally:
        for process in [*apps.values(), *others.values()]:
            stop(process)
        server.stop()


def spawn_bridge(env: dict[str, str], port: int, upstream: str) -> subprocess.Popen[bytes]:
    """`pullqueue bridge --upstream` on port, Pub/Sub adds slowed (tests/outbox/slow_publish.py),
    returned once it serves (within BRIDGE_START_SECONDS); its stderr goes on to CRASH_LOG, and
    SIGUSR1 writes its threads' stacks there."""
    process = subprocess.Popen(
        [sys.executable, "-c",
         "import faulthandler, signal; faulthandler.register(signal.SIGUSR1, all_threads=True);"
         " from pullqueue.cli import main; main()",
         "bridge", "--listen", f"127.0.0.1:{port}", "--upstream", upstream,
         "--sweep-period", "1"],
        cwd=ROOT, env={**env, "PULLQUEUE_PLUGINS": "tests.outbox.slow_publish"},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    stderr = process.stderr
    assert stderr is not None
    serving = threading.Event()

    def copy() -> None:
        with open(env["CRASH_LOG"], "ab") as log:
            for line in stderr:
                log.write(line)
                log.flush()
                if b"serving taskqueue" in line:
                    serving.set()

    threading.Thread(target=copy, daemon=True).start()
    if not serving.wait(BRIDGE_START_SECONDS):
        stop(process)
        pytest.fail(
            f"the bridge did not serve within {BRIDGE_START_SECONDS} s; see {env['CRASH_LOG']}"
        )
    return process


def drain(project: str, registry_url: str) -> Counter[bytes]:
    """Lease and delete batches of 10, as a worker does, until the queue stays empty."""
    backend = PubSubBackend(project, names=connect_registry(registry_url), close_names=True)
    delivered: Counter[bytes] = Counter()
    empty = 0
    try:
        while empty < 3:
            leased = backend.lease("crash", 60, 10)
            empty = 0 if leased else empty + 1
            for task in leased:
                delivered[task.payload] += 1
            if leased:
                backend.delete("crash", leased)
    finally:
        backend.close()
    return delivered
