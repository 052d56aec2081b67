"""Benchmark: legacy worker calls through `pullqueue bridge` against the same calls in-process.

Pairs of `lease_tasks(60, 100)` + `delete_tasks(batch)`: in-process through `pullqueue.compat`
(the baseline, the one-line import), and through a `pullqueue bridge` process by Google's own
Python SDK (`google.appengine.api.taskqueue` with its HTTP API stub), the no-code-change path.
On memory:// and on the Pub/Sub emulator, with 1 and 8 concurrent clients (threads). Prints per
setting the median over the runs of pairs per second, of the per-call latency, their ratios to
in-process, and the time the bridge adds per call.

With --sidecars: 4 bridge processes on one Pub/Sub queue, each serving one worker process (the
SDK, `lease_tasks_by_tag(60, 1000)` + delete, benchmarks/tag_batching.py's loop), 20,000 tasks
over 200 and 1,000 tags: mean tasks per lease against the legacy queue's (one whole tag per
lease: 100 and 20), lost, late, mixed and duplicate counts.

    python benchmarks/bridge.py [--backends memory emulator] [--clients 1 8] [--runs 3]
    python benchmarks/bridge.py --sidecars [--tasks 20000] [--tags 200 1000] [--runs 1]

Honours PUBSUB_EMULATOR_HOST; otherwise starts the emulator from the gcloud SDK.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import tag_batching  # noqa: E402  (benchmarks/tag_batching.py: its helpers, not edited here)

QUEUE = "bridgebench"
LEASE = 100
PULLQUEUE = [sys.executable, "-c", "from pullqueue.cli import main; main()"]


def free_port() -> int:
    from pullqueue.listen import free_port as port

    return port()


@contextmanager
def bridge_process(url: str, port: int) -> Iterator[subprocess.Popen[str]]:
    """`pullqueue bridge --url url` on 127.0.0.1:port, stopped with SIGTERM afterwards."""
    process = subprocess.Popen(
        [*PULLQUEUE, "bridge", "--url", url, "--listen", f"127.0.0.1:{port}"],
        env={**os.environ, "PULLQUEUE_AUTO_CREATE": "1"},
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    line = process.stderr.readline()
    if "serving taskqueue" not in line:
        raise SystemExit(f"the bridge did not start: {line}")
    try:
        yield process
    finally:
        process.terminate()
        process.wait(60)


def sdk_taskqueue(port: int) -> Any:
    """Google's taskqueue module posting to the bridge on port (for this and new threads)."""
    from google.appengine.api import apiproxy_stub_map
    from google.appengine.api import taskqueue as tq
    from google.appengine.runtime import default_api_stub

    # HTTP_HOST: set per request on App Engine; without it the SDK logs a warning per task.
    os.environ.update(
        API_HOST="127.0.0.1",
        API_PORT=str(port),
        HTTP_X_APPENGINE_API_TICKET="bench",
        HTTP_HOST="localhost",
    )
    apiproxy_stub_map.apiproxy = apiproxy_stub_map.APIProxyStubMap()
    apiproxy_stub_map.apiproxy.RegisterStub("taskqueue", default_api_stub.DefaultApiStub())
    default_api_stub.DefaultApiStub.SetUseRequestSecurityTicketForThread(True)
    return tq


def in_thread() -> None:
    from google.appengine.runtime import default_api_stub

    default_api_stub.DefaultApiStub.SetUseRequestSecurityTicketForThread(True)


class RawQueue:
    """A minimal client of the bridge's protocol (one keep-alive connection per queue object):
    what the bridge adds, without the SDK's own work (it builds a Task object per task)."""

    def __init__(self, port: int, name: str) -> None:
        import http.client

        self.connection = http.client.HTTPConnection("127.0.0.1", port)
        self.name = name.encode()

    def _call(self, method: str, request: Any, answer: Any) -> Any:
        from pullqueue.bridge.proto.remote_api_pb2 import Request, Response

        body = Request(
            service_name="taskqueue",
            method=method,
            request=request.SerializeToString(),
            request_id="bench",
        ).SerializeToString()
        self.connection.request(
            "POST", "/rpc_http", body=body, headers={"Content-Type": "application/octet-stream"}
        )
        reply = Response.FromString(self.connection.getresponse().read())
        return answer.FromString(reply.response)

    def lease_tasks(self, lease_seconds: float, max_tasks: int) -> list[bytes]:
        from pullqueue.bridge.proto import taskqueue_service_pb2 as pb

        ask = pb.TaskQueueQueryAndOwnTasksRequest(
            queue_name=self.name, lease_seconds=lease_seconds, max_tasks=max_tasks
        )
        reply = self._call("QueryAndOwnTasks", ask, pb.TaskQueueQueryAndOwnTasksResponse)
        return [task.task_name for task in reply.task]

    def delete_tasks(self, names: list[bytes]) -> None:
        from pullqueue.bridge.proto import taskqueue_service_pb2 as pb

        ask = pb.TaskQueueDeleteRequest(queue_name=self.name, task_name=names)
        self._call("Delete", ask, pb.TaskQueueDeleteResponse)


