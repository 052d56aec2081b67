"""Conformance: a worker written against the legacy taskqueue API runs unchanged on each backend.

The same worker loop (add, lease_tasks_by_tag, modify_task_lease, delete_tasks, statistics) is
driven through `pullqueue.compat.taskqueue` on every backend, with the legacy exception classes.
"""

from __future__ import annotations

import datetime as dt

import pytest

from pullqueue.adapters.memory import MemoryBackend
from pullqueue.compat import taskqueue
from tests.conformance.harness import Harness
from tests.conformance.helpers import tick


def _queue(harness: Harness) -> taskqueue.Queue:
    return taskqueue.Queue(harness.new_queue().name, backend=harness.backend)


def test_worker_loop(harness: Harness) -> None:
    queue = _queue(harness)
    added = queue.add([taskqueue.Task(payload=f"job {i}", tag="batch") for i in range(5)])
    assert all(isinstance(t, taskqueue.Task) and t.was_enqueued for t in added)
    assert all(t.queue_name == queue.name and t.method == "PULL" for t in added)
    tick(harness)
    leased = queue.lease_tasks_by_tag(600, 10, tag="batch")
    assert sorted(t.payload for t in leased) == [f"job {i}".encode() for i in range(5)]
    assert all(isinstance(t, taskqueue.Task) and t.retry_count == 1 for t in leased)
    assert all(isinstance(t.eta, dt.datetime) and t.eta.tzinfo is not None for t in leased)
    queue.modify_task_lease(leased[0], 1200)
    deleted = queue.delete_tasks(leased)
    assert deleted == leased and all(t.was_deleted for t in leased)
    assert queue.lease_tasks(600, 10) == []


def test_single_task_in_single_task_out(harness: Harness) -> None:
    queue = _queue(harness)
    task = taskqueue.Task(payload=b"one", name="single")
    assert queue.add(task) is task
    tick(harness)
    (leased,) = queue.lease_tasks(60, 1)
    assert queue.delete_tasks(leased) is leased and leased.was_deleted
    gone = queue.delete_tasks_by_name("single")
    assert isinstance(gone, taskqueue.Task) and gone.was_deleted is False


def test_legacy_exceptions(harness: Harness) -> None:
    queue = _queue(harness)
    with pytest.raises(taskqueue.InvalidLeaseTimeError):
        queue.lease_tasks(taskqueue.MAX_LEASE_SECONDS + 1, 1)
    with pytest.raises(taskqueue.InvalidMaxTasksError):
        queue.lease_tasks(60, taskqueue.MAX_TASKS_PER_LEASE + 1)
    with pytest.raises(taskqueue.InvalidDeadlineError):
        queue.lease_tasks_by_tag(60, 1, deadline=0)
    with pytest.raises(taskqueue.TooManyTasksError):
        queue.add([taskqueue.Task(payload="x") for _ in range(taskqueue.MAX_TASKS_PER_ADD + 1)])
    with pytest.raises(taskqueue.DuplicateTaskNameError):
        queue.add([taskqueue.Task(payload="x", name="d"), taskqueue.Task(payload="y", name="d")])
    with pytest.raises(taskqueue.BadTransactionStateError):
        queue.add(taskqueue.Task(payload="x"), transactional=True)
    with pytest.raises(taskqueue.InvalidQueueNameError):
        taskqueue.Queue("bad_name", backend=harness.backend)


@pytest.mark.feature("unique_names", "tombstones")
def test_names_are_unique_and_tombstoned(harness: Harness) -> None:
    queue = _queue(harness)
    queue.add(taskqueue.Task(payload="x", name="named"))
    with pytest.raises(taskqueue.TaskAlreadyExistsError):
        queue.add(taskqueue.Task(payload="x", name="named"))
    tick(harness)
    queue.delete_tasks(queue.lease_tasks(60, 1))
    with pytest.raises(taskqueue.TombstonedTaskError):
        queue.add(taskqueue.Task(payload="x", name="named"))


