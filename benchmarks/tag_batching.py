"""Benchmark: batching by tag with several worker processes, memory:// against Pub/Sub, in one run.

A migrated counter adds N tasks over T tags in random order, then P worker processes (real OS
processes, each with H threads) loop `lease_tasks_by_tag(60, 1000)` -> handle ->
`delete_tasks(batch)` through `pullqueue.compat.taskqueue` until the queue is empty. memory://
cannot be shared between processes, so its figure is the same loop in one process (the legacy
queue's batches: one whole tag per lease). Prints, per tag count and backend, the medians over the
runs of: mean tasks per non-empty lease, its ratio to memory://, drain seconds, tasks per second,
empty leases while tasks were left, lost and late counts (late: leased only after the workers
stopped, within 90 s), mixed-tag and duplicate counts, Pub/Sub requests per lease, deliveries per
task (one each plus those given back unleased) and the workers' peak memory growth (MB).

`--stop-at-first-empty`: each thread stops at its first empty lease, as the legacy docs tell a
worker to; the `left` column counts the tasks no worker leased (tasks a stopped process gave back
at exit count). `--payload-bytes B ...`: payloads of B bytes (each size in turn); `--plain` adds
a row of plain `lease_tasks` on the same workload, the throughput a lease by tag is compared with,
and prints the ratio of the two. `--max-tasks M`: every lease asks for M tasks; for a like-for-like
comparison give each tag at least M tasks (tasks >= M x tags), so that both calls can return M.
`peak MB` is a worker process's largest resident size during the drain (Linux's VmHWM, restarted
when the drain begins), `grown MB` that less its size then, `in use MB` the most glibc's malloc
had handed out and not had back at once during the drain, less at its start (what the process
kept alive; the resident size adds freed memory the allocator keeps; 0 without glibc, and
below 10 KB payloads, where it is not sampled).
`--work` adds a row of real `pullqueue work --group-by-tag --concurrency THREADS` processes
(`--processes` of them) with the batch handler benchmarks/work_recorder.py:record (`--work-plain`
a row `work-pl` of the same without --group-by-tag, leasing plainly; `--work-per-task` gives
both the per-task handler record_task instead, its tasks put back together by lease); its
calls/lease column is lease calls per non-empty lease, its drain time counts from the
processes' start; a line under the ratios gives their start-up (to the slowest process's first
lease call) and their ratio to the raw row past it, whose processes start before its clock.
`--shards N`: the Pub/Sub queue is provisioned with N shard topics (default
16; the workers read it from the queue topic's label).
`--rtt-ms MS`: a realistic layer (tests/support/realpubsub.py, `Knobs.service(MS / 1000)`: that
round trip, partial pulls, filters, held empty pulls, the 600 s cap) is put in front of the
emulator, and every client goes through it: the workers and `pullqueue work` processes (their
PUBSUB_EMULATOR_HOST is the layer's address), and this process's adds and recovery; the workers'
adapters take empty pulls as held from the start, as a client of Pub/Sub itself does (the
layer's emulator host would hide that: their first looks waited a pull wait). `--raw` adds
a row `raw`: the raw google-cloud-pubsub SubscriberClient in the same P processes x H threads
looping pull(max_messages=100, timeout 2 s) + acknowledge on ONE subscription that holds the same
tasks (published beforehand with the raw PublisherClient, untimed), until the acks counted across
processes reach the queue's size, measured as the other rows (its batch is tasks per non-empty
pull, calls/lease pulls and acks per non-empty pull, mixed its pulls of several tags); then each
pullqueue row's tasks/s over the raw row's (`plain / raw tasks/s: 0.85`). Under the ratios: the
median ms of a non-empty lease and of its delete per row (raw: of a pull and of its ack), and
with --rtt-ms the messages of pull answers the layer dropped as arriving after the client's
deadline (they stay out until their ack deadline: the `late` tasks).

    python benchmarks/tag_batching.py [--tasks 20000] [--tags 200 1000] [--processes 4]
        [--threads 1] [--runs 3] [--stop-at-first-empty] [--payload-bytes 0 ...] [--plain]
        [--max-tasks 1000] [--shards 16] [--work] [--work-plain] [--work-per-task] [--raw]
        [--rtt-ms 30]

Honours PUBSUB_EMULATOR_HOST; otherwise starts the emulator from the gcloud SDK (stopped at exit).
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import itertools
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

IDLE_SECONDS = 30.0
"""A worker gives up after this long without a non-empty lease."""
RECOVER_SECONDS = 90.0
"""How long the benchmark then leases what is left: a task found is counted late, not lost (a
pull whose answer came after the client's deadline hides its messages for their ack deadline,
60 s, and Pub/Sub then delivers them again)."""
QUEUE = "tagbench"
WORK_IDLE = 5.0
"""--work: a `pullqueue work` process exits after this long without a task."""
RAW_MAX = 100
"""--raw: max_messages of each raw client pull."""
RAW_PULL_TIMEOUT = 2.0
"""--raw: seconds a raw pull waits (held, on the layer, while nothing waits); a worker stops once
the acks counted across processes reach the queue's size."""
RAW_SUBSCRIPTION = "tagbench-raw"
WORK_LEASE_RATE = 1000
"""--work: PULLQUEUE_LEASE_REQUESTS_PER_SECOND, high enough that the legacy client-side cap of 10
lease calls a second does not decide the drain time (the benchmark's own loop has no cap)."""


