"""Benchmark: the Go and Python SDK workers through `pullqueue bridge` against compat, on a
Pub/Sub that answers like the service (tests/support/realpubsub.py, 30 ms round trips, partial
pulls, filters, held empty pulls, the cap), all in the same run.

Per client and operation (lease_tasks(60, 100), lease_tasks_by_tag(60, 100, tag) with a new tag
each pair, lease by the oldest tag; each batch then deleted): the median milliseconds of a
lease + delete pair over --pairs pairs (after one not counted), the median Pub/Sub calls per
pair, the ratio to compat (pullqueue.compat in this process, the baseline), and the time the
bridge adds per pair against a bridge hop. A bridge hop is measured in the same run: the same
client through a bridge over memory://, less compat on memory:// (what the bridge path costs
when the queue costs nothing; a pair is two calls, so two hops). The target (issue 32): on the
layer, no more than one hop lost per call against compat: "hops" <= 2 per pair.

    python benchmarks/bridge_service.py [--rtt-ms 30] [--pairs 15] [--clients compat python go]

The emulator is PUBSUB_EMULATOR_HOST when set, else one started (and stopped) here. The Go
client is built from tests/bridge/go/pairs with the OS's Go and google.golang.org/appengine
(apt-get install golang-go golang-google-appengine-dev).
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
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bridge import bridge_process, free_port, sdk_taskqueue  # noqa: E402  (benchmarks/bridge.py)

OPS = ("plain", "named", "oldest")
TAGS = 50
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


def python_pairs(
    queue: Any, op: str, pairs: int, counted: Callable[[], Any]
) -> list[tuple[float, int]]:
    """pairs + 1 lease + delete pairs on queue (the first not counted): (ms, Pub/Sub calls)."""
    out: list[tuple[float, int]] = []
    for i in range(pairs + 1):
        with counted() as seen:
            began = time.perf_counter()
            if op == "plain":
                tasks = queue.lease_tasks(60, 100)
            elif op == "named":
                tasks = queue.lease_tasks_by_tag(60, 100, f"tag-{i}")
            else:
                tasks = queue.lease_tasks_by_tag(60, 100)
            if tasks:
                queue.delete_tasks(tasks)
            ms = (time.perf_counter() - began) * 1000
        if i:
            out.append((ms, seen.count if seen is not None else 0))
    return out


def go_pairs(
    binary: Path, port: int, queue: str, op: str, pairs: int, counted: Callable[[], Any]
) -> list[tuple[float, int]]:
    args = {"plain": ["-mode", "plain"], "oldest": ["-mode", "oldest"]}.get(
        op, ["-mode", "tag", "-tags", ",".join(f"tag-{i}" for i in range(pairs + 1))]
    )
    env = {**os.environ, **GAE_ENV, "API_HOST": "127.0.0.1", "API_PORT": str(port)}
    with counted() as seen:
        done = subprocess.run(
            [str(binary), "-queue", queue, "-n", str(pairs + 1), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    if done.returncode != 0:
        raise SystemExit(f"the Go client failed: {done.stderr.strip()}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    ms = [a + b for a, b in zip(report["lease_ms"], report["delete_ms"], strict=True)][1:]
    calls = round(seen.count / (pairs + 1)) if seen is not None else 0
    return [(m, calls) for m in ms]


@contextmanager
def _nothing() -> Iterator[None]:
    yield None


def one_backend(
    kind: str, clients: list[str], pairs: int, rtt: float, go_binary: Path | None
) -> dict[tuple[str, str], list[tuple[float, int]]]:
    """Every client's pairs on memory:// ("memory") or the layer in front of the emulator."""
    from pullqueue import Settings, connect
    from pullqueue.adapters.pubsub import PubSubBackend
    from pullqueue.compat import taskqueue as compat
    from tests.support.emulators import shared_emulator_host
    from tests.support.realpubsub import Knobs, RealisticPubSub

    results: dict[tuple[str, str], list[tuple[float, int]]] = {}
    with ExitStack() as stack:
        if kind == "memory":
            url = "memory://"
            backend = connect(url)
            counted: Callable[[], Any] = _nothing
        else:
            layer = stack.enter_context(
                RealisticPubSub(shared_emulator_host("pubsub"), Knobs.service(rtt), seed=32)
            )
            project = f"brsvc-{uuid.uuid4().hex[:8]}"
            url = f"pubsub://{project}"
            with layer.as_emulator():
                backend = PubSubBackend(project, settings=Settings(), auto_create=True)
            counted = layer.counting
        stack.callback(backend.close)
        port = None
        if set(clients) & {"python", "go"}:
            # memory:// lives in its process: each bridged client's queue is filled through it.
            with layer.as_emulator() if kind != "memory" else _nothing():
                port = free_port()
                stack.enter_context(bridge_process(url, port))
        for op in OPS:
            for client in clients:
                name = f"{client}-{op}"
                if client == "compat":
                    queue = compat.Queue(name, backend)
                    fill(queue, compat.Task, 50)
                    results[(client, op)] = python_pairs(queue, op, pairs, counted)
                    continue
                assert port is not None
                tq = sdk_taskqueue(port)
                fill(tq.Queue(name), tq.Task, 50)
                if client == "python":
                    results[(client, op)] = python_pairs(tq.Queue(name), op, pairs, counted)
                else:
                    assert go_binary is not None
                    results[(client, op)] = go_pairs(go_binary, port, name, op, pairs, counted)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rtt-ms", type=float, default=30.0)
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--clients", nargs="+", default=["compat", "python", "go"])
    args = parser.parse_args(argv)
    os.environ.setdefault("PULLQUEUE_DEDUPE_URL", "memory://")
    clients = ["compat", *[c for c in args.clients if c != "compat"]]
    from tests.support.emulators import shared_emulator_host

    shared_emulator_host("pubsub")
    with tempfile.TemporaryDirectory(prefix="bridge-service-") as tmp:
        go_binary = build_go(Path(tmp)) if "go" in clients else None
        print(f"load average: {Path('/proc/loadavg').read_text().strip()}")
        memory = one_backend("memory", clients, args.pairs, 0, go_binary)
        layer = one_backend("layer", clients, args.pairs, args.rtt_ms / 1000, go_binary)
    print(
        f"layer: {args.rtt_ms:g} ms round trips, partial pulls, filters, held empty pulls, cap;"
        f" medians of {args.pairs} lease + delete pairs (100 tasks, 50 tags)"
    )
    print(
        f"{'op':7} {'client':7} {'layer ms':>9} {'calls':>6} {'ratio':>6} {'added ms':>9}"
        f" {'hop ms':>7} {'hops':>5}  (memory ms)  target: hops <= 2 per pair"
    )
    for op in OPS:
        base = statistics.median(ms for ms, _ in layer[("compat", op)])
        base_memory = statistics.median(ms for ms, _ in memory[("compat", op)])
        for client in clients:
            ms = statistics.median(m for m, _ in layer[(client, op)])
            calls = statistics.median(c for _, c in layer[(client, op)])
            on_memory = statistics.median(m for m, _ in memory[(client, op)])
            added = ms - base
            hop = on_memory - base_memory
            hops = f"{added / hop:5.1f}" if client != "compat" and hop > 0 else "    -"
            print(
                f"{op:7} {client:7} {ms:9.1f} {calls:6.0f} {ms / base:6.2f} {added:9.1f}"
                f" {hop:7.2f} {hops}  ({on_memory:.2f})",
                flush=True,
            )
    print(f"load average: {Path('/proc/loadavg').read_text().strip()}")


if __name__ == "__main__":
    main()
