"""Benchmark: the Go and Python SDK workers through `pullqueue bridge` against compat, on a
Pub/Sub that answers like the service (tests/support/realpubsub.py, 30 ms round trips, partial
pulls, filters, held empty pulls, the cap), all in the same run.

Per client and operation (lease_tasks(60, 100), lease_tasks_by_tag(60, 100, tag) with a new tag
each pair, lease by the oldest tag; each batch then deleted): the median milliseconds of a
lease + delete pair over --pairs pairs (after one not counted), the median Pub/Sub calls begun
during a pair, the ratio to compat (pullqueue.compat, the baseline), and the time the
bridge adds per pair against a bridge hop; then the mean milliseconds and calls and their ratio
to compat's: a lease by the oldest tag answers from the hand (2-3 calls, 0.07-0.12 s) in about
half the pairs and probes or drains shards (7-20 calls, 0.25-0.95 s) in the others, in the same
pattern on every client, so a median of a few pairs falls on one side or the other. A bridge hop is
measured in the same run: the same client through a bridge over memory://, less compat on
memory:// (what the bridge path costs when the queue costs nothing; a pair is two calls, so two
hops). The target: on the layer, no more than one hop lost per call against compat: "hops" <= 2
per pair.

    python benchmarks/bridge_service.py [--rtt-ms 30] [--pairs 15] [--clients compat python go]

Each client runs in a process of its own (compat, the Python SDK, the Go SDK; the bridge in
another), none in the layer's process. The emulator is PUBSUB_EMULATOR_HOST when set, else
one started (and stopped) here. The Go client is built from tests/bridge/go/pairs with the OS's
Go and google.golang.org/appengine (apt-get install golang-go golang-google-appengine-dev).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bridge import bridge_process, free_port, sdk_taskqueue  # noqa: E402  (benchmarks/bridge.py)

OPS = ("plain", "named", "oldest")
TAGS = 50
FILL = 50
"""Adds of 100 tasks over the 50 tags into each client's queue before its pairs."""
GO_PACKAGES = Path("/usr/share/gocode")
GAE_ENV = {
    "GOOGLE_CLOUD_PROJECT": "my-app",
    "GAE_SERVICE": "default",
    "GAE_VERSION": "v1",
    "GAE_DEPLOYMENT_ID": "1",
    "GAE_INSTANCE": "instance-1",
}


def build_go(root: Path) -> Path:
    """tests/bridge/go/pairs built offline in GOPATH mode against the OS's packages."""
    go = shutil.which("go")
    if go is None or not (GO_PACKAGES / "src/google.golang.org/appengine").is_dir():
        raise SystemExit(
            "the Go client needs Go and google.golang.org/appengine:"
            " apt-get install -y golang-go golang-google-appengine-dev (or --clients compat python)"
        )
    binary = root / "pairs"
    env = {
        **os.environ,
        "GO111MODULE": "off",
        "GOPATH": f"{root / 'gopath'}:{GO_PACKAGES}",
        "GOCACHE": str(root / "cache"),
        "GOFLAGS": "",
    }
    subprocess.run(
        [go, "build", "-o", str(binary), "."],
        cwd=ROOT / "tests/bridge/go/pairs",
        env=env,
        check=True,
        timeout=600,
    )
    return binary


def fill(queue: Any, task_class: Any, adds: int) -> None:
    for _ in range(adds):
        queue.add(
            [task_class(payload=f"p{i}", method="PULL", tag=f"tag-{i % TAGS}") for i in range(100)]
        )


def python_pairs(queue: Any, op: str, pairs: int) -> dict[str, Any]:
    """pairs + 1 lease + delete pairs on queue: when each began and ended (Unix seconds), and
    the calls that failed (a failed pair is not timed; the next goes on, as a worker would)."""
    spans: list[tuple[float, float]] = []
    failures: list[str] = []
    for i in range(pairs + 1):
        began = time.time()
        try:
            if op == "plain":
                tasks = queue.lease_tasks(60, 100)
            elif op == "named":
                tasks = queue.lease_tasks_by_tag(60, 100, f"tag-{i}")
            else:
                tasks = queue.lease_tasks_by_tag(60, 100)
            if tasks:
                queue.delete_tasks(tasks)
        except Exception as exc:
            failures.append(f"{type(exc).__name__}: {exc}")
            continue
        spans.append((began, time.time()))
    return {"spans": spans, "failures": failures}


def worker(client: str, target: str, queue_name: str, op: str, pairs: str) -> None:
    """One client process (compat on the URL target, or the Python SDK through the bridge on
    port target): fills its queue, then prints its pairs' spans as JSON."""
    if client == "compat":
        from pullqueue import connect
        from pullqueue.compat import taskqueue as compat

        queue: Any = compat.Queue(queue_name, connect(target, auto_create=True))
        fill(queue, compat.Task, FILL)
    else:
        tq = sdk_taskqueue(int(target))
        queue = tq.Queue(queue_name)
        fill(queue, tq.Task, FILL)
    print(json.dumps(python_pairs(queue, op, int(pairs))))


@contextmanager
def _nothing() -> Iterator[Any]:
    yield None