@dataclass
class Outcome:
    mean_batch: float
    drain: float
    lost: int
    mixed: int
    duplicates: int
    leases: int
    calls_per_lease: float = 0.0
    """Pub/Sub requests (pull, modifyAckDeadline, acknowledge, publish) per non-empty lease."""
    deliveries_per_task: float = 1.0
    """Deliveries per task: one each, plus deliveries given back unleased, plus duplicates."""
    late: int = 0
    """Tasks the workers did not lease before they stopped, leased afterwards (not lost)."""
    empty: int = 0
    """Empty leases while the workers had not yet deleted every task."""
    left: int = 0
    """Tasks no worker leased (stop-at-first-empty runs)."""
    grown_mb: float = 0.0
    """The largest growth of a worker process's resident size during the drain: its peak
    less its size when the drain began (MB)."""
    peak_mb: float = 0.0
    """The largest peak resident size of a worker process during the drain (MB)."""
    in_use_mb: float = 0.0
    """The largest growth of a worker process's malloc'd bytes in use during the drain (MB)."""
    rate: float = 0.0
    """Tasks per second of the drain."""
    lease_ms: float = 0.0
    """The median milliseconds of a non-empty lease call (the raw row: of a non-empty pull)."""
    delete_ms: float = 0.0
    """The median milliseconds of a delete_tasks call (the raw row: of an acknowledge)."""
    startup: float = 0.0
    """--work: seconds from the processes' start to their first lease call (the slowest
    process's): the imports, the command's set-up and the adapter's start."""
    dropped: int = 0
    """--rtt-ms: messages in pull answers the layer dropped as arriving after the client's
    deadline (hidden until their ack deadline: the `late` tasks come from these)."""


def tasks_for(count: int, tags: int, seed: int) -> list[tuple[str, str]]:
    """(name, tag) pairs: `count` tasks spread evenly over `tags` tags, in random order."""
    pairs = [(f"t{i}", f"tag-{i % tags}") for i in range(count)]
    random.Random(seed).shuffle(pairs)
    return pairs


def add_all(queue: object, pairs: list[tuple[str, str]], payload_bytes: int = 0) -> None:
    from pullqueue.compat import taskqueue

    chunk_size = 100 if payload_bytes < 50_000 else 8
    for start in range(0, len(pairs), chunk_size):
        chunk = pairs[start : start + chunk_size]
        queue.add(  # type: ignore[attr-defined]
            [
                taskqueue.Task(payload=padded(name, payload_bytes), tag=tag, method="PULL")
                for name, tag in chunk
            ]
        )


def padded(name: str, payload_bytes: int) -> bytes:
    """The task's payload: its name, then spaces up to payload_bytes."""
    return name.encode().ljust(payload_bytes, b" ")


class Progress:
    """The tasks one worker process deleted so far, shared by its threads."""

    def __init__(
        self, drained: Callable[[int], bool], record: Callable[[int], None] | None = None
    ) -> None:
        self.lock = threading.Lock()
        self.done = 0
        self._drained = drained
        self._record = record

    def add(self, count: int) -> None:
        """Count deleted tasks and say so to the other processes at once: an empty lease is
        counted only while the tasks deleted everywhere fall short of the queue."""
        with self.lock:
            self.done += count
            if self._record is not None:
                self._record(self.done)

    def drained(self) -> bool:
        with self.lock:
            return self._drained(self.done)


def work(
    queue: object,
    stop_after_idle: float,
    progress: Progress,
    *,
    first_empty: bool = False,
    plain: bool = False,
    max_tasks: int = 1000,
) -> tuple[list[tuple[float, list[str], list[str]]], int]:
    """The migrated worker's loop until `progress` says every worker's deletes add up to the
    whole queue (or nothing came for stop_after_idle seconds, or at the first empty lease);
    (time of delete, names, tags) per non-empty lease, and the empty leases while tasks were
    left."""
    batches: list[tuple[float, list[str], list[str]]] = []
    idle_since = time.monotonic()
    empty = 0
    while True:
        lease = queue.lease_tasks if plain else queue.lease_tasks_by_tag  # type: ignore[attr-defined]
        began = time.perf_counter()
        batch = lease(60, max_tasks)
        leased = time.perf_counter()
        if not batch:
            if progress.drained():
                break
            empty += 1
            if first_empty or time.monotonic() - idle_since >= stop_after_idle:
                break
            continue
        names = [name_of(task) for task in batch]
        tags = [task.tag for task in batch]
        queue.delete_tasks(batch)  # type: ignore[attr-defined]
        note_timing(began, leased)
        batches.append((time.time(), names, tags))
        progress.add(len(batch))
        idle_since = time.monotonic()
    return batches, empty