def fill(queue: Any, task_class: Any, count: int) -> None:
    for start in range(0, count, 100):
        queue.add([task_class(payload=f"p{i}", method="PULL") for i in range(start, start + 100)])


def pairs(
    queue_of: Callable[[], Any], clients: int, per_client: int, setup: Callable[[], None]
) -> tuple[float, list[float]]:
    """Run `clients` threads of lease(100)+delete pairs; (pairs per second, call latencies)."""
    latencies: list[float] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def client() -> None:
        setup()
        queue = queue_of()
        mine: list[float] = []
        try:
            for _ in range(per_client):
                started = time.perf_counter()
                batch = queue.lease_tasks(60, LEASE)
                leased = time.perf_counter()
                queue.delete_tasks(batch)
                done = time.perf_counter()
                mine += [leased - started, done - leased]
        except BaseException as exc:
            errors.append(exc)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise errors[0]
    return clients * per_client / elapsed, latencies


def one_run(backend: str, clients: int, per_client: int) -> dict[str, float]:
    """One measurement of in-process and bridged pairs on backend with clients threads."""
    from pullqueue import connect
    from pullqueue.compat import taskqueue as compat

    tasks = clients * per_client * LEASE
    url = "memory://" if backend == "memory" else f"pubsub://bench-{uuid.uuid4().hex[:8]}"
    local = connect(url, auto_create=True)
    try:
        fill(compat.Queue(QUEUE, local), compat.Task, tasks)
        rate_in, lat_in = pairs(
            lambda: compat.Queue(QUEUE, local), clients, per_client, lambda: None
        )
    finally:
        local.close()
    if backend != "memory":
        url = f"pubsub://bench-{uuid.uuid4().hex[:8]}"
    port = free_port()
    with bridge_process(url, port):
        tq = sdk_taskqueue(port)
        fill(tq.Queue(QUEUE), tq.Task, 2 * tasks)
        rate_br, lat_br = pairs(lambda: tq.Queue(QUEUE), clients, per_client, in_thread)
        rate_raw, lat_raw = pairs(lambda: RawQueue(port, QUEUE), clients, per_client, lambda: None)
    return {
        "in_process_pairs_s": rate_in,
        "bridge_pairs_s": rate_br,
        "raw_pairs_s": rate_raw,
        "in_process_call_ms": statistics.median(lat_in) * 1e3,
        "bridge_call_ms": statistics.median(lat_br) * 1e3,
        "raw_call_ms": statistics.median(lat_raw) * 1e3,
    }


