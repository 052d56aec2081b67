"""A failed task waits before its next attempt: the legacy retry parameters, applied by pullqueue.

The intervals follow queue.yaml's rule (doubling max_doublings times, then linear, capped), the
worker releases a failed task with a lease of the jittered interval, and a hand-written lease
loop gets the same with `release_for_retry`, on the legacy-shaped API too.
"""

from __future__ import annotations

import math

import pytest

from pullqueue import InvalidTaskRetryOptionsError, Queue, Task
from pullqueue.adapters.memory import MemoryBackend
from pullqueue.compat import taskqueue
from pullqueue.retry import RetryParameters, queue_retry_parameters
from pullqueue.worker import Backoff, Worker, release_for_retry
from tests.conformance.harness import FakeClock


def test_intervals_double_then_grow_linearly_up_to_the_cap() -> None:
    retry = RetryParameters(min_backoff_seconds=0.5, max_backoff_seconds=30, max_doublings=3)
    assert [retry.interval(n) for n in range(1, 10)] == [0.5, 1, 2, 4, 8, 12, 16, 20, 24]
    assert retry.interval(12) == 30 and retry.interval(10**9) == 30
    assert RetryParameters().interval(10**6) == 600


def test_the_delay_is_jittered_between_half_and_all_of_the_interval() -> None:
    retry = RetryParameters(min_backoff_seconds=4, max_backoff_seconds=4)
    delays = [retry.delay(1) for _ in range(200)]
    assert all(2 <= d <= 4 for d in delays) and max(delays) - min(delays) > 1
    assert retry.delay(1, jitter=0.5) == 2


@pytest.mark.parametrize(
    "bad",
    [
        {"min_backoff_seconds": math.nan},
        {"max_backoff_seconds": math.inf},
        {"max_doublings": True},
        {"max_doublings": 1.5},
        {"min_backoff_seconds": -1},
        {"min_backoff_seconds": 5, "max_backoff_seconds": 1},
        {"max_backoff_seconds": 10**9},
    ],
)
def test_bad_retry_parameters_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(InvalidTaskRetryOptionsError):
        RetryParameters(**bad)


def test_a_backend_without_retry_parameters_gets_the_defaults() -> None:
    assert queue_retry_parameters(MemoryBackend(), "q") == RetryParameters()


def test_the_worker_waits_the_retry_delay_before_handing_a_failed_task_out_again() -> None:
    clock = FakeClock()
    queue = Queue("retried", MemoryBackend(clock=clock))
    queue.add(Task(b"x", name="flaky"))
    clock.advance(1)
    calls: list[tuple[float, int]] = []

    def fails(task: Task) -> None:
        calls.append((clock(), task.retry_count))
        raise RuntimeError("downstream unavailable")

    retry = RetryParameters(min_backoff_seconds=8, max_backoff_seconds=100, max_doublings=4)
    worker = Worker(
        queue,
        fails,
        retry=retry,
        exit_when_idle=0.3,
        lease_requests_per_second=200,
        backoff=Backoff(0.01, 0.02),
    )
    worker.run(handle_signals=False)
    assert calls == [(clock(), 1)]
    assert queue.lease(60, 10) == []
    clock.advance(3.99)  # the shortest jittered delay after a first failure is 8 * 0.5 s
    assert queue.lease(60, 10) == []
    clock.advance(4.02)
    (again,) = queue.lease(60, 10)
    assert again.retry_count == 2


@pytest.mark.parametrize("api", ["queue", "compat"])
def test_a_hand_written_loop_releases_a_failed_task_for_its_retry_delay(api: str) -> None:
    clock = FakeClock()
    backend = MemoryBackend(clock=clock)
    core = Queue("loop", backend)
    core.add(Task(b"x", name="job"))
    queue: Queue | taskqueue.Queue = core if api == "queue" else taskqueue.Queue("loop", backend)
    retry = RetryParameters(min_backoff_seconds=10, max_backoff_seconds=60, max_doublings=2)
    waits = []
    for attempt in range(1, 6):
        clock.advance(0.01)
        (task,) = core.lease(30, 10)
        assert task.retry_count == attempt
        waits.append(release_for_retry(queue, task, retry))
        clock.advance(waits[-1] - 0.02)
        assert core.lease(30, 10) == []
        clock.advance(0.02)
    intervals = [10, 20, 40, 60, 60]
    assert all(i / 2 <= w <= i for w, i in zip(waits, intervals, strict=True)), waits


def test_exit_when_idle_waits_for_failed_tasks_to_come_back() -> None:
    queue = Queue("comes-back", MemoryBackend())
    queue.add([Task(b"x", name=f"t{i}") for i in range(3)])
    attempts: list[int] = []

    def first_fails(task: Task) -> None:
        attempts.append(task.retry_count)
        if task.retry_count == 1:
            raise RuntimeError("downstream unavailable")

    stats = Worker(
        queue,
        first_fails,
        retry=RetryParameters(min_backoff_seconds=1.2, max_backoff_seconds=1.2),
        exit_when_idle=0.2,
        lease_requests_per_second=200,
        backoff=Backoff(0.01, 0.05),
    ).run(handle_signals=False)
    assert sorted(attempts) == [1, 1, 1, 2, 2, 2]
    assert (stats.processed, stats.failed) == (3, 3)
    assert queue.stats().tasks == 0