Batches = list[tuple[float, list[str], list[str]]]
TIMINGS: list[tuple[float, float]] = []
"""(lease ms, delete ms) of each non-empty lease of this worker process, in every thread."""


def note_timing(began: float, leased: float) -> None:
    """Note a lease that began at `began`, answered at `leased` and was deleted just now."""
    TIMINGS.append(((leased - began) * 1000, (time.perf_counter() - leased) * 1000))


def work_threads(
    queue: object, threads: int, stop_after_idle: float, progress: Progress, **options: Any
) -> tuple[Batches, int]:
    """work() in `threads` threads of this process at once; their batches and empty leases."""
    return run_threads(threads, lambda: work(queue, stop_after_idle, progress, **options))


def run_threads(threads: int, loop: Callable[[], tuple[Batches, int]]) -> tuple[Batches, int]:
    """`loop` in `threads` threads of this process at once; their batches and empty leases."""
    results: list[tuple[Batches, int]] = []
    lock = threading.Lock()

    def run() -> None:
        result = loop()
        with lock:
            results.append(result)

    pool = [threading.Thread(target=run) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return [b for batches, _ in results for b in batches], sum(e for _, e in results)


def name_of(task: Any) -> str:
    """The task's name as the benchmark wrote it (its payload, less the padding)."""
    payload = task.payload
    return payload.decode().rstrip(" ") if isinstance(payload, bytes) else str(payload).rstrip()


def raw_work(subscriber: Any, subscription: str, progress: Progress) -> tuple[Batches, int, int]:
    """The raw google-cloud-pubsub client's loop: pull(max_messages=RAW_MAX) + acknowledge until
    `progress` says every process's acks add up to the whole queue; (time of ack, names, tags)
    per non-empty pull, the empty pulls while tasks were left, and the calls made."""
    from google.api_core import exceptions

    batches: Batches = []
    empty = calls = 0
    while not progress.drained():
        calls += 1
        began = time.perf_counter()
        try:
            answer = subscriber.pull(
                request={"subscription": subscription, "max_messages": RAW_MAX},
                timeout=RAW_PULL_TIMEOUT,
            )
        except (exceptions.DeadlineExceeded, exceptions.ServiceUnavailable):
            received = []
        else:
            received = list(answer.received_messages)
        if not received:
            if not progress.drained():
                empty += 1
            continue
        calls += 1
        leased = time.perf_counter()
        subscriber.acknowledge(
            request={"subscription": subscription, "ack_ids": [m.ack_id for m in received]},
            timeout=30,
        )
        note_timing(began, leased)
        names = [m.message.data.decode() for m in received]
        tags = [m.message.attributes.get("tag", "") for m in received]
        batches.append((time.time(), names, tags))
        progress.add(len(received))
    return batches, empty, calls


def raw_clients() -> tuple[Any, Any]:
    """The raw google-cloud-pubsub publisher and subscriber (PUBSUB_EMULATOR_HOST's)."""
    from google.auth.credentials import AnonymousCredentials
    from google.pubsub_v1 import PublisherClient, SubscriberClient

    return (
        PublisherClient(credentials=AnonymousCredentials()),  # type: ignore[no-untyped-call]
        SubscriberClient(credentials=AnonymousCredentials()),  # type: ignore[no-untyped-call]
    )


def fill_raw(pairs: list[tuple[str, str]], payload_bytes: int) -> str:
    """A new emulator project with one topic and ONE subscription holding the tasks, published
    with the raw client (100 a call, the tag as an attribute): its id."""
    project = f"bench-{uuid.uuid4().hex[:8]}"
    publisher, subscriber = raw_clients()
    try:
        topic = publisher.create_topic(name=f"projects/{project}/topics/{RAW_SUBSCRIPTION}").name
        subscriber.create_subscription(
            request={
                "name": f"projects/{project}/subscriptions/{RAW_SUBSCRIPTION}",
                "topic": topic,
                "ack_deadline_seconds": 60,
            }
        )
        chunk_size = 100 if payload_bytes < 50_000 else 8
        for start in range(0, len(pairs), chunk_size):
            publisher.publish(
                topic=topic,
                messages=[
                    {"data": padded(name, payload_bytes), "attributes": {"tag": tag}}
                    for name, tag in pairs[start : start + chunk_size]
                ],
                timeout=60,
            )
    finally:
        publisher.transport.close()
        subscriber.transport.close()
    return project


def summarize(
    pairs: list[tuple[str, str]], batches: list[tuple[float, list[str], list[str]]], start: float
) -> Outcome:
    seen = [name for _, names, _ in batches for name in names]
    unique = set(seen)
    missing = sorted({name for name, _ in pairs} - unique)
    if missing:
        print(f"not leased by the workers: {len(missing)}, e.g. {missing[:5]}", file=sys.stderr)
    return Outcome(
        mean_batch=len(seen) / max(len(batches), 1),
        drain=max((t for t, _, _ in batches), default=start) - start,
        lost=len({name for name, _ in pairs} - unique),
        mixed=sum(1 for _, _, tags in batches if len(set(tags)) > 1),
        duplicates=len(seen) - len(unique),
        leases=len(batches),
    )


def run_memory(pairs: list[tuple[str, str]], max_tasks: int = 1000) -> Outcome:
    from pullqueue import connect
    from pullqueue.compat import taskqueue

    queue = taskqueue.Queue(QUEUE, connect("memory://"))
    add_all(queue, pairs)
    start = time.time()
    batches, _ = work(queue, 0.0, Progress(lambda done: True), max_tasks=max_tasks)
    return summarize(pairs, batches, start)


def fill_pubsub(pairs: list[tuple[str, str]], payload_bytes: int, shards: int | None) -> str:
    """A new emulator project whose queue (of `shards` shards) holds the tasks: its id."""
    from pullqueue import Settings
    from pullqueue.adapters.pubsub import PubSubBackend
    from pullqueue.compat import taskqueue

    project = f"bench-{uuid.uuid4().hex[:8]}"
    producer = PubSubBackend(project, settings=Settings(pubsub_shards=shards), auto_create=True)
    try:
        add_all(taskqueue.Queue(QUEUE, producer), pairs, payload_bytes)
    finally:
        producer.close()
    return project


def run_pubsub(
    pairs: list[tuple[str, str]],
    processes: int,
    threads: int = 1,
    *,
    payload_bytes: int = 0,
    first_empty: bool = False,
    plain: bool = False,
    raw: bool = False,
    shards: int | None = None,
    max_tasks: int = 1000,
) -> Outcome:
    """The P x H workers' drain; `raw`: the raw client's pull + ack on one subscription."""
    project = fill_raw(pairs, payload_bytes) if raw else fill_pubsub(pairs, payload_bytes, shards)
    with tempfile.TemporaryDirectory(prefix="tagbench-") as tmp:
        go = Path(tmp, "go")
        workers = [
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--worker",
                    project,
                    tmp,
                    str(n),
                    str(len(pairs)),
                    str(threads),
                    "raw"
                    if raw
                    else "first-empty"
                    if first_empty
                    else "plain"
                    if plain
                    else "drain",
                    str(max_tasks),
                ],
                env={
                    **os.environ,
                    "PULLQUEUE_AUTO_CREATE": "1",
                    # Sampling malloc every 2 ms costs CPU: only where payloads make it count.
                    SAMPLE_MALLOC: "1" if payload_bytes >= SAMPLE_MALLOC_FROM else "",
                },
            )
            for n in range(processes)
        ]
        while len(list(Path(tmp).glob("ready-*"))) < processes:
            if any(w.poll() not in (None, 0) for w in workers):
                raise SystemExit("a worker failed to start")
            time.sleep(0.05)
        start = time.time()
        go.write_text(str(start))
        for w in workers:
            if w.wait() != 0:
                raise SystemExit(f"worker exited with {w.returncode}")
        batches = []
        calls = skipped = empty = 0
        grown = peak = in_use = 0.0
        timings: list[list[float]] = []
        for n in range(processes):
            report = json.loads(Path(tmp, f"out-{n}.json").read_text())
            batches += [tuple(b) for b in report["batches"]]
            calls += report["calls"]
            skipped += report["skipped"]
            empty += report["empty"]
            grown = max(grown, report["grown_mb"])
            peak = max(peak, report["peak_mb"])
            in_use = max(in_use, report["in_use_mb"])
            timings += report["timings"]
    outcome = summarize(pairs, batches, start)  # type: ignore[arg-type]
    if timings:
        outcome.lease_ms = statistics.median(t[0] for t in timings)
        outcome.delete_ms = statistics.median(t[1] for t in timings)
    outcome.empty, outcome.grown_mb, outcome.peak_mb = empty, grown, peak
    outcome.in_use_mb = in_use
    outcome.rate = len(pairs) / max(outcome.drain, 1e-3)
    if first_empty:
        # What the workers left is the figure; nobody leases it afterwards.
        outcome.left, outcome.lost = outcome.lost, 0
    elif outcome.lost and not raw:
        outcome.late = recover(
            project,
            {name for name, _ in pairs}
            - {
                name
                for _, names, _ in batches
                for name in names  # type: ignore[misc]
            },
        )
        outcome.lost -= outcome.late
    outcome.calls_per_lease = calls / max(outcome.leases, 1)
    outcome.deliveries_per_task = (len(pairs) + outcome.duplicates + skipped) / len(pairs)
    return outcome


