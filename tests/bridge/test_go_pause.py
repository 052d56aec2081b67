"""A paused queue through the bridge: an unchanged Go SDK worker (taskqueue.Lease) on the Pub/Sub
emulator gets empty leases within the stated bound after `pause`, tasks again after `resume`,
and no task is lost.

The pause is set by another process's backend (as `pullqueue pause` does), so the bridge's
backend learns it only through the topic label it reads every PULLQUEUE_PUBSUB_PAUSE_CHECK s.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from pullqueue import Queue, Settings, Task
from pullqueue.adapters.pubsub import PubSubBackend
from tests.bridge.support import running_bridge
from tests.bridge.test_go_sdk import APPENGINE_PACKAGE, GAE_ENV, GO_SOURCES, GO_TICKET
from tests.bridge.test_go_sdk import GOPATH_PACKAGES as GOPATH
from tests.support.emulators import shared_emulator_host

CHECK = 1.0
"""PULLQUEUE_PUBSUB_PAUSE_CHECK of the bridge's backend here."""
BOUND = CHECK + 2.0
"""The stated bound: the pause check plus one lease call (its pull wait, 1 s, and slack)."""


def _build(tmp_path: Path) -> Path:
    go = shutil.which("go")
    if go is None or not APPENGINE_PACKAGE.is_dir():
        pytest.fail(
            "the Go SDK tests need Go and google.golang.org/appengine from the OS packages:"
            " apt-get install -y golang-go golang-google-appengine-dev"
        )
    env = {
        **os.environ,
        "GO111MODULE": "off",
        "GOPATH": f"{tmp_path / 'gopath'}:{GOPATH}",
        "GOCACHE": str(tmp_path / "cache"),
        "GOFLAGS": "",
    }
    binary = tmp_path / "leaseloop"
    subprocess.run(
        [go, "build", "-o", str(binary), "."],
        cwd=GO_SOURCES / "leaseloop",
        env=env,
        check=True,
        timeout=300,
    )
    return binary


def test_a_go_worker_through_the_bridge_stops_within_the_bound_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    binary = _build(tmp_path)
    shared_emulator_host("pubsub")
    monkeypatch.setenv("PULLQUEUE_DEDUPE_URL", "memory://")
    project = f"bridge-{uuid.uuid4().hex[:10]}"
    served = PubSubBackend(project, settings=Settings(pubsub_pause_check=CHECK), auto_create=True)
    operator = PubSubBackend(project, auto_create=True)
    producer = Queue("paused", operator)
    added: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        while not stop.is_set():
            added.extend(t.name or "" for t in producer.add([Task(b"x") for _ in range(3)]))
            stop.wait(0.2)

    feeder = threading.Thread(target=produce)
    try:
        added.append(producer.add(Task(b"first")).name or "")
        with running_bridge(served, ticket=GO_TICKET) as server:
            env = {**os.environ, **GAE_ENV, "API_HOST": "127.0.0.1", "API_PORT": str(server.port)}
            worker = subprocess.Popen(
                [str(binary), "-queue", "paused", "-for", "16s"],
                env=env,
                stdout=subprocess.PIPE,
                text=True,
            )
            feeder.start()
            time.sleep(4)
            operator.set_paused("paused", True)
            paused_at = time.time()
            time.sleep(6)
            operator.set_paused("paused", False)
            resumed_at = time.time()
            out, _ = worker.communicate(timeout=60)
            stop.set()
            feeder.join()
        assert worker.returncode == 0
        seen = json.loads(out.strip().splitlines()[-1])
        assert seen["failures"] is None
        times = [lease["at_ms"] / 1000 for lease in seen["leases"]]
        assert any(t < paused_at for t in times), "the worker leased nothing before the pause"
        during = [t for t in times if paused_at + BOUND < t < resumed_at]
        assert during == [], f"{len(during)} leases more than {BOUND} s into the pause"
        after = sorted(t for t in times if t > resumed_at)
        assert after and after[0] - resumed_at < BOUND
        before = max(t for t in times if t < resumed_at)
        print(
            f"Go worker through the bridge, check {CHECK:g} s: last lease"
            f" {before - paused_at:.2f} s after the pause (bound {BOUND:g} s), first"
            f" {after[0] - resumed_at:.2f} s after resume"
        )
        # Nothing lost: what the worker did not lease is still in the queue.
        leased = {lease["name"] for lease in seen["leases"]}
        rest: set[str] = set()
        while batch := Queue("paused", served).lease(60, 1000):
            rest |= {t.name or "" for t in batch}
        assert leased | rest == set(added)
    finally:
        stop.set()
        served.close()
        operator.close()