@pytest.mark.feature("lease_token", "lease_expiry")
def test_modify_after_expiry_is_task_lease_expired(harness: Harness) -> None:
    queue = _queue(harness)
    queue.add(taskqueue.Task(payload="x"))
    tick(harness)
    (task,) = queue.lease_tasks(harness.short_lease, 1)
    harness.advance(harness.short_lease * 1.5 + 0.01)
    with pytest.raises(taskqueue.TaskLeaseExpiredError):
        queue.modify_task_lease(task, 60)


@pytest.mark.feature("stats_exact")
def test_fetch_statistics_shape(harness: Harness) -> None:
    queue = _queue(harness)
    empty = queue.fetch_statistics()
    assert isinstance(empty, taskqueue.QueueStatistics)
    assert (empty.queue, empty.tasks, empty.oldest_eta_usec) == (queue, 0, None)
    task = queue.add(taskqueue.Task(payload="x"))
    stats = queue.fetch_statistics()
    assert stats.tasks == 1 and stats.oldest_eta_usec == round(task.eta_posix * 1e6)
    (fetched,) = taskqueue.QueueStatistics.fetch([queue])
    assert fetched == stats


def test_async_variants(harness: Harness) -> None:
    queue = _queue(harness)
    rpc = queue.add_async([taskqueue.Task(payload="a", tag="t"), taskqueue.Task(payload="b")])
    assert len(rpc.get_result()) == 2
    tick(harness)
    leased = queue.lease_tasks_by_tag_async(60, 10, tag="t").get_result()
    assert [t.payload for t in leased] == [b"a"]
    rest = queue.lease_tasks_async(60, 10, taskqueue.create_rpc(deadline=5)).get_result()
    assert [t.payload for t in rest] == [b"b"]
    done = queue.delete_tasks_async(leased + rest).get_result()
    assert all(t.was_deleted for t in done)
    empty = queue.lease_tasks_async(60, 10, taskqueue.create_rpc())
    assert empty.get_result() == []


def test_legacy_task_arguments() -> None:
    with pytest.raises(taskqueue.InvalidQueueModeError) as raised:
        taskqueue.Task(payload="x", method="POST")
    assert "Cloud Tasks" in str(raised.value)
    for push_only in ({"url": "/work"}, {"headers": {"a": "b"}}, {"target": "v1"}):
        with pytest.raises(taskqueue.InvalidTaskError):
            taskqueue.Task(payload="x", **push_only)
    with pytest.raises(TypeError):
        taskqueue.Task(payload="x", colour="blue")
    handle = taskqueue.Task(name="job-42")  # no payload: names a task, as the SDK's does
    with pytest.raises(taskqueue.InvalidQueueModeError):
        taskqueue.Queue("q", backend=MemoryBackend()).add(handle)  # a pull task needs a payload
    with pytest.raises(taskqueue.InvalidTaskError):
        taskqueue.Task(payload="x", params={"a": 1})
    with pytest.raises(taskqueue.InvalidTaskNameError):
        taskqueue.Task(payload="x", name="not valid")
    with pytest.raises(taskqueue.TaskTooLargeError):
        taskqueue.Task(payload=b"x" * taskqueue.MAX_PULL_TASK_SIZE_BYTES)
    with pytest.raises(taskqueue.InvalidTagError):
        taskqueue.Task(payload="x", tag="t" * 501)
    task = taskqueue.Task(params={"user": "ann", "n": [1, 2]}, method="pull", tag=b"t")
    assert task.payload == b"user=ann&n=1&n=2" and task.tag == "t" and task.method == "PULL"
    assert task.size == len(task.payload) + 37  # the SDK's count: method and namespace header


@pytest.mark.feature("stats_exact")
def test_eta_before_1970_is_refused(harness: Harness) -> None:
    queue = _queue(harness)
    with pytest.raises(taskqueue.InvalidEtaError):
        queue.add(
            taskqueue.Task(payload="x", eta=dt.datetime(1969, 12, 31, tzinfo=dt.timezone.utc))
        )
    assert queue.fetch_statistics().tasks == 0