def run_work(
    pairs: list[tuple[str, str]],
    processes: int,
    concurrency: int,
    *,
    payload_bytes: int = 0,
    max_tasks: int = 1000,
    shards: int | None = None,
    group_by_tag: bool = True,
    per_task: bool = False,
) -> Outcome:
    """`pullqueue work --group-by-tag --concurrency N` (without --group-by-tag unless
    `group_by_tag`) in `processes` real processes, with the batch handler
    benchmarks/work_recorder.py:record (`per_task`: the per-task handler record_task), until
    each has been idle WORK_IDLE s."""
    project = fill_pubsub(pairs, payload_bytes, shards)
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="tagbench-") as tmp:
        env = {
            **os.environ,
            "PULLQUEUE_AUTO_CREATE": "1",
            "PULLQUEUE_LEASE_REQUESTS_PER_SECOND": str(WORK_LEASE_RATE),
            "TAGBENCH_OUT": tmp,
            "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
        }
        command = [
            sys.executable,
            "-c",
            "from pullqueue.cli import main; main()",
            "work",
            QUEUE,
            f"benchmarks.work_recorder:{'record_task' if per_task else 'record'}",
            *(["--group-by-tag"] if group_by_tag else []),
            "--batch-size",
            str(max_tasks),
            "--concurrency",
            str(concurrency),
            "--url",
            f"pubsub://{project}",
            "--exit-when-idle",
            str(WORK_IDLE),
            "--max-backoff",
            "0.5",
        ]
        start = time.time()
        workers = [
            subprocess.Popen(command, env=env, cwd=root, stderr=subprocess.DEVNULL)
            for _ in range(processes)
        ]
        for w in workers:
            if w.wait() != 0:
                raise SystemExit(f"pullqueue work exited with {w.returncode}")
        batches: list[tuple[float, list[str], list[str]]] = []
        for path in Path(tmp).glob("batches-*.jsonl"):
            # The per-task handler's lines, one a task, put back together by lease.
            by_lease: dict[int, tuple[float, list[str], list[str]]] = {}
            for line in path.read_text().splitlines():
                item = json.loads(line)
                if "lease" not in item:
                    batches.append((item["t"], item["names"], item["tags"]))
                    continue
                t, names, tags = by_lease.setdefault(item["lease"], (item["t"], [], []))
                names += item["names"]
                tags += item["tags"]
                by_lease[item["lease"]] = (max(t, item["t"]), names, tags)
            batches += by_lease.values()
        leases: list[tuple[float, int]] = []
        skipped = 0
        first_calls: list[float] = []
        for path in Path(tmp).glob("leases-*.json"):
            report = json.loads(path.read_text())
            leases += [(t, n) for t, n in report["leases"]]
            skipped += report["skipped"]
            first_calls += report["first_call"]
    outcome = summarize(pairs, batches, start)
    outcome.startup = max(first_calls, default=start) - start
    # Workers started after `start`: their start-up is in the drain, as a deployment's would be.
    end = max((t for t, _, _ in batches), default=start)
    outcome.empty = sum(1 for t, n in leases if n == 0 and t <= end)
    outcome.rate = len(pairs) / max(outcome.drain, 1e-3)
    if outcome.lost:
        seen = {name for _, names, _ in batches for name in names}
        outcome.late = recover(project, {name for name, _ in pairs} - seen)
        outcome.lost -= outcome.late
    outcome.calls_per_lease = len(leases) / max(outcome.leases, 1)
    outcome.deliveries_per_task = (len(pairs) + outcome.duplicates + skipped) / len(pairs)
    return outcome


