"""Benchmark: the memory backend through pullqueue.compat.taskqueue against the App Engine SDK stub.

The same legacy workload runs in this process on Google's taskqueue stub (through
google.appengine.api.taskqueue) and on MemoryBackend (through pullqueue.compat.taskqueue):
add 50,000 tasks over 100 tags (100 per add), drain them with lease_tasks_by_tag(3600, 1000) and
delete_tasks, then the same untagged with lease_tasks. It prints medians of several repetitions,
tasks per second and the ratio; then the memory backend's lease+delete cost per task with 10,000
and with 1,000,000 tasks queued, to show the cost does not grow with the queue. Times are CPU
seconds of this process (time.process_time), so other load on the machine does not skew them.

Run: python benchmarks/memory_vs_stub.py [--tasks 50000] [--repeat 3] [--big 1000000]
"""

from __future__ import annotations

import argparse
import gc
import itertools
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pullqueue import Task
from pullqueue.adapters.memory import MemoryBackend
from pullqueue.compat import taskqueue as compat

TAGS = 100
PER_ADD = 100
PER_LEASE = 1000
LEASE_SECONDS = 3600


def workload(tq: Any, queue: Any, tasks: int) -> int:
    """Add, lease (by tag, then untagged) and delete `tasks` twice over; returns tasks handled."""
    handled = 0
    for tagged in (True, False):
        for start in range(0, tasks, PER_ADD):
            queue.add(
                [
                    tq.Task(
                        payload=b"payload %d" % i,
                        method="PULL",
                        tag=f"tag-{i % TAGS}" if tagged else None,
                    )
                    for i in range(start, min(start + PER_ADD, tasks))
                ]
            )
        time.sleep(0.001)  # legacy availability is ETA < now: let the last ETA pass
        while True:
            if tagged:
                leased = queue.lease_tasks_by_tag(LEASE_SECONDS, PER_LEASE)
            else:
                leased = queue.lease_tasks(LEASE_SECONDS, PER_LEASE)
            if not leased:
                break
            queue.delete_tasks(leased)
            handled += len(leased)
    if handled != 2 * tasks:
        raise RuntimeError(f"drained {handled} tasks, expected {2 * tasks}")
    return handled


def timed(run: Callable[[], int]) -> tuple[float, int]:
    """CPU seconds run() took, and what it returned."""
    gc.collect()
    start = time.process_time()
    handled = run()
    return time.process_time() - start, handled


def run_stub(tasks: int) -> tuple[float, int]:
    """One repetition on a fresh SDK stub with a pull queue declared in queue.yaml."""
    from google.appengine.api import taskqueue
    from google.appengine.ext import testbed

    with tempfile.TemporaryDirectory() as root:
        Path(root, "queue.yaml").write_text("queue:\n- name: bench\n  mode: pull\n")
        bed = testbed.Testbed()
        bed.activate()
        try:
            bed.init_taskqueue_stub(root_path=root)
            return timed(lambda: workload(taskqueue, taskqueue.Queue("bench"), tasks))
        finally:
            bed.deactivate()


def run_memory(tasks: int) -> tuple[float, int]:
    """One repetition on a fresh MemoryBackend through the compat layer."""
    queue = compat.Queue("bench", backend=MemoryBackend())
    return timed(lambda: workload(compat, queue, tasks))


def per_task_lease_delete(queued: int, rounds: int, tagged: bool) -> float:
    """CPU seconds per task of lease+delete (compat layer) with `queued` tasks waiting.

    The queue is kept at its size: after each timed lease+delete, as many new tasks are added
    (untimed), so a small and a large queue are measured over the same number of rounds.
    """
    backend = MemoryBackend()
    counter = itertools.count()

    def refill(count: int) -> None:
        for start in range(0, count, 1000):
            batch = [next(counter) for _ in range(min(1000, count - start))]
            backend.add(
                "big", [Task(b"x", tag=f"tag-{i % TAGS}" if tagged else None) for i in batch]
            )

    refill(queued)
    time.sleep(0.001)
    queue = compat.Queue("big", backend=backend)
    gc.collect()
    elapsed, done = 0.0, 0
    for _ in range(rounds):
        start = time.process_time()
        if tagged:
            leased = queue.lease_tasks_by_tag(LEASE_SECONDS, PER_LEASE)
        else:
            leased = queue.lease_tasks(LEASE_SECONDS, PER_LEASE)
        queue.delete_tasks(leased)
        elapsed += time.process_time() - start
        done += len(leased)
        refill(len(leased))
    return elapsed / done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=50_000, help="tasks per phase (default 50000)")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions (default 3)")
    parser.add_argument("--big", type=int, default=1_000_000, help="large queue size")
    parser.add_argument("--small", type=int, default=10_000, help="small queue size")
    args = parser.parse_args()

    print(
        f"workload: {args.tasks:,} tasks over {TAGS} tags, then {args.tasks:,} untagged; "
        f"add {PER_ADD}/call, lease {PER_LEASE}/call, delete_tasks; {args.repeat} repetitions"
    )
    results = {}
    for label, run in (
        ("SDK stub (google.appengine.api.taskqueue)", run_stub),
        ("memory (pullqueue.compat.taskqueue)", run_memory),
    ):
        times = []
        for _ in range(args.repeat):
            seconds, handled = run(args.tasks)
            times.append(seconds)
        median = statistics.median(times)
        results[label] = handled / median
        print(f"  {label:44s} median {median:7.3f} CPU s {handled / median:10,.0f} tasks/s")
    stub_rate, memory_rate = results.values()
    print(f"  ratio memory/stub: {memory_rate / stub_rate:.1f}x (target >= 12x)")

    print("lease+delete per task on the memory backend (compat layer), median of repetitions:")
    for tagged in (False, True):
        kind = "lease_tasks_by_tag" if tagged else "lease_tasks"
        costs = {}
        for queued in (args.small, args.big):
            samples = [per_task_lease_delete(queued, 100, tagged) for _ in range(args.repeat)]
            costs[queued] = statistics.median(samples)
            print(f"  {kind:18s} {queued:>10,} queued: {costs[queued] * 1e6:6.2f} us/task")
        ratio = costs[args.big] / costs[args.small]
        print(f"  {kind:18s} ratio {args.big:,} / {args.small:,}: {ratio:.2f}x (target <= 1.5x)")


if __name__ == "__main__":
    main()
