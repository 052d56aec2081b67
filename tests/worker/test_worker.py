"""The worker on the memory backend: what a service running it would see."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import logging
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Sequence

import pytest

from pullqueue import PermissionDeniedError, Queue, Task, TransientError
from pullqueue.adapters.memory import MemoryBackend
from pullqueue.retry import RetryParameters
from pullqueue.worker import Backoff, Worker, batch_handler
from pullqueue.worker.logs import JsonFormatter, KeyValueFormatter
from tests.worker.faults import ScriptedBackend

_names = itertools.count(1)
FAST = {
    "lease_requests_per_second": 200.0,
    "backoff": Backoff(0.01, 0.05),
    "retry": RetryParameters(0.01, 0.05),
}


def new_queue(backend: object | None = None) -> Queue:
    return Queue(f"work-{next(_names)}", backend or MemoryBackend())  # type: ignore[arg-type]


def fill(queue: Queue, count: int, tags: Sequence[str | None] = (None,)) -> list[str]:
    """Add count tasks, oldest first, cycling through tags; return their names in ETA order."""
    base = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)
    tasks = [
        Task(
            f"payload-{i}",
            name=f"t{i:05d}",
            tag=tags[i % len(tags)],
            eta=base + dt.timedelta(milliseconds=i),
        )
        for i in range(count)
    ]
    for start in range(0, count, 100):
        queue.add(tasks[start : start + 100])
    return [t.name or "" for t in tasks]


class Recorder:
    """A thread-safe per-task handler that records each call."""

    def __init__(self) -> None:
        self.calls: list[Task] = []
        self.lock = threading.Lock()

    def __call__(self, task: Task) -> None:
        with self.lock:
            self.calls.append(task)

    @property
    def names(self) -> list[str]:
        return [t.name or "" for t in self.calls]


def run_in_thread(worker: Worker) -> threading.Thread:
    thread = threading.Thread(target=worker.run, kwargs={"handle_signals": False}, daemon=True)
    thread.start()
    return thread


def wait_for(predicate: object, timeout: float = 10.0) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


def test_every_task_is_handled_once_then_deleted() -> None:
    queue = new_queue()
    names = fill(queue, 250)
    handler = Recorder()
    stats = Worker(queue, handler, batch_size=40, concurrency=3, exit_when_idle=0.1, **FAST).run()
    assert sorted(handler.names) == names
    assert (stats.leased, stats.processed, stats.failed, stats.retried) == (250, 250, 0, 0)
    assert queue.stats().tasks == 0
    assert all(t.payload == f"payload-{int((t.name or '')[1:])}".encode() for t in handler.calls)


def test_a_failed_task_is_released_and_handled_again() -> None:
    queue = new_queue()
    names = fill(queue, 30)
    seen: Counter[str] = Counter()
    lock = threading.Lock()

    def flaky(task: Task) -> None:
        with lock:
            seen[task.name or ""] += 1
        if int((task.name or "t0")[1:]) % 3 == 0 and task.retry_count == 1:
            raise RuntimeError("first attempt fails")

    stats = Worker(queue, flaky, batch_size=10, exit_when_idle=0.2, **FAST).run()
    failing = [n for n in names if int(n[1:]) % 3 == 0]
    assert {n for n, c in seen.items() if c == 2} == set(failing)
    assert sum(seen.values()) == 30 + len(failing)
    assert (stats.processed, stats.failed, stats.retried) == (30, len(failing), len(failing))
    assert queue.stats().tasks == 0


def test_group_by_tag_hands_each_batch_one_tag_oldest_tag_first() -> None:
    queue = new_queue()
    fill(queue, 90, tags=["b", "a", "c"])
    batches: list[list[Task]] = []

    @batch_handler
    def count(tasks: Sequence[Task]) -> None:
        batches.append(list(tasks))

    stats = Worker(
        queue, count, batch_size=100, group_by_tag=True, exit_when_idle=0.1, **FAST
    ).run()
    assert [{t.tag for t in b} for b in batches] == [{"b"}, {"a"}, {"c"}]
    assert [len(b) for b in batches] == [30, 30, 30]
    assert stats.processed == 90
    assert queue.stats().tasks == 0


def test_a_tag_option_leases_only_that_tags_tasks() -> None:
    queue = new_queue()
    fill(queue, 40, tags=["red", "blue"])
    handler = Recorder()
    Worker(queue, handler, tag="blue", batch_size=7, exit_when_idle=0.1, **FAST).run()
    assert {t.tag for t in handler.calls} == {"blue"}
    assert len(handler.calls) == 20
    assert queue.stats().tasks == 20


def test_a_batch_handler_may_finish_only_some_of_its_tasks() -> None:
    queue = new_queue()
    fill(queue, 10)
    calls: list[list[str]] = []

    @batch_handler
    def half(tasks: Sequence[Task]) -> list[Task]:
        calls.append([t.name or "" for t in tasks])
        return [t for t in tasks if t.retry_count > 1 or int((t.name or "t0")[1:]) % 2 == 0]

    stats = Worker(queue, half, batch_size=10, exit_when_idle=0.1, **FAST).run()
    assert calls[0] == [f"t{i:05d}" for i in range(10)]
    assert calls[1] == [f"t{i:05d}" for i in range(1, 10, 2)]
    assert len(calls) == 2
    assert (stats.processed, stats.failed, stats.retried) == (10, 5, 5)
    assert queue.stats().tasks == 0


def test_a_batch_handler_that_raises_releases_the_whole_batch() -> None:
    queue = new_queue()
    fill(queue, 5)
    attempts: list[int] = []

    @batch_handler
    def fails_once(tasks: Sequence[Task]) -> None:
        attempts.append(len(tasks))
        if len(attempts) == 1:
            raise ValueError("downstream unavailable")

    stats = Worker(queue, fails_once, exit_when_idle=0.1, **FAST).run()
    assert attempts == [5, 5]
    assert (stats.processed, stats.failed, stats.retried) == (5, 5, 5)


def test_the_lease_is_kept_alive_while_a_slow_handler_runs() -> None:
    queue = new_queue()
    fill(queue, 1)
    started = threading.Event()

    def slow(task: Task) -> None:
        started.set()
        time.sleep(1.6)

    worker = Worker(queue, slow, lease_seconds=0.5, exit_when_idle=0.05, **FAST)
    thread = run_in_thread(worker)
    assert started.wait(5)
    stolen: list[Task] = []
    while thread.is_alive():
        stolen += queue.lease(10, 10)
        time.sleep(0.05)
    assert stolen == []
    assert worker.stats.lease_extensions >= 2
    assert (worker.stats.processed, worker.stats.leases_lost) == (1, 0)
    assert queue.stats().tasks == 0


def test_handlers_run_concurrently() -> None:
    queue = new_queue()
    fill(queue, 4)
    together = threading.Barrier(4, timeout=5)

    def meet(task: Task) -> None:
        together.wait()

    stats = Worker(queue, meet, concurrency=4, exit_when_idle=0.1, **FAST).run()
    assert (stats.processed, stats.failed) == (4, 0)


def test_empty_leases_back_off_and_the_backoff_resets_after_work() -> None:
    queue = new_queue()
    ceilings: list[float] = []
    backoff = Backoff(0.02, 0.32, uniform=lambda lo, hi: ceilings.append(hi) or hi)
    handler = Recorder()
    worker = Worker(queue, handler, backoff=backoff, lease_requests_per_second=200.0)
    thread = run_in_thread(worker)
    wait_for(lambda: len(ceilings) >= 6)
    before_work = len(ceilings)
    fill(queue, 3)
    wait_for(lambda: len(handler.calls) == 3)
    wait_for(lambda: len(ceilings) >= before_work + 3)
    worker.stop()
    thread.join(5)
    assert ceilings[:6] == pytest.approx([0.02, 0.04, 0.08, 0.16, 0.32, 0.32])
    restart = ceilings.index(0.02, before_work)
    assert ceilings[restart : restart + 2] == pytest.approx([0.02, 0.04])
    assert worker.stats.empty_leases == len(ceilings)


def test_transient_lease_errors_are_retried_with_growing_delays() -> None:
    backend = ScriptedBackend()
    backend.lease_errors = [TransientError("unavailable", queue="q") for _ in range(4)]
    queue = new_queue(backend)
    fill(queue, 3)
    backoff = Backoff(0.05, 1.0, uniform=lambda lo, hi: hi)
    stats = Worker(
        queue, Recorder(), backoff=backoff, exit_when_idle=0.1, lease_requests_per_second=200.0
    ).run()
    gaps = [b - a for a, b in itertools.pairwise(backend.lease_times[:5])]
    assert stats.transient_errors == 4
    assert stats.processed == 3
    assert all(
        gap >= expected * 0.95 for gap, expected in zip(gaps, [0.05, 0.1, 0.2, 0.4], strict=True)
    )
    assert gaps[3] > gaps[0] * 4


def test_workers_of_one_queue_stay_under_the_lease_request_rate() -> None:
    backend = ScriptedBackend()
    queue = new_queue(backend)
    fill(queue, 40)
    workers = [
        Worker(
            queue,
            Recorder(),
            batch_size=1,
            concurrency=3,
            lease_requests_per_second=20.0,
            backoff=Backoff(0.01, 0.02),
            exit_when_idle=0.1,
        )
        for _ in range(2)
    ]
    threads = [run_in_thread(w) for w in workers]
    for thread in threads:
        thread.join(30)
    assert sum(w.stats.processed for w in workers) == 40
    times = backend.lease_times
    busiest = max(sum(1 for t in times if start <= t < start + 1.0) for start in times)
    assert busiest <= 20
    assert times[-1] - times[0] >= (len(times) - 1) / 20 * 0.95


def test_stop_finishes_the_running_task_and_releases_the_unstarted_ones() -> None:
    queue = new_queue()
    names = fill(queue, 10)
    handled: list[str] = []
    worker: Worker

    def third_stops(task: Task) -> None:
        handled.append(task.name or "")
        if len(handled) == 3:
            worker.stop()
            time.sleep(0.2)

    worker = Worker(queue, third_stops, batch_size=10, **FAST)
    stats = worker.run()
    assert handled == names[:3]
    assert (stats.processed, stats.released) == (3, 7)
    back = queue.lease(60, 100)
    assert [t.name for t in back] == names[3:]
    assert all(t.retry_count == 2 for t in back)


def test_abort_releases_even_the_task_whose_handler_is_running() -> None:
    queue = new_queue()
    names = fill(queue, 2)
    running = threading.Event()
    unblock = threading.Event()

    def stuck(task: Task) -> None:
        running.set()
        unblock.wait(10)

    worker = Worker(queue, stuck, batch_size=10, **FAST)
    thread = run_in_thread(worker)
    assert running.wait(5)
    worker.stop()
    worker.abort()
    thread.join(5)
    try:
        assert not thread.is_alive()
        assert worker.aborted
        assert worker.stats.released == 2
        assert sorted(t.name for t in queue.lease(60, 10)) == names
    finally:
        unblock.set()


def test_sigterm_during_a_batch_stops_gracefully(caplog: pytest.LogCaptureFixture) -> None:
    queue = new_queue()
    fill(queue, 20)
    handled: list[str] = []

    def slowish(task: Task) -> None:
        handled.append(task.name or "")
        if len(handled) == 5:
            os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.02)

    before = signal.getsignal(signal.SIGTERM)
    with caplog.at_level(logging.INFO, logger="pullqueue.worker"):
        stats = Worker(queue, slowish, batch_size=20, **FAST).run()
    assert signal.getsignal(signal.SIGTERM) is before
    assert (stats.processed, stats.released) == (5, 15)
    assert queue.stats().tasks == 15
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("event=signal") and "signal=SIGTERM" in m for m in messages)


def test_a_queue_error_stops_the_worker_and_is_raised() -> None:
    backend = ScriptedBackend()
    backend.lease_errors = [PermissionDeniedError("the service account may not pull", queue="q")]
    queue = new_queue(backend)
    fill(queue, 3)
    worker = Worker(queue, Recorder(), **FAST)
    with pytest.raises(PermissionDeniedError, match="may not pull"):
        worker.run()
    assert worker.stats.processed == 0


def test_a_task_that_cannot_be_deleted_is_counted_and_comes_back() -> None:
    backend = ScriptedBackend()
    backend.always_fail_delete = TransientError("unavailable")
    queue = new_queue(backend)
    fill(queue, 2)
    stats = Worker(queue, Recorder(), lease_seconds=60, exit_when_idle=0.05, **FAST).run()
    assert (stats.processed, stats.delete_failures) == (2, 2)
    assert queue.stats().tasks == 2


def test_log_lines_are_key_value_and_json(caplog: pytest.LogCaptureFixture) -> None:
    queue = new_queue()
    fill(queue, 2)

    def boom(task: Task) -> None:
        if task.retry_count == 1:
            raise KeyError("missing row")

    with caplog.at_level(logging.DEBUG, logger="pullqueue.worker"):
        Worker(queue, boom, exit_when_idle=0.05, **FAST).run()
    messages = [r.getMessage() for r in caplog.records]
    assert f"event=leased queue={queue.name} tasks=2" in messages
    failed = next(r for r in caplog.records if r.getMessage().startswith("event=failed"))
    assert "task=t00000" in failed.getMessage()
    assert "error=\"KeyError: 'missing row'\"" in failed.getMessage()
    as_json = json.loads(JsonFormatter().format(failed))
    assert as_json["event"] == "failed"
    assert as_json["queue"] == queue.name
    assert as_json["retry_count"] == 1
    line = KeyValueFormatter().format(failed)
    assert line.startswith("ts=")
    assert " level=warning logger=pullqueue.worker event=failed " in line
    stopped = next(r for r in caplog.records if r.getMessage().startswith("event=stopped"))
    assert "processed=2" in stopped.getMessage()
    assert "failed=2" in stopped.getMessage()


def test_a_worker_refuses_async_handlers_and_a_second_run() -> None:
    async def handler(task: Task) -> None:
        return None

    with pytest.raises(TypeError, match="is async"):
        Worker(new_queue(), handler)
    worker = Worker(new_queue(), Recorder(), exit_when_idle=0, **FAST)
    worker.run()
    with pytest.raises(RuntimeError, match="runs once"):
        worker.run()


def test_a_delete_that_fails_once_is_retried() -> None:
    backend = ScriptedBackend()
    backend.delete_errors = [TransientError("unavailable")]
    queue = new_queue(backend)
    fill(queue, 4)
    stats = Worker(queue, Recorder(), exit_when_idle=0.05, **FAST).run()
    assert (stats.processed, stats.delete_failures, stats.transient_errors) == (4, 0, 1)
    assert queue.stats().tasks == 0


def test_a_task_deleted_by_someone_else_meanwhile_is_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    queue = new_queue()
    fill(queue, 3)

    def meddle(task: Task) -> None:
        if task.name == "t00001":
            Queue(queue.name, queue.backend).delete_by_name("t00001")

    with caplog.at_level(logging.WARNING, logger="pullqueue.worker"):
        stats = Worker(queue, meddle, exit_when_idle=0.05, **FAST).run()
    assert (stats.processed, stats.delete_failures) == (3, 0)
    warning = next(r.getMessage() for r in caplog.records if "already_deleted" in r.getMessage())
    assert "tasks=t00001 count=1" in warning
    assert queue.stats().tasks == 0


def test_the_next_lease_runs_while_a_batch_is_being_deleted() -> None:
    """A delete is a round trip on Pub/Sub; the next lease does not wait for it (one thread
    leasing and deleting in turn spent about half its time on deletes), and the worker still
    returns only once every delete ended."""

    class SlowDeletes(ScriptedBackend):
        def __init__(self) -> None:
            super().__init__()
            self.deletes: list[tuple[float, float]] = []

        def delete(self, queue: str, tasks: Sequence[Task]) -> list[bool]:
            began = time.monotonic()
            time.sleep(0.2)
            try:
                return super().delete(queue, tasks)
            finally:
                self.deletes.append((began, time.monotonic()))

    backend = SlowDeletes()
    queue = new_queue(backend)
    names = fill(queue, 30)
    handler = Recorder()
    stats = Worker(queue, handler, batch_size=10, concurrency=1, exit_when_idle=0.1, **FAST).run(
        handle_signals=False
    )
    assert sorted(handler.names) == names
    assert (stats.processed, stats.delete_failures) == (30, 0)
    assert queue.stats().tasks == 0
    assert len(backend.deletes) == 3
    # Each delete but the last had the next lease begin while it ran.
    overlapped = [
        any(began < at < ended for at in backend.lease_times)
        for began, ended in backend.deletes[:-1]
    ]
    assert all(overlapped), (backend.deletes, backend.lease_times)