def recover(project: str, missing: set[str]) -> int:
    """Lease what the workers left for up to RECOVER_SECONDS: how many of `missing` came."""
    from pullqueue import Settings
    from pullqueue.adapters.pubsub import PubSubBackend
    from pullqueue.compat import taskqueue

    backend = PubSubBackend(project, settings=Settings(), auto_create=True)
    queue = taskqueue.Queue(QUEUE, backend)
    found: set[str] = set()
    give_up = time.monotonic() + RECOVER_SECONDS
    try:
        while found != missing and time.monotonic() < give_up:
            batch = queue.lease_tasks(60, 1000)
            found |= {name_of(task) for task in batch} & missing
            if batch:
                queue.delete_tasks(batch)
    finally:
        backend.close()
    print(f"late: {len(found)} of them leased within {RECOVER_SECONDS:.0f} s", file=sys.stderr)
    return len(found)


def worker_main(
    project: str, tmp: str, index: str, total: str, threads: str, mode: str, max_tasks: str
) -> None:
    from pullqueue import Settings
    from pullqueue.adapters.pubsub import PubSubBackend
    from pullqueue.compat import taskqueue
    from tests.support.realpubsub import AS_SERVICE_ENV, start_as_on_the_service

    backend = subscriber = None
    if mode == "raw":
        publisher, subscriber = raw_clients()
        publisher.transport.close()
        calls = [0]
    else:
        backend = PubSubBackend(project, settings=Settings(), auto_create=True)
        backend.topology(QUEUE)
        if os.environ.get(AS_SERVICE_ENV):
            start_as_on_the_service(backend.rpc)
        calls = count_calls(backend.rpc, ["pull", "modify", "ack", "publish", "seek"])
    Path(tmp, f"ready-{index}").write_text("")
    while not Path(tmp, "go").exists():
        time.sleep(0.01)
    before = start_peak()
    in_use = MallocPeak() if os.environ.get(SAMPLE_MALLOC) else None
    progress = Path(tmp, f"progress-{index}")

    def record(done: int) -> None:
        partial = Path(tmp, f"partial-progress-{index}")
        partial.write_text(str(done))
        partial.replace(progress)  # readers never see a half-written count

    def drained(done: int) -> bool:
        record(done)
        counts = [p.read_text() for p in Path(tmp).glob("progress-*")]
        return sum(int(c) for c in counts if c) >= int(total)

    try:
        if subscriber is not None:
            subscription = f"projects/{project}/subscriptions/{RAW_SUBSCRIPTION}"
            progress_ = Progress(drained, record)

            def raw_loop() -> tuple[Batches, int]:
                batches, empty, made = raw_work(subscriber, subscription, progress_)
                with progress_.lock:
                    calls[0] += made
                return batches, empty

            batches, empty = run_threads(int(threads), raw_loop)
        else:
            batches, empty = work_threads(
                taskqueue.Queue(QUEUE, backend),
                int(threads),
                IDLE_SECONDS,
                Progress(drained, record),
                first_empty=mode == "first-empty",
                plain=mode == "plain",
                max_tasks=int(max_tasks),
            )
    finally:
        if backend is not None:
            held = backend._hand(QUEUE).count()
            flying = len(backend._pulls._in_flight)
            if held or flying:
                # Tasks no lease of this process handed out: the `late` of a drain.
                print(
                    f"worker {index} stopped with {held} deliveries in hand and {flying} pulls"
                    " in flight",
                    file=sys.stderr,
                )
            backend.close()
        if subscriber is not None:
            subscriber.transport.close()
    peak_mb = peak_resident()
    grown_mb = peak_mb - before
    in_use_mb = in_use.stop() if in_use is not None else 0.0
    # Deliveries this process consumed without leasing the task (held tasks given back).
    skipped = sum(backend._book._skipped.values()) if backend is not None else 0
    report = {
        "batches": batches,
        "calls": calls[0],
        "skipped": skipped,
        "empty": empty,
        "grown_mb": grown_mb,
        "peak_mb": peak_mb,
        "in_use_mb": in_use_mb,
        "timings": TIMINGS,
    }
    Path(tmp, f"out-{index}.json").write_text(json.dumps(report))


