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


class _Answer:
    status = 200
    reason = "OK"

    def __init__(self, data: bytes) -> None:
        self.data = data


class LocalAnswerer:
    """Stands in for the SDK's urllib3 pool: answers each call in this process with the bridge's
    own service, no HTTP. What the SDK costs its caller anyway (it builds the request and a Task
    per task on App Engine too), against which the bridge's added time is counted."""

    def __init__(self, backend: Any) -> None:
        from pullqueue.bridge import wire
        from pullqueue.bridge.taskqueue import TaskQueueService

        self.wire = wire
        self.service = TaskQueueService(backend)

    def request(self, *, body: bytes, **_: Any) -> _Answer:
        call = self.wire.decode_call(body)
        try:
            answer = self.wire.ok(
                self.service.call(call.method, call.request, time.monotonic() + 60)
            )
        except self.wire.ApplicationFailure as failure:
            answer = self.wire.application_error(failure.code, failure.detail)
        return _Answer(answer)


def sdk_local(backend: Any) -> Any:
    """Google's taskqueue module answered in this process by LocalAnswerer (no bridge)."""
    from google.appengine.api import apiproxy_stub_map

    tq = sdk_taskqueue(1)
    stub = apiproxy_stub_map.apiproxy.GetStub("taskqueue")
    stub.http = LocalAnswerer(backend)
    return tq


def cpu_of(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fill(queue: Any, task_class: Any, count: int) -> None:
    for start in range(0, count, 100):
        queue.add([task_class(payload=f"p{i}", method="PULL") for i in range(start, start + 100)])


def loop(queue: Any, count: int) -> list[float]:
    """count lease(100)+delete pairs on queue; the latency of each call."""
    latencies: list[float] = []
    for _ in range(count):
        started = time.perf_counter()
        batch = queue.lease_tasks(60, LEASE)
        leased = time.perf_counter()
        queue.delete_tasks(batch)
        latencies += [leased - started, time.perf_counter() - leased]
    return latencies


class Run:
    """One measured setting: pairs per second, call latencies, CPU seconds on each side."""

    def __init__(self, rate: float, latencies: list[float], client_cpu: float, bridge_cpu: float):
        self.rate = rate
        self.latencies = latencies
        self.client_cpu = client_cpu
        self.bridge_cpu = bridge_cpu


def pairs(
    queue_of: Callable[[], Any],
    clients: int,
    per_client: int,
    setup: Callable[[], None],
    bridge_pid: int | None = None,
) -> Run:
    """Run `clients` threads of lease(100)+delete pairs."""
    latencies: list[float] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def client() -> None:
        setup()
        queue = queue_of()
        try:
            mine = loop(queue, per_client)
        except BaseException as exc:
            errors.append(exc)
            return
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    bridge_before = cpu_of(bridge_pid) if bridge_pid else 0.0
    cpu_before = time.process_time()
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    client_cpu = time.process_time() - cpu_before
    bridge_cpu = cpu_of(bridge_pid) - bridge_before if bridge_pid else 0.0
    if errors:
        raise errors[0]
    return Run(clients * per_client / elapsed, latencies, client_cpu, bridge_cpu)


def pairs_worker(kind: str, target: str, per_client: str, tmp: str, index: str) -> None:
    """One client process: fills its share (in-process kinds), waits for the start, runs."""
    count = int(per_client)
    if kind in ("inproc", "sdklocal"):
        from pullqueue import connect
        from pullqueue.compat import taskqueue as compat

        backend = connect(target, auto_create=True)
        fill(compat.Queue(QUEUE, backend), compat.Task, (count + 1) * LEASE)
        if kind == "inproc":
            queue: Any = compat.Queue(QUEUE, backend)
        else:
            queue = sdk_local(backend).Queue(QUEUE)
    elif kind == "sdk":
        queue = sdk_taskqueue(int(target)).Queue(QUEUE)
    else:
        queue = RawQueue(int(target), QUEUE)
    queue.delete_tasks(queue.lease_tasks(60, 1))  # imports and connection before the start
    Path(tmp, f"ready-{index}").write_text("")
    while not Path(tmp, "go").exists():
        time.sleep(0.001)
    cpu = time.process_time()
    latencies = loop(queue, count)
    report = {"latencies": latencies, "cpu": time.process_time() - cpu, "end": time.time()}
    Path(tmp, f"out-{index}.json").write_text(json.dumps(report))


def process_pairs(
    kind: str, target: str, clients: int, per_client: int, bridge_pid: int | None = None
) -> Run:
    """Run `clients` OS processes of lease(100)+delete pairs (no GIL shared between clients)."""
    with tempfile.TemporaryDirectory(prefix="bridgebench-") as tmp:
        workers = [
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--pairs-worker",
                    kind,
                    target,
                    str(per_client),
                    tmp,
                    f"{n}",
                ]
            )
            for n in range(clients)
        ]
        while len(list(Path(tmp).glob("ready-*"))) < clients:
            if any(w.poll() not in (None, 0) for w in workers):
                raise SystemExit("a client process failed to start")
            time.sleep(0.01)
        bridge_before = cpu_of(bridge_pid) if bridge_pid else 0.0
        started = time.time()
        Path(tmp, "go").write_text("")
        for w in workers:
            if w.wait() != 0:
                raise SystemExit(f"a client process exited with {w.returncode}")
        bridge_cpu = cpu_of(bridge_pid) - bridge_before if bridge_pid else 0.0
        reports = [json.loads(Path(tmp, f"out-{n}.json").read_text()) for n in range(clients)]
    elapsed = max(r["end"] for r in reports) - started
    latencies = [x for r in reports for x in r["latencies"]]
    return Run(
        clients * per_client / elapsed, latencies, sum(r["cpu"] for r in reports), bridge_cpu
    )


