"""Conformance: modify_lease extends or ends (0 seconds) a current lease, and only a current one.

A worker that needs more time extends its lease; one that gives up releases the task at once; a
worker whose lease ran out, or was taken over, gets TaskLeaseExpiredError and must not go on.
"""

from __future__ import annotations

import pytest

from pullqueue import (
    BadTaskStateError,
    Error,
    InvalidLeaseTimeError,
    Queue,
    Task,
    TaskLeaseExpiredError,
    TombstonedTaskError,
)
from pullqueue.limits import MAX_LEASE_SECONDS
from tests.conformance.harness import Harness
from tests.conformance.helpers import expire, names, tick


def _leased(harness: Harness, lease_seconds: float) -> tuple[Queue, Task]:
    queue = harness.new_queue()
    queue.add(Task(b"work", name="job"))
    tick(harness)
    (task,) = queue.lease(lease_seconds, 10)
    return queue, task


@pytest.mark.feature("lease_token", "lease_expiry")
def test_extend_keeps_the_task_past_its_first_expiry(harness: Harness) -> None:
    queue, task = _leased(harness, harness.short_lease)
    before = harness.backend.now()
    queue.modify_lease(task, harness.short_lease * 4)
    after = harness.backend.now()
    assert task.eta_posix is not None
    assert before + harness.short_lease * 4 - 1e-6 <= task.eta_posix
    assert task.eta_posix <= after + harness.short_lease * 4 + 1e-6
    expire(harness)
    assert queue.lease(60, 10) == []
    harness.advance(harness.short_lease * 3)
    (again,) = queue.lease(60, 10)
    assert again.name == "job" and again.retry_count == 2


@pytest.mark.feature("lease_token")
def test_extended_lease_can_be_extended_again(harness: Harness) -> None:
    queue, task = _leased(harness, 60)
    queue.modify_lease(task, 120)
    queue.modify_lease(task, 30)
    queue.modify_lease(task, MAX_LEASE_SECONDS)
    assert task.retry_count == 1


@pytest.mark.feature("lease_token")
def test_zero_releases_the_task_at_once(harness: Harness) -> None:
    queue, task = _leased(harness, 600)
    queue.modify_lease(task, 0)
    tick(harness)
    (again,) = queue.lease(60, 10)
    assert again.name == "job" and again.retry_count == 2


@pytest.mark.feature("lease_token", "lease_expiry")
def test_expired_lease_cannot_be_modified(harness: Harness) -> None:
    queue, task = _leased(harness, harness.short_lease)
    expire(harness)
    with pytest.raises(TaskLeaseExpiredError) as raised:
        queue.modify_lease(task, 60)
    assert raised.value.task == "job" and raised.value.queue == queue.name


@pytest.mark.feature("lease_token", "lease_expiry")
def test_lease_taken_over_by_another_holder_cannot_be_modified(harness: Harness) -> None:
    queue, stale = _leased(harness, harness.short_lease)
    expire(harness)
    (current,) = queue.lease(60, 10)
    with pytest.raises(TaskLeaseExpiredError):
        queue.modify_lease(stale, 0)
    with pytest.raises(TaskLeaseExpiredError):
        queue.modify_lease(stale, 600)
    queue.modify_lease(current, 120)
    assert queue.lease(60, 10) == []


@pytest.mark.feature("lease_token")
def test_released_lease_cannot_be_modified_after_another_lease(harness: Harness) -> None:
    queue, task = _leased(harness, 600)
    queue.modify_lease(task, 0)
    tick(harness)
    assert names(queue.lease(600, 10)) == ["job"]
    with pytest.raises(TaskLeaseExpiredError):
        queue.modify_lease(task, 60)


@pytest.mark.feature("tombstones")
def test_deleted_task_cannot_be_modified(harness: Harness) -> None:
    queue, task = _leased(harness, 600)
    queue.delete(task)
    task.was_deleted = False
    with pytest.raises(TombstonedTaskError):
        queue.modify_lease(task, 60)


def test_unknown_task_cannot_be_modified(harness: Harness) -> None:
    queue = harness.new_queue()
    stranger = Task(b"", name="never-added")
    with pytest.raises(Error):
        queue.modify_lease(stranger, 60)


@pytest.mark.parametrize("bad", [-1, MAX_LEASE_SECONDS + 1])
def test_lease_seconds_out_of_range(harness: Harness, bad: float) -> None:
    queue, task = _leased(harness, 600)
    with pytest.raises(InvalidLeaseTimeError):
        queue.modify_lease(task, bad)


def test_task_without_name(harness: Harness) -> None:
    with pytest.raises(BadTaskStateError):
        harness.new_queue().modify_lease(Task(b"x"), 60)


@pytest.mark.feature("lease_token")
def test_a_task_whose_eta_is_not_the_lease_end_holds_no_lease(harness: Harness) -> None:
    """The ETA is the lease token: a task of the same name with an ETA one second before the
    lease's end (as a worker rebuilding it by name would make) is refused, and the real lease
    stays the worker's to extend and delete."""
    import datetime as dt

    queue, task = _leased(harness, 60)
    assert task.eta_posix is not None
    stale = Task(
        b"",
        name=task.name,
        eta=dt.datetime.fromtimestamp(task.eta_posix - 1, tz=dt.timezone.utc),
    )
    with pytest.raises(TaskLeaseExpiredError) as raised:
        queue.modify_lease(stale, 5)
    assert raised.value.task == "job"
    queue.modify_lease(task, 5)
    (deleted,) = queue.delete(task)
    assert deleted.was_deleted