def _status_mb(field: str) -> float | None:
    """A size from /proc/self/status (VmRSS, VmHWM) in MB; None where there is none."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def start_peak() -> float:
    """Start measuring this process's peak resident size; its resident size now (MB).

    Not getrusage's ru_maxrss: Linux carries it over exec from the process that started this
    one, so a worker started by a benchmark holding 300 MB of payloads reported 300 MB at
    start. Linux's VmHWM is this process's own peak, and clear_refs 5 restarts it here.
    """
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return _status_mb("VmRSS") or 0.0


def peak_resident() -> float:
    """This process's peak resident size (MB) since start_peak (VmHWM; else ru_maxrss)."""
    peak = _status_mb("VmHWM")
    return peak if peak is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


SAMPLE_MALLOC = "TAGBENCH_SAMPLE_MALLOC"
"""Set in a worker's environment when it samples malloc's bytes in use (`in use MB`)."""
SAMPLE_MALLOC_FROM = 10_000
"""Payload bytes from which workers sample malloc: a thread waking every 2 ms in each of 32
worker processes slowed their drain two-fold (its `in use MB` is 0 below this)."""


class MallocPeak:
    """Samples glibc's mallinfo2 every few ms in a thread: the most bytes malloc had handed out
    at once (protobufs, payloads, Python objects), the live memory, not what it keeps."""

    def __init__(self) -> None:
        self.peak = self.start = 0
        self._done = threading.Event()
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c"))
            self._info = libc.mallinfo2
        except (OSError, AttributeError, TypeError):
            return
        self._info.restype = _MallInfo2
        self.start = self.peak = self._used()
        threading.Thread(target=self._sample, daemon=True).start()

    def _used(self) -> int:
        info = self._info()
        return int(info.uordblks + info.hblkhd)

    def _sample(self) -> None:
        while not self._done.wait(0.002):
            self.peak = max(self.peak, self._used())

    def stop(self) -> float:
        """Stop sampling; the peak less the start, in MB."""
        self._done.set()
        return (self.peak - self.start) / 2**20


_MALLINFO2_HEAD = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks")


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t) for name in (*_MALLINFO2_HEAD, "uordblks", "fordblks", "keepcost")
    ]


def count_calls(rpc: object, names: list[str]) -> list[int]:
    """Count the Pub/Sub requests the backend makes (one counter, updated in place)."""
    counter = [0]
    for name in names:
        method = getattr(rpc, name)

        def counted(*args: object, _method: Any = method, **kwargs: object) -> object:
            counter[0] += 1
            return _method(*args, **kwargs)

        setattr(rpc, name, counted)
    return counter


