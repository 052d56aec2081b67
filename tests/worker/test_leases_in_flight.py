"""The worker keeps several leases in flight when its threads can take their work.

A lease is several round trips on Pub/Sub; one lease at a time left a 4-thread worker idle
most of the time. These tests check how many leases run at once, and that none is lost on stop.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Sequence

import pytest

from pullqueue import Task
from pullqueue.worker import Backoff, Worker, batch_handler, pace
from tests.worker.faults import ScriptedBackend
from tests.worker.test_worker import FAST, Recorder, fill, new_queue, run_in_thread, wait_for


class SlowLeases(ScriptedBackend):
    """Each lease takes `seconds`; notes every call's (start, end, task count)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.calls: list[tuple[float, float, int]] = []
        self.flying = 0
        self.most = 0

    def lease(self, queue: str, *args: object, **kwargs: object) -> list[Task]:
        began = time.monotonic()
        with self._lock:
            self.flying += 1
            self.most = max(self.most, self.flying)
        try:
            time.sleep(self.seconds)
            tasks = super().lease(queue, *args, **kwargs)  # type: ignore[arg-type]
        finally:
            with self._lock:
                self.flying -= 1
        with self._lock:
            self.calls.append((began, time.monotonic(), len(tasks)))
        return tasks


def test_a_batch_handler_worker_keeps_one_lease_in_flight_per_thread() -> None:
    backend = SlowLeases(0.15)
    queue = new_queue(backend)
    names = fill(queue, 60)
    seen: list[str] = []
    lock = threading.Lock()

    @batch_handler
    def record(tasks: Sequence[Task]) -> None:
        with lock:
            seen.extend(t.name or "" for t in tasks)

    stats = Worker(queue, record, batch_size=5, concurrency=4, exit_when_idle=0.2, **FAST).run(
        handle_signals=False
    )
    assert sorted(seen) == names
    assert (stats.processed, stats.failed) == (60, 0)
    assert queue.stats().tasks == 0
    assert backend.most == 4


def test_a_per_task_worker_with_slow_handlers_leases_only_as_a_thread_runs_out() -> None:
    backend = SlowLeases(0.02)
    queue = new_queue(backend)
    names = fill(queue, 30)
    handler = Recorder()
    queued: list[int] = []
    worker: Worker

    def slow(task: Task) -> None:
        queued.append(worker._pending)
        time.sleep(0.05)
        handler(task)

    worker = Worker(queue, slow, batch_size=10, concurrency=2, exit_when_idle=0.2, **FAST)
    stats = worker.run(handle_signals=False)
    assert sorted(handler.names) == names
    assert stats.processed == 30
    # 10 queued tasks keep 2 threads busy 0.25 s, ten leases' time: no lease ahead of that.
    assert backend.most == 1
    # Never more than one lease's tasks waiting for a thread.
    assert max(queued) <= 10


@pytest.mark.parametrize(
    ("batch_size", "threads", "tasks", "fewest", "most"),
    [
        # Ten quick tasks last far less than a lease: the next leases are in flight meanwhile.
        (10, 4, 200, 2, 4),
        # Single-task leases: one in flight per thread.
        (1, 3, 24, 3, 3),
    ],
)
def test_a_per_task_worker_with_quick_handlers_keeps_leases_in_flight(
    batch_size: int, threads: int, tasks: int, fewest: int, most: int
) -> None:
    backend = SlowLeases(0.1)
    queue = new_queue(backend)
    names = fill(queue, tasks)
    handler = Recorder()
    stats = Worker(
        queue, handler, batch_size=batch_size, concurrency=threads, exit_when_idle=0.3, **FAST
    ).run(handle_signals=False)
    assert sorted(handler.names) == names
    assert stats.processed == tasks
    assert fewest <= backend.most <= most


def test_after_an_empty_lease_one_lease_runs_at_a_time_until_one_brings_work() -> None:
    backend = SlowLeases(0.05)
    queue = new_queue(backend)
    handler = Recorder()
    worker = Worker(
        queue,
        batch_handler(lambda tasks: handler.calls.extend(tasks)),
        batch_size=2,
        concurrency=4,
        lease_requests_per_second=200.0,
        backoff=Backoff(0.01, 0.02),
    )
    thread = run_in_thread(worker)
    wait_for(lambda: len(backend.calls) >= 12)
    first_empty_answer = min(end for _, end, count in backend.calls if count == 0)
    later = sorted(c for c in backend.calls if c[0] >= first_empty_answer)
    overlapping = [(a, b) for a, b in itertools.pairwise(later) if b[0] < a[1]]
    assert not overlapping, "an idle worker ran leases side by side"
    # Work comes: the worker widens again to one lease a thread.
    backend.most = 0
    names = fill(queue, 40)
    wait_for(lambda: len(handler.calls) == 40)
    worker.stop()
    thread.join(5)
    assert sorted(t.name for t in handler.calls) == names
    assert backend.most >= 2


def test_stop_with_leases_in_flight_releases_what_they_bring() -> None:
    backend = SlowLeases(0.3)
    queue = new_queue(backend)
    fill(queue, 40)
    handled: list[Task] = []
    lock = threading.Lock()

    @batch_handler
    def record(tasks: Sequence[Task]) -> None:
        with lock:
            handled.extend(tasks)

    worker = Worker(queue, record, batch_size=2, concurrency=4, **FAST)
    thread = run_in_thread(worker)
    # Stop in the middle of the second round of leases: four are in flight.
    wait_for(lambda: len(backend.calls) >= 4 and backend.flying == 4)
    worker.stop()
    thread.join(10)
    assert not thread.is_alive()
    stats = worker.stats
    assert stats.released >= 2, "the leases in flight at the stop brought tasks"
    assert stats.processed == len(handled)
    assert queue.stats().tasks == 40 - len(handled)
    # Nothing is left leased: every task not handled is leasable at once.
    back = queue.lease(60, 100)
    assert len(back) == 40 - len(handled)


def test_large_payloads_start_no_lease_early(monkeypatch: pytest.MonkeyPatch) -> None:
    """The quick handler of the test above, with 200 KB payloads and the early-lease budget at
    1 MiB: a lease brings 2 MB, so leases start only as a thread would be idle, one at a time."""
    monkeypatch.setattr(pace, "EARLY_BYTES", 2**20)
    backend = SlowLeases(0.1)
    queue = new_queue(backend)
    big = b"x" * 200_000
    queue.add([Task(big, name=f"big-{i:03d}") for i in range(60)])
    handler = Recorder()
    stats = Worker(queue, handler, batch_size=10, concurrency=4, exit_when_idle=0.3, **FAST).run(
        handle_signals=False
    )
    assert stats.processed == 60
    assert backend.most == 1


def test_leases_side_by_side_that_come_back_empty_back_off_one_step_not_one_each() -> None:
    backend = SlowLeases(0.05)
    queue = new_queue(backend)
    ceilings: list[float] = []
    backoff = Backoff(1.0, 8.0, uniform=lambda lo, hi: ceilings.append(hi) or hi)

    @batch_handler
    def ignore(tasks: Sequence[Task]) -> None:
        pass

    worker = Worker(
        queue, ignore, batch_size=5, concurrency=4, lease_requests_per_second=200.0, backoff=backoff
    )
    thread = run_in_thread(worker)
    # The four leases of the start come back empty together: one backoff of 1 s for them all.
    wait_for(lambda: worker.stats.empty_leases >= 4)
    assert ceilings == [1.0]
    worker.stop()
    thread.join(5)