def run_client(
    client: str, url: str, port: int | None, queue: str, op: str, pairs: int, go: Path | None
) -> tuple[list[tuple[float, float]], int]:
    """The spans of one client's pairs, and how many failed, run in a process of its own (none
    shares the layer's process and its interpreter lock with another)."""
    if client == "go":
        assert go is not None and port is not None
        tq = sdk_taskqueue(port)
        fill(tq.Queue(queue), tq.Task, FILL)
        args = {"plain": ["-mode", "plain"], "oldest": ["-mode", "oldest"]}.get(
            op, ["-mode", "tag", "-tags", ",".join(f"tag-{i}" for i in range(pairs + 1))]
        )
        command = [str(go), "-queue", queue, "-n", str(pairs + 1), *args]
        env = {**os.environ, **GAE_ENV, "API_HOST": "127.0.0.1", "API_PORT": str(port)}
    else:
        target = url if client == "compat" else str(port)
        command = [sys.executable, __file__, "--worker", client, target, queue, op, str(pairs)]
        env = dict(os.environ)
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"the {client} client failed: {done.stderr.strip()[-2000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    if client == "go":
        spans = list(zip(report["began"], report["ended"], strict=True))
    else:
        spans = [(b, e) for b, e in report["spans"]]
    for failure in report["failures"] or []:
        print(f"  {client} {op}: {failure}", file=sys.stderr)
    return spans, len(report["failures"] or [])


def one_backend(
    kind: str, clients: list[str], pairs: int, rtt: float, go_binary: Path | None
) -> tuple[dict[tuple[str, str], list[tuple[float, int]]], dict[tuple[str, str], int]]:
    """Every client's pairs on memory:// or on the layer in front of the emulator: for each
    pair after the first, its milliseconds and the Pub/Sub calls begun while it ran; and how
    many pairs failed."""
    from tests.support.emulators import shared_emulator_host
    from tests.support.realpubsub import Knobs, RealisticPubSub

    results: dict[tuple[str, str], list[tuple[float, int]]] = {}
    failures: dict[tuple[str, str], int] = {}
    with ExitStack() as stack:
        layer = None
        if kind == "memory":
            url = "memory://"
        else:
            layer = stack.enter_context(
                RealisticPubSub(shared_emulator_host("pubsub"), Knobs.service(rtt), seed=32)
            )
            url = f"pubsub://brsvc-{uuid.uuid4().hex[:8]}"
            stack.enter_context(layer.as_emulator())  # for the processes started below
        port = None
        if set(clients) & {"python", "go"}:
            port = free_port()
            stack.enter_context(bridge_process(url, port))
        # Wall clock of the layer's monotonic call times.
        offset = time.time() - time.monotonic()
        for op in OPS:
            for client in clients:
                queue = f"{client}-{op}"
                with layer.counting() if layer is not None else _nothing() as seen:
                    spans, failed = run_client(client, url, port, queue, op, pairs, go_binary)
                starts = [c.start + offset for c in seen._calls] if seen is not None else []
                results[(client, op)] = [
                    ((e - b) * 1000, sum(1 for t in starts if b <= t <= e)) for b, e in spans[1:]
                ]
                failures[(client, op)] = failed
    return results, failures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rtt-ms", type=float, default=30.0)
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--clients", nargs="+", default=["compat", "python", "go"])
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        worker(*argv[1:6])
        return
    args = parser.parse_args(argv)
    os.environ.setdefault("PULLQUEUE_DEDUPE_URL", "memory://")
    clients = ["compat", *[c for c in args.clients if c != "compat"]]
    from tests.support.emulators import shared_emulator_host

    shared_emulator_host("pubsub")
    with tempfile.TemporaryDirectory(prefix="bridge-service-") as tmp:
        go_binary = build_go(Path(tmp)) if "go" in clients else None
        print(f"load average: {Path('/proc/loadavg').read_text().strip()}")
        memory, _ = one_backend("memory", clients, args.pairs, 0, go_binary)
        layer, failed = one_backend("layer", clients, args.pairs, args.rtt_ms / 1000, go_binary)
    print(
        f"layer: {args.rtt_ms:g} ms round trips, partial pulls, filters, held empty pulls, cap;"
        f" medians of {args.pairs} lease + delete pairs (100 tasks, 50 tags); failed: pairs whose"
        " call failed (the error on stderr)"
    )
    print(
        f"{'op':7} {'client':7} {'layer ms':>9} {'calls':>6} {'ratio':>6} {'added ms':>9}"
        f" {'hop ms':>7} {'hops':>5} {'failed':>6} {'mean ms':>8} {'calls':>6} {'ratio':>6}"
        "  (memory ms)  target: hops <= 2 per pair"
    )
    for op in OPS:
        base = statistics.median(ms for ms, _ in layer[("compat", op)])
        base_memory = statistics.median(ms for ms, _ in memory[("compat", op)])
        base_mean = statistics.mean(ms for ms, _ in layer[("compat", op)])
        for client in clients:
            ms = statistics.median(m for m, _ in layer[(client, op)])
            calls = statistics.median(c for _, c in layer[(client, op)])
            on_memory = statistics.median(m for m, _ in memory[(client, op)])
            mean = statistics.mean(m for m, _ in layer[(client, op)])
            mean_calls = statistics.mean(c for _, c in layer[(client, op)])
            added = ms - base
            hop = on_memory - base_memory
            hops = f"{added / hop:5.1f}" if client != "compat" and hop > 0 else "    -"
            print(
                f"{op:7} {client:7} {ms:9.1f} {calls:6.0f} {ms / base:6.2f} {added:9.1f}"
                f" {hop:7.2f} {hops} {failed[(client, op)]:6d} {mean:8.1f} {mean_calls:6.1f}"
                f" {mean / base_mean:6.2f}  ({on_memory:.2f})",
                flush=True,
            )
    print(f"load average: {Path('/proc/loadavg').read_text().strip()}")


if __name__ == "__main__":
    main()