class Dropped:
    """Counts the messages of the pull answers `layer` drops as arriving after the client's
    deadline (tests/support/realpubsub.py: the answer is lost, the messages stay out until their
    ack deadline), by wrapping its per-call methods."""

    def __init__(self, layer: Any) -> None:
        from tests.support.realpubsub import _PULL_RESPONSE

        self.messages = 0
        self._lock = threading.Lock()
        local = threading.local()
        answer, unary = layer._answer, layer.unary

        def answered(method: str, request: bytes, context: Any, *rest: Any) -> bytes:
            local.brought = 0
            out: bytes = answer(method, request, context, *rest)
            if method.endswith("/Pull"):
                local.brought = len(_PULL_RESPONSE.FromString(out).received_messages)
            return out

        def called(method: str, request: bytes, context: Any) -> bytes:
            local.brought = 0
            try:
                out: bytes = unary(method, request, context)
                return out
            except Exception:
                with self._lock:
                    self.messages += getattr(local, "brought", 0)
                raise

        layer._answer, layer.unary = answered, called


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--tags", type=int, nargs="+", default=[200, 1000])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1, help="worker threads per process")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument(
        "--stop-at-first-empty",
        action="store_true",
        help="each thread stops at its first empty lease; print what was left behind",
    )
    parser.add_argument(
        "--payload-bytes", type=int, nargs="+", default=[0], help="payload sizes (bytes), in turn"
    )
    parser.add_argument(
        "--max-tasks",
        type=int,
        default=1000,
        help="max_tasks of every lease call, by tag and plain (give the tags at least this many"
        " tasks each for a like-for-like throughput comparison)",
    )
    parser.add_argument(
        "--work",
        action="store_true",
        help="also run real `pullqueue work --group-by-tag --concurrency THREADS` processes",
    )
    parser.add_argument(
        "--work-plain",
        action="store_true",
        help="also run real `pullqueue work --concurrency THREADS` processes without"
        " --group-by-tag (row work-pl)",
    )
    parser.add_argument(
        "--work-per-task",
        action="store_true",
        help="the work rows' handler takes one task a call (work_recorder:record_task; the"
        " default is the batch handler work_recorder:record)",
    )
    parser.add_argument(
        "--plain", action="store_true", help="also run plain lease_tasks, the throughput baseline"
    )
    parser.add_argument(
        "--shards", type=int, default=None, help="shard topics of the queue (default 16)"
    )
    parser.add_argument(
        "--raw",
        action="store_true",
        help=f"also run the raw google-cloud-pubsub client's pull({RAW_MAX}) + ack on one"
        " subscription in the same processes and threads, and print each row's ratio to it",
    )
    parser.add_argument(
        "--rtt-ms",
        type=float,
        default=None,
        help="put a realistic layer (tests/support/realpubsub.py, Knobs.service) with this round"
        " trip in front of the emulator; every client and worker goes through it",
    )
    args = parser.parse_args(argv)
    from tests.support.emulators import shared_emulator_host

    host = shared_emulator_host("pubsub")
    layer = None
    if args.rtt_ms is not None:
        from tests.support.realpubsub import AS_SERVICE_ENV, Knobs, RealisticPubSub

        layer = RealisticPubSub(host, Knobs.service(args.rtt_ms / 1000))
        # shared_emulator_host pointed the variable at the emulator: the layer forwards there,
        # and every client made from now on (here and in the workers) goes through the layer.
        os.environ["PUBSUB_EMULATOR_HOST"] = layer.address
        os.environ[AS_SERVICE_ENV] = "1"
    try:
        run_all(args, host, layer, Dropped(layer) if layer is not None else None)
    finally:
        if layer is not None:
            os.environ["PUBSUB_EMULATOR_HOST"] = host
            os.environ.pop(AS_SERVICE_ENV, None)
            layer.close()


