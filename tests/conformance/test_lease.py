"""Conformance: leasing, its order, its expiry and retry count, and every limit of a lease call.

A lease hands each available task to one holder until the lease ends, sets the task's ETA to the
lease expiry and counts the lease in retry_count; out-of-range arguments fail with legacy errors.
"""

from __future__ import annotations

import random

import pytest

from pullqueue import InvalidDeadlineError, InvalidLeaseTimeError, InvalidMaxTasksError, Task
from pullqueue.limits import MAX_LEASE_SECONDS, MAX_TASKS_PER_LEASE
from tests.conformance.harness import Harness
from tests.conformance.helpers import ago, drain, expire, names, tick


def test_lease_sets_expiry_retry_count_and_token(harness: Harness) -> None:
    queue = harness.new_queue()
    queue.add(Task(b"x", name="a", tag="t"))
    tick(harness)
    before = harness.backend.now()
    (task,) = queue.lease(120, 10)
    after = harness.backend.now()
    assert (task.name, task.payload, task.tag, task.retry_count) == ("a", b"x", "t", 1)
    assert task.eta_posix is not None
    assert before + 120 - 1e-6 <= task.eta_posix <= after + 120 + 1e-6
    assert task.lease_token is not None and task.lease_expires == task.eta_posix
    assert task.queue_name == queue.name


def test_a_leased_task_goes_to_one_holder(harness: Harness) -> None:
    queue = harness.new_queue()
    queue.add([Task(f"{i}") for i in range(30)])
    tick(harness)
    first = queue.lease(60, 20)
    second = queue.lease(60, 20)
    assert len(first) == 20 and len(second) == 10
    assert not {t.name for t in first} & {t.name for t in second}
    assert queue.lease(60, 20) == []


def test_max_tasks_caps_and_1000_is_allowed(harness: Harness) -> None:
    queue = harness.new_queue()
    for _ in range(11):
        queue.add([Task(b"x") for _i in range(100)])
    tick(harness)
    assert len(queue.lease(60, 1)) == 1
    assert len(queue.lease(60, MAX_TASKS_PER_LEASE)) == MAX_TASKS_PER_LEASE
    assert len(queue.lease(60, MAX_TASKS_PER_LEASE)) == 99


def test_empty_and_unused_queues_lease_nothing(harness: Harness) -> None:
    assert harness.new_queue().lease(60, 10) == []


@pytest.mark.feature("exact_eta_order")
def test_lease_returns_oldest_eta_first(harness: Harness) -> None:
    queue = harness.new_queue()
    order = list(range(40))
    random.Random(7).shuffle(order)
    queue.add([Task(f"{i}", name=f"t{i:02d}", eta=ago(harness, 100 - i)) for i in order])
    leased = queue.lease(60, 15) + queue.lease(60, 100)
    assert names(leased) == [f"t{i:02d}" for i in range(40)]


@pytest.mark.feature("future_eta")
def test_task_with_future_eta_waits_until_due(harness: Harness) -> None:
    queue = harness.new_queue()
    wait = harness.short_lease * 2
    added = harness.backend.now()
    queue.add([Task(b"later", name="later", countdown=wait), Task(b"now", name="now")])
    tick(harness)
    assert names(queue.lease(60, 10)) == ["now"]
    # Half way to the ETA counted from the add, not from the first lease's end: on a loaded
    # host a real backend's first lease can itself take half the wait.
    harness.advance(max(added + wait / 2 - harness.backend.now(), 0))
    early = queue.lease(60, 10)
    if harness.backend.now() < added + wait:
        assert early == []  # the lease ended before the ETA: it cannot have been served
    harness.advance(max(added + wait + harness.short_lease - harness.backend.now(), 0))
    (task,) = early or queue.lease(60, 10)
    assert task.name == "later" and task.retry_count == 1


@pytest.mark.feature("lease_expiry")
def test_expired_lease_makes_the_task_leasable_again(harness: Harness) -> None:
    queue = harness.new_queue()
    queue.add(Task(b"x", name="again"))
    tick(harness)
    (first,) = queue.lease(harness.short_lease, 10)
    assert queue.lease(60, 10) == []
    expire(harness)
    (second,) = queue.lease(60, 10)
    assert second.name == "again" and second.payload == b"x"
    assert (first.retry_count, second.retry_count) == (1, 2)
    assert second.lease_token != first.lease_token


@pytest.mark.feature("lease_expiry")
def test_zero_second_lease_returns_the_task_at_once(harness: Harness) -> None:
    queue = harness.new_queue()
    queue.add(Task(b"x", name="zero"))
    tick(harness)
    assert names(queue.lease(0, 10)) == ["zero"]
    tick(harness)
    (again,) = queue.lease(60, 10)
    assert again.retry_count == 2


@pytest.mark.parametrize("bad", [0, -1, MAX_TASKS_PER_LEASE + 1])
def test_max_tasks_out_of_range(harness: Harness, bad: int) -> None:
    queue = harness.new_queue()
    queue.add(Task(b"x"))
    tick(harness)
    with pytest.raises(InvalidMaxTasksError) as raised:
        queue.lease(60, bad)
    assert raised.value.queue == queue.name
    assert len(queue.lease(60, 10)) == 1


@pytest.mark.parametrize("bad", [-1, -0.5, MAX_LEASE_SECONDS + 1])
def test_lease_seconds_out_of_range(harness: Harness, bad: float) -> None:
    queue = harness.new_queue()
    queue.add(Task(b"x"))
    tick(harness)
    with pytest.raises(InvalidLeaseTimeError):
        queue.lease(bad, 10)
    (task,) = queue.lease(MAX_LEASE_SECONDS, 10)
    assert task.retry_count == 1


def test_wrong_argument_types(harness: Harness) -> None:
    queue = harness.new_queue()
    with pytest.raises(TypeError):
        queue.lease("60", 10)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        queue.lease(60, 10.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        queue.lease(60, 10, deadline="soon")  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -3])
def test_deadline_must_be_positive(harness: Harness, bad: float) -> None:
    with pytest.raises(InvalidDeadlineError):
        harness.new_queue().lease(60, 10, deadline=bad)


def test_everything_added_is_leased_once(harness: Harness) -> None:
    queue = harness.new_queue()
    added = set()
    for _ in range(5):
        added |= {t.name for t in queue.add([Task(b"p") for _ in range(100)])}
    tick(harness)
    leased = [t.name for t in drain(queue)]
    assert len(leased) == len(set(leased)) == 500 and set(leased) == added


@pytest.mark.feature("retry_limit", "lease_expiry")
def test_retry_limit_deletes_the_task_instead_of_leasing_it_again(harness: Harness) -> None:
    queue = harness.new_queue()
    queue.add([Task(b"x", name="limited", retry_limit=2), Task(b"y", name="free")])
    tick(harness)
    for attempt in (1, 2):
        leased = queue.lease(harness.short_lease, 10)
        assert sorted((t.name, t.retry_count) for t in leased) == [
            ("free", attempt),
            ("limited", attempt),
        ]
        expire(harness)
    assert names(queue.lease(harness.short_lease, 10)) == ["free"]
    expire(harness)
    assert [(t.name, t.retry_count) for t in queue.lease(60, 10)] == [("free", 4)]