def throughput(args: argparse.Namespace) -> None:
    print(
        "pairs/s: in-process (pullqueue.compat), through the bridge by the Python SDK, and by a"
        " minimal protocol client; ms: median per call; added: bridge minus in-process"
    )
    print(
        f"{'backend':8} {'clients':>7} {'in-proc/s':>10} {'sdk/s':>8} {'ratio':>6}"
        f" {'proto/s':>8} {'ratio':>6} {'ms in-proc':>10} {'ms sdk':>8} {'ms proto':>9}"
        f" {'added sdk':>10} {'added proto':>12}"
    )
    for backend in args.backends:
        for clients in args.clients:
            per_client = args.pairs if backend == "memory" else args.emulator_pairs
            runs = [
                one_run(backend, clients, max(per_client // clients, 5)) for _ in range(args.runs)
            ]
            med = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
            base = med["in_process_pairs_s"]
            print(
                f"{backend:8} {clients:7d} {base:10.0f} {med['bridge_pairs_s']:8.0f}"
                f" {med['bridge_pairs_s'] / base:6.2f} {med['raw_pairs_s']:8.0f}"
                f" {med['raw_pairs_s'] / base:6.2f} {med['in_process_call_ms']:10.3f}"
                f" {med['bridge_call_ms']:8.3f} {med['raw_call_ms']:9.3f}"
                f" {med['bridge_call_ms'] - med['in_process_call_ms']:10.3f}"
                f" {med['raw_call_ms'] - med['in_process_call_ms']:12.3f}",
                flush=True,
            )


# sidecars


def sidecar_worker(port: str, tmp: str, index: str, total: str) -> None:
    """One worker process: the SDK through its own bridge, tag_batching's loop."""
    tq = sdk_taskqueue(int(port))
    Path(tmp, f"ready-{index}").write_text("")
    while not Path(tmp, "go").exists():
        time.sleep(0.01)
    progress = Path(tmp, f"progress-{index}")

    def drained(done: int) -> bool:
        progress.write_text(str(done))
        counts = [p.read_text() for p in Path(tmp).glob("progress-*")]
        return sum(int(c) for c in counts if c) >= int(total)

    batches = tag_batching.work(tq.Queue(tag_batching.QUEUE), tag_batching.IDLE_SECONDS, drained)
    Path(tmp, f"out-{index}.json").write_text(json.dumps({"batches": batches}))


def run_sidecars(pairs_: list[tuple[str, str]], processes: int) -> tag_batching.Outcome:
    from pullqueue import Settings
    from pullqueue.adapters.pubsub import PubSubBackend
    from pullqueue.compat import taskqueue

    project = f"bench-{uuid.uuid4().hex[:8]}"
    producer = PubSubBackend(project, settings=Settings(), auto_create=True)
    try:
        tag_batching.add_all(taskqueue.Queue(tag_batching.QUEUE, producer), pairs_)
    finally:
        producer.close()
    ports = [free_port() for _ in range(processes)]
    with tempfile.TemporaryDirectory(prefix="bridgebench-") as tmp:
        bridges = [bridge_process(f"pubsub://{project}", port) for port in ports]
        for bridge in bridges:
            bridge.__enter__()
        try:
            workers = [
                subprocess.Popen(
                    [
                        sys.executable,
                        __file__,
                        "--sidecar-worker",
                        str(port),
                        tmp,
                        str(n),
                        str(len(pairs_)),
                    ]
                )
                for n, port in enumerate(ports)
            ]
            while len(list(Path(tmp).glob("ready-*"))) < processes:
                if any(w.poll() not in (None, 0) for w in workers):
                    raise SystemExit("a worker failed to start")
                time.sleep(0.05)
            start = time.time()
            Path(tmp, "go").write_text(str(start))
            for w in workers:
                if w.wait() != 0:
                    raise SystemExit(f"worker exited with {w.returncode}")
        finally:
            for bridge in bridges:
                bridge.__exit__(None, None, None)
        batches = []
        for n in range(processes):
            report = json.loads(Path(tmp, f"out-{n}.json").read_text())
            batches += [tuple(b) for b in report["batches"]]
    outcome = tag_batching.summarize(pairs_, batches, start)  # type: ignore[arg-type]
    if outcome.lost:
        outcome.late = tag_batching.recover(
            project,
            {name for name, _ in pairs_} - {n for _, names, _ in batches for n in names},  # type: ignore[misc]
        )
        outcome.lost -= outcome.late
    return outcome


def sidecars(args: argparse.Namespace) -> None:
    print(
        f"{'tags':>5} {'legacy per lease':>17} {'sidecars per lease':>19} {'ratio':>6}"
        f" {'drain s':>8} {'lost':>5} {'late':>5} {'mixed':>6} {'dups':>5}"
    )
    for tags in args.tags:
        outcomes = []
        for run in range(args.runs):
            work = tag_batching.tasks_for(args.tasks, tags, seed=run)
            legacy = tag_batching.run_memory(work)
            outcomes.append((legacy, run_sidecars(work, args.processes)))
        legacy_mean = statistics.median(o[0].mean_batch for o in outcomes)
        mean = statistics.median(o[1].mean_batch for o in outcomes)
        print(
            f"{tags:5d} {legacy_mean:17.1f} {mean:19.1f} {mean / legacy_mean:6.2f}"
            f" {statistics.median(o[1].drain for o in outcomes):8.1f}"
            f" {max(o[1].lost for o in outcomes):5d} {max(o[1].late for o in outcomes):5d}"
            f" {max(o[1].mixed for o in outcomes):6d} {max(o[1].duplicates for o in outcomes):5d}",
            flush=True,
        )


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--sidecar-worker"]:
        sidecar_worker(*argv[1:5])
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=["memory", "emulator"])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--pairs", type=int, default=2000, help="pairs per setting, memory://")
    parser.add_argument("--emulator-pairs", type=int, default=200, help="pairs, emulator")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sidecars", action="store_true")
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--tags", type=int, nargs="+", default=[200, 1000])
    parser.add_argument("--processes", type=int, default=4)
    args = parser.parse_args(argv)
    if args.sidecars or "emulator" in args.backends:
        from tests.support.emulators import shared_emulator_host

        shared_emulator_host("pubsub")
    if args.sidecars:
        sidecars(args)
    else:
        throughput(args)


if __name__ == "__main__":
    main()
