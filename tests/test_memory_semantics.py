"""The memory backend's own promises, beyond the conformance suite and the SDK stub's behaviour.

Naming (never a clash with a user's name), the empty tag, lease counts and the one-minute window
of statistics, bounded memory under churn, listing, and configuration through `connect()`.
"""

from __future__ import annotations

import pytest

from pullqueue import ConfigurationError, Queue, Task, TaskAlreadyExistsError, connect
from pullqueue.adapters.memory import MemoryBackend
from tests.conformance.harness import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def queue(clock: FakeClock) -> Queue:
    return Queue("mem", MemoryBackend(clock=clock))


def test_chosen_names_never_clash_with_names_users_gave(queue: Queue, clock: FakeClock) -> None:
    # The SDK stub would choose "task1" here and fail with TaskAlreadyExistsError.
    queue.add([Task(b"", name="task1"), Task(b"", name="task3")])
    chosen = queue.add([Task(b"a"), Task(b"b")])
    assert [t.name for t in chosen] == ["task2", "task4"]
    with pytest.raises(TaskAlreadyExistsError):
        queue.add(Task(b"", name="task2"))


def test_empty_tag_means_untagged(queue: Queue, clock: FakeClock) -> None:
    queue.add([Task(b"", name="empty", tag=""), Task(b"", name="tagged", tag="t")])
    clock.advance(1)
    (leased,) = queue.lease(60, 10, tag="")  # no tag given: the oldest task's group
    assert (leased.name, leased.tag) == ("empty", None)


def test_release_with_zero_ends_the_lease_in_stats_at_once(queue: Queue, clock: FakeClock) -> None:
    queue.add([Task(b"") for _ in range(3)])
    clock.advance(1)
    leased = queue.lease(60, 3)
    assert queue.stats().leased == 3
    queue.modify_lease(leased[0], 0)
    assert queue.stats().leased == 2


def test_executed_last_minute_is_a_sliding_window(queue: Queue, clock: FakeClock) -> None:
    queue.add([Task(b"") for _ in range(10)])
    clock.advance(1)
    queue.lease(0, 4)
    clock.advance(30)
    queue.lease(0, 3)
    assert queue.stats().executed_last_minute == 7
    clock.advance(30.5)
    assert queue.stats().executed_last_minute == 3
    clock.advance(30)
    assert queue.stats().executed_last_minute == 0


def test_memory_stays_bounded_under_lease_and_delete_churn(clock: FakeClock) -> None:
    backend = MemoryBackend(clock=clock)
    queue = Queue("churn", backend)
    for round_ in range(200):
        queue.add([Task(b"x", tag=f"t{round_ % 7}") for _ in range(100)])
        clock.advance(1)
        queue.delete(queue.lease(3600, 60, tag=f"t{round_ % 7}"))
        queue.delete(queue.lease(3600, 40))
    names = [t.name for _ in range(100) for t in queue.add([Task(b"x") for _ in range(100)])]
    for start in range(0, len(names), 100):  # deletes alone must not leave stale entries behind
        queue.delete_by_name(names[start : start + 100])
    state = backend._queues["churn"]
    live = len(state.tasks)
    stored = len(state.waiting) + len(state.leases) + sum(map(len, state.by_tag.values()))
    assert live == 0
    assert stored <= 4096, f"{stored} index entries kept for {live} live tasks"


def test_list_tasks_shows_waiting_and_leased_in_eta_order(queue: Queue, clock: FakeClock) -> None:
    backend = queue.backend
    assert isinstance(backend, MemoryBackend)
    queue.add([Task(b"a", name="late", countdown=100), Task(b"b", name="now")])
    clock.advance(1)
    queue.lease(30, 1)
    listed = list(backend.list_tasks("mem"))
    assert [(t.name, t.retry_count) for t in listed] == [("now", 1), ("late", 0)]
    assert all(t.lease_token is None for t in listed)


def test_connect_builds_memory_backends_with_options(clock: FakeClock) -> None:
    backend = connect("memory://", clock=clock, retry_limits={"limited": 1})
    assert isinstance(backend, MemoryBackend) and backend.now() == clock()
    queue = Queue("limited", backend)
    queue.add(Task(b"x"))
    clock.advance(1)
    assert len(queue.lease(0, 1)) == 1
    clock.advance(1)
    assert queue.lease(0, 1) == []
    assert queue.stats().tasks == 0
    with pytest.raises(ConfigurationError):
        connect("memory://somewhere/else")


def test_the_default_backend_serves_queues_without_a_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pullqueue.compat import taskqueue
    from pullqueue.registry import reset_default_backends

    monkeypatch.setenv("PULLQUEUE_URL", "memory://")
    reset_default_backends()
    try:
        taskqueue.Queue("shared").add(taskqueue.Task(payload="x", name="from-one"))
        assert taskqueue.Queue("shared").fetch_statistics().tasks == 1
        assert isinstance(Queue("shared").backend, MemoryBackend)
    finally:
        reset_default_backends()


def test_executed_last_hour_keeps_the_hour_not_the_minute(queue: Queue, clock: FakeClock) -> None:
    queue.add([Task(b"") for _ in range(10)])
    clock.advance(1)
    queue.lease(0, 4)
    clock.advance(0.2)
    queue.lease(0, 1)  # within the same second: one kept pair
    clock.advance(1800)
    queue.lease(0, 3)
    stats = queue.stats()
    assert (stats.executed_last_minute, stats.executed_last_hour) == (3, 8)
    clock.advance(1800)
    stats = queue.stats()
    assert (stats.executed_last_minute, stats.executed_last_hour) == (0, 3)
    clock.advance(1800)
    assert queue.stats().executed_last_hour == 0
