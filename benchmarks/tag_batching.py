"""Benchmark: batching by tag with several worker processes, memory:// against Pub/Sub, in one run.

A migrated counter adds N tasks over T tags in random order, then P worker processes (real OS
processes, one thread each) loop `lease_tasks_by_tag(60, 1000)` -> handle -> `delete_tasks(batch)`
through `pullqueue.compat.taskqueue` until the queue is empty. memory:// cannot be shared between
processes, so its figure is the same loop in one process (the legacy queue's batches: one whole
tag per lease). Prints, per tag count and backend, the medians over the runs of: mean tasks per
non-empty lease, its ratio to memory://, drain seconds, lost and late counts (late: leased only
after the workers stopped, within 90 s), mixed-tag and duplicate counts, Pub/Sub requests per
lease and deliveries per task (one each plus those given back unleased).

    python benchmarks/tag_batching.py [--tasks 20000] [--tags 200 1000] [--processes 4] [--runs 3]

Honours PUBSUB_EMULATOR_HOST; otherwise starts the emulator from the gcloud SDK (stopped at exit).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
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


def tasks_for(count: int, tags: int, seed: int) -> list[tuple[str, str]]:
    """(name, tag) pairs: `count` tasks spread evenly over `tags` tags, in random order."""
    pairs = [(f"t{i}", f"tag-{i % tags}") for i in range(count)]
    random.Random(seed).shuffle(pairs)
    return pairs


def add_all(queue: object, pairs: list[tuple[str, str]]) -> None:
    from pullqueue.compat import taskqueue

    for start in range(0, len(pairs), 100):
        chunk = pairs[start : start + 100]
        queue.add(  # type: ignore[attr-defined]
            [taskqueue.Task(payload=name, tag=tag, method="PULL") for name, tag in chunk]
        )


def work(
    queue: object, stop_after_idle: float, drained: Callable[[int], bool] = lambda done: True
) -> list[tuple[float, list[str], list[str]]]:
    """The migrated worker's loop until `drained(tasks deleted here)` says every worker's deletes
    add up to the whole queue (or nothing came for stop_after_idle seconds); (time of delete,
    names, tags) per non-empty lease."""
    batches: list[tuple[float, list[str], list[str]]] = []
    idle_since = time.monotonic()
    done = 0
    while True:
        batch = queue.lease_tasks_by_tag(60, 1000)  # type: ignore[attr-defined]
        if not batch:
            if drained(done) or time.monotonic() - idle_since >= stop_after_idle:
                break
            continue
        names = [name_of(task) for task in batch]
        tags = [task.tag for task in batch]
        queue.delete_tasks(batch)  # type: ignore[attr-defined]
        batches.append((time.time(), names, tags))
        done += len(batch)
        idle_since = time.monotonic()
    return batches


def name_of(task: Any) -> str:
    """The task's name as the benchmark wrote it (its payload)."""
    payload = task.payload
    return payload.decode() if isinstance(payload, bytes) else str(payload)


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


def run_memory(pairs: list[tuple[str, str]]) -> Outcome:
    from pullqueue import connect
    from pullqueue.compat import taskqueue

    queue = taskqueue.Queue(QUEUE, connect("memory://"))
    add_all(queue, pairs)
    start = time.time()
    return summarize(pairs, work(queue, 0.0), start)


def run_pubsub(pairs: list[tuple[str, str]], processes: int) -> Outcome:
    from pullqueue import Settings
    from pullqueue.adapters.pubsub import PubSubBackend
    from pullqueue.compat import taskqueue

    project = f"bench-{uuid.uuid4().hex[:8]}"
    producer = PubSubBackend(project, settings=Settings(), auto_create=True)
    try:
        add_all(taskqueue.Queue(QUEUE, producer), pairs)
    finally:
        producer.close()
    with tempfile.TemporaryDirectory(prefix="tagbench-") as tmp:
        go = Path(tmp, "go")
        workers = [
            subprocess.Popen(
                [sys.executable, __file__, "--worker", project, tmp, str(n), str(len(pairs))],
                env={**os.environ, "PULLQUEUE_AUTO_CREATE": "1"},
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
        calls = skipped = 0
        for n in range(processes):
            report = json.loads(Path(tmp, f"out-{n}.json").read_text())
            batches += [tuple(b) for b in report["batches"]]
            calls += report["calls"]
            skipped += report["skipped"]
    outcome = summarize(pairs, batches, start)  # type: ignore[arg-type]
    if outcome.lost:
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


def worker_main(project: str, tmp: str, index: str, total: str) -> None:
    from pullqueue import Settings
    from pullqueue.adapters.pubsub import PubSubBackend
    from pullqueue.compat import taskqueue

    backend = PubSubBackend(project, settings=Settings(), auto_create=True)
    backend.topology(QUEUE)
    calls = count_calls(backend.rpc, ["pull", "modify", "ack", "publish", "seek"])
    Path(tmp, f"ready-{index}").write_text("")
    while not Path(tmp, "go").exists():
        time.sleep(0.01)
    progress = Path(tmp, f"progress-{index}")

    def drained(done: int) -> bool:
        progress.write_text(str(done))
        counts = [p.read_text() for p in Path(tmp).glob("progress-*")]
        return sum(int(c) for c in counts if c) >= int(total)

    try:
        batches = work(taskqueue.Queue(QUEUE, backend), IDLE_SECONDS, drained)
    finally:
        backend.close()
    # Deliveries this process consumed without leasing the task (held tasks given back).
    skipped = sum(backend._book._skipped.values())
    report = {"batches": batches, "calls": calls[0], "skipped": skipped}
    Path(tmp, f"out-{index}.json").write_text(json.dumps(report))


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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--tags", type=int, nargs="+", default=[200, 1000])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args(argv)
    from tests.support.emulators import shared_emulator_host

    host = shared_emulator_host("pubsub")
    print(
        f"{args.tasks} tasks, {args.processes} worker processes, {args.runs} run(s),"
        f" emulator {host}; memory:// is the same loop in one process"
    )
    print(
        f"{'tags':>6} {'backend':<8} {'batch':>7} {'ratio':>6} {'drain s':>8} {'leases':>7}"
        f" {'lost':>5} {'late':>5} {'mixed':>6} {'dups':>5} {'calls/lease':>11}"
        f" {'deliv/task':>10}"
    )
    for tags in args.tags:
        memory: list[Outcome] = []
        pubsub: list[Outcome] = []
        for run in range(args.runs):
            pairs = tasks_for(args.tasks, tags, seed=run)
            memory.append(run_memory(pairs))
            pubsub.append(run_pubsub(pairs, args.processes))
        base = statistics.median(o.mean_batch for o in memory)
        for label, outcomes in (("memory", memory), ("pubsub", pubsub)):
            batch = statistics.median(o.mean_batch for o in outcomes)
            print(
                f"{tags:>6} {label:<8} {batch:>7.1f} {batch / base:>6.2f}"
                f" {statistics.median(o.drain for o in outcomes):>8.1f}"
                f" {statistics.median(o.leases for o in outcomes):>7.0f}"
                f" {max(o.lost for o in outcomes):>5} {max(o.late for o in outcomes):>5}"
                f" {max(o.mixed for o in outcomes):>6}"
                f" {max(o.duplicates for o in outcomes):>5}"
                f" {statistics.median(o.calls_per_lease for o in outcomes):>11.1f}"
                f" {statistics.median(o.deliveries_per_task for o in outcomes):>10.3f}",
                flush=True,
            )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker_main(*sys.argv[2:6])
    else:
        main()