def run_all(args: argparse.Namespace, host: str, layer: Any, dropped: Dropped | None) -> None:
    print(
        f"{args.tasks} tasks, {args.processes} worker processes x {args.threads} threads,"
        f" {args.shards or 16} shards,"
        f" max_tasks {args.max_tasks}, {args.runs} run(s), emulator {host};"
        " memory:// is the same loop in one process"
        + ("; each thread stops at its first empty lease" if args.stop_at_first_empty else "")
    )
    if layer is not None:
        print(f"realistic layer on at {layer.address}: {layer.knobs}")
    if args.raw:
        print(
            f"raw: the raw google-cloud-pubsub SubscriberClient, pull(max_messages={RAW_MAX},"
            f" timeout {RAW_PULL_TIMEOUT:g} s) + acknowledge on one subscription, in the same"
            " processes and threads"
        )
    print(
        f"{'payload':>8} {'tags':>6} {'backend':<8} {'batch':>7} {'ratio':>6} {'drain s':>8}"
        f" {'tasks/s':>8}"
        f" {'leases':>7} {'empty':>6} {'left':>5} {'lost':>5} {'late':>5} {'mixed':>6}"
        f" {'dups':>5} {'calls/lease':>11} {'deliv/task':>10} {'grown MB':>8} {'peak MB':>7}"
        f" {'in use MB':>9}"
    )
    for payload_bytes, tags in itertools.product(args.payload_bytes, args.tags):
        rows: dict[str, list[Outcome]] = {"memory": [], "pubsub": []}
        if args.plain:
            rows["plain"] = []
        if args.work:
            rows["work"] = []
        if args.work_plain:
            rows["work-pl"] = []
        if args.raw:
            rows["raw"] = []

        def counted(run_row: Callable[..., Outcome], *args_: Any, **kwargs: Any) -> Outcome:
            """run_row's outcome, with the messages of pull answers the layer dropped."""
            before = dropped.messages if dropped is not None else 0
            outcome = run_row(*args_, **kwargs)
            if dropped is not None:
                outcome.dropped = dropped.messages - before
            return outcome

        for run in range(args.runs):
            pairs = tasks_for(args.tasks, tags, seed=run)
            rows["memory"].append(run_memory(pairs, args.max_tasks))
            options: dict[str, Any] = {
                "payload_bytes": payload_bytes,
                "max_tasks": args.max_tasks,
                "shards": args.shards,
            }
            shape = (pairs, args.processes, args.threads)
            rows["pubsub"].append(
                counted(run_pubsub, *shape, first_empty=args.stop_at_first_empty, **options)
            )
            if args.plain:
                rows["plain"].append(counted(run_pubsub, *shape, plain=True, **options))
            per_task = args.work_per_task
            if args.work:
                rows["work"].append(counted(run_work, *shape, per_task=per_task, **options))
            if args.work_plain:
                rows["work-pl"].append(
                    counted(run_work, *shape, group_by_tag=False, per_task=per_task, **options)
                )
            if args.raw:
                rows["raw"].append(counted(run_pubsub, *shape, raw=True, **options))
        base = statistics.median(o.mean_batch for o in rows["memory"])
        for label, outcomes in rows.items():
            batch = statistics.median(o.mean_batch for o in outcomes)
            print(
                f"{payload_bytes:>8} {tags:>6} {label:<8} {batch:>7.1f} {batch / base:>6.2f}"
                f" {statistics.median(o.drain for o in outcomes):>8.1f}"
                f" {statistics.median(o.rate for o in outcomes):>8.0f}"
                f" {statistics.median(o.leases for o in outcomes):>7.0f}"
                f" {statistics.median(o.empty for o in outcomes):>6.0f}"
                f" {max(o.left for o in outcomes):>5}"
                f" {max(o.lost for o in outcomes):>5} {max(o.late for o in outcomes):>5}"
                f" {max(o.mixed for o in outcomes):>6}"
                f" {max(o.duplicates for o in outcomes):>5}"
                f" {statistics.median(o.calls_per_lease for o in outcomes):>11.1f}"
                f" {statistics.median(o.deliveries_per_task for o in outcomes):>10.3f}"
                f" {statistics.median(o.grown_mb for o in outcomes):>8.0f}"
                f" {statistics.median(o.peak_mb for o in outcomes):>7.0f}"
                f" {statistics.median(o.in_use_mb for o in outcomes):>9.0f}",
                flush=True,
            )
        if args.plain:
            by_tag = statistics.median(o.rate for o in rows["pubsub"])
            plain = statistics.median(o.rate for o in rows["plain"])
            print(f"by tag / plain, tasks per second: {by_tag / max(plain, 1e-9):.2f}", flush=True)
        if args.raw:
            raw = statistics.median(o.rate for o in rows["raw"])
            for label, name in (
                ("pubsub", "by tag"),
                ("plain", "plain"),
                ("work", "work"),
                ("work-pl", "work plain"),
            ):
                if label in rows:
                    rate = statistics.median(o.rate for o in rows[label])
                    print(f"{name} / raw tasks/s: {rate / max(raw, 1e-9):.2f}", flush=True)
            for label, name in (("work", "work"), ("work-pl", "work plain")):
                if label in rows:
                    # The raw row's processes were started before its clock: so are these.
                    started = statistics.median(o.startup for o in rows[label])
                    past = statistics.median(
                        o.rate * o.drain / max(o.drain - o.startup, 1e-3) for o in rows[label]
                    )
                    print(
                        f"{name} / raw tasks/s past the processes' start-up ({started:.1f} s"
                        f" to the first lease call): {past / max(raw, 1e-9):.2f}",
                        flush=True,
                    )
        timed = [
            f"{label} {statistics.median(o.lease_ms for o in outcomes):.0f} /"
            f" {statistics.median(o.delete_ms for o in outcomes):.0f}"
            for label, outcomes in rows.items()
            if label not in ("memory", "work", "work-pl")
        ]
        print(
            "median ms of a non-empty lease / its delete (raw: pull / ack): " + ", ".join(timed),
            flush=True,
        )
        if dropped is not None:
            lost_answers = [
                f"{label} {sum(o.dropped for o in outcomes)}"
                for label, outcomes in rows.items()
                if label != "memory"
            ]
            print(
                "messages in pull answers the layer dropped after the client's deadline"
                " (hidden until their ack deadline): " + ", ".join(lost_answers),
                flush=True,
            )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker_main(*sys.argv[2:9])
    else:
        main()