KINDS = ("in-process", "sdk-local", "sdk", "protocol")


def one_run(backend: str, clients: int, per_client: int, processes: bool) -> dict[str, Run]:
    """One measurement of each kind of client on backend with `clients` threads or processes."""
    from pullqueue import connect
    from pullqueue.compat import taskqueue as compat

    def url() -> str:
        return "memory://" if backend == "memory" else f"pubsub://bench-{uuid.uuid4().hex[:8]}"

    tasks = clients * per_client * LEASE
    runs: dict[str, Run] = {}
    for kind in ("in-process", "sdk-local"):
        if processes:
            runs[kind] = process_pairs(
                "inproc" if kind == "in-process" else "sdklocal", url(), clients, per_client
            )
            continue
        local = connect(url(), auto_create=True)
        try:
            fill(compat.Queue(QUEUE, local), compat.Task, tasks)
            if kind == "in-process":
                runs[kind] = pairs(
                    lambda local=local: compat.Queue(QUEUE, local),
                    clients,
                    per_client,
                    lambda: None,
                )
            else:
                tq = sdk_local(local)
                runs[kind] = pairs(lambda tq=tq: tq.Queue(QUEUE), clients, per_client, in_thread)
        finally:
            local.close()
    port = free_port()
    with bridge_process(url(), port) as bridge:
        tq = sdk_taskqueue(port)
        fill(tq.Queue(QUEUE), tq.Task, 2 * tasks)
        if processes:
            runs["sdk"] = process_pairs("sdk", str(port), clients, per_client, bridge.pid)
            runs["protocol"] = process_pairs("proto", str(port), clients, per_client, bridge.pid)
        else:
            runs["sdk"] = pairs(lambda: tq.Queue(QUEUE), clients, per_client, in_thread, bridge.pid)
            runs["protocol"] = pairs(
                lambda: RawQueue(port, QUEUE), clients, per_client, lambda: None, bridge.pid
            )
    return runs


BASELINE = {"sdk-local": "in-process", "sdk": "sdk-local", "protocol": "in-process"}


def throughput(args: argparse.Namespace) -> None:
    print(f"load average: {Path('/proc/loadavg').read_text().strip()}")
    print(
        "pairs/s of lease(100)+delete; ratio to in-process; ms: median per call; added: ms minus"
        " the baseline's (sdk-local: the SDK answered in-process, no bridge; protocol:"
        " in-process); CPU us per call in the bridge process and in the clients; Little:"
        " clients x bridge CPU per call, the least median latency the bridge's CPU allows"
    )
    print(
        f"{'backend':8} {'clients':>7} {'as':>9} {'client':>10} {'pairs/s':>8} {'ratio':>6}"
        f" {'ms':>7} {'added':>7} {'bridge us':>9} {'client us':>9} {'Little ms':>9}"
    )
    for backend in args.backends:
        for clients in args.clients:
            per_client = args.pairs if backend == "memory" else args.emulator_pairs
            per_client = max(per_client // clients, 5)
            for how in args.clients_as:
                runs = [one_run(backend, clients, per_client, how == "processes")]
                runs += [
                    one_run(backend, clients, per_client, how == "processes")
                    for _ in range(args.runs - 1)
                ]
                calls = 2 * clients * per_client
                med: dict[str, dict[str, float]] = {}
                for kind in KINDS:
                    of = [r[kind] for r in runs]
                    med[kind] = {
                        "rate": statistics.median(r.rate for r in of),
                        "ms": statistics.median(statistics.median(r.latencies) for r in of) * 1e3,
                        "bridge": statistics.median(r.bridge_cpu for r in of) / calls * 1e6,
                        "client": statistics.median(r.client_cpu for r in of) / calls * 1e6,
                    }
                base = med["in-process"]["rate"]
                for kind in KINDS:
                    m = med[kind]
                    added = m["ms"] - med[BASELINE[kind]]["ms"] if kind in BASELINE else 0.0
                    little = clients * m["bridge"] / 1e3
                    print(
                        f"{backend:8} {clients:7d} {how:>9} {kind:>10} {m['rate']:8.0f}"
                        f" {m['rate'] / base:6.2f} {m['ms']:7.3f} {added:7.3f}"
                        f" {m['bridge']:9.0f} {m['client']:9.0f} {little:9.3f}",
                        flush=True,
                    )
    print(f"load average: {Path('/proc/loadavg').read_text().strip()}")


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
    if argv[:1] == ["--pairs-worker"]:
        pairs_worker(*argv[1:6])
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=["memory", "emulator"])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--pairs", type=int, default=2000, help="pairs per setting, memory://")
    parser.add_argument("--emulator-pairs", type=int, default=200, help="pairs, emulator")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--clients-as",
        nargs="+",
        choices=["threads", "processes"],
        default=["threads"],
        help="clients as threads of this process, or as separate OS processes (no shared GIL)",
    )
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
