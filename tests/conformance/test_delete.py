"""Conformance: deleting leased tasks, deleting by name, was_deleted, and tombstoned names.

Deleting is how a worker says a task is done: the task never comes back, and was_deleted tells
whether this call removed it (False when it was already gone).
"""

from __future__ import annotations

import pytest

from pullqueue import (
    BadTaskStateError,
    DuplicateTaskNameError,
    InvalidTaskNameError,
    Task,
    TombstonedTaskError,
)
from tests.conformance.harness import Harness
from tests.conformance.helpers import expire, names, tick


def test_deleted_leased_tasks_never_come_back(harness: Harness) -> None:
    queue = harness.new_queue()
    queue.add([Task(f"{i}", name=f"d{i}") for i in range(6)])
    tick(harness)
    leased = queue.lease(harness.short_lease, 4)
    returned = queue.delete(leased)
    assert returned == leased and all(t.was_deleted for t in leased)
    expire(harness)
    assert sorted(names(queue.lease(60, 10))) == sorted(
        {"d0", "d1", "d2", "d3", "d4", "d5"} - set(names(leased))
    )


def test_delete_one_task_object(harness: Harness) -> None:
    queue = harness.new_queue()
    queue.add(Task(b"x", name="single"))
    tick(harness)
    (task,) = queue.lease(60, 1)
    assert queue.delete(task) == [task] and task.was_deleted


def test_delete_of_a_gone_task_reports_false(harness: Harness) -> None:
    queue = harness.new_queue()
    queue.add(Task(b"x", name="once"))
    tick(harness)
    (task,) = queue.lease(60, 1)
    queue.delete(task)
    (again,) = queue.delete_by_name("once")
    assert again.was_deleted is False
    (unknown,) = queue.delete_by_name(["never-there"])
    assert unknown.was_deleted is False


def test_same_task_object_cannot_be_deleted_twice(harness: Harness) -> None:
    queue = harness.new_queue()
    queue.add(Task(b"x", name="twice"))
    tick(harness)
    (task,) = queue.lease(60, 1)
    queue.delete(task)
    with pytest.raises(BadTaskStateError):
        queue.delete(task)


def test_delete_needs_names_and_no_repeats(harness: Harness) -> None:
    queue = harness.new_queue()
    with pytest.raises(BadTaskStateError):
        queue.delete(Task(b"unnamed"))
    with pytest.raises(DuplicateTaskNameError):
        queue.delete_by_name(["a", "b", "a"])
    with pytest.raises(InvalidTaskNameError):
        queue.delete_by_name("not a name")


def test_delete_by_name_of_leased_tasks(harness: Harness) -> None:
    queue = harness.new_queue()
    queue.add([Task(b"x", name="n1"), Task(b"y", name="n2")])
    tick(harness)
    leased = queue.lease(harness.short_lease, 10)
    results = queue.delete_by_name(names(leased))  # type: ignore[arg-type]
    assert [t.was_deleted for t in results] == [True, True]
    expire(harness)
    assert queue.lease(60, 10) == []


@pytest.mark.feature("delete_unleased")
def test_delete_by_name_without_a_lease(harness: Harness) -> None:
    queue = harness.new_queue()
    queue.add([Task(b"x", name="keep"), Task(b"y", name="drop", countdown=3600)])
    (dropped,) = queue.delete_by_name(["drop"])
    assert dropped.was_deleted
    tick(harness)
    assert names(queue.lease(60, 10)) == ["keep"]


@pytest.mark.feature("tombstones")
def test_deleted_name_is_tombstoned(harness: Harness) -> None:
    queue = harness.new_queue()
    queue.add(Task(b"x", name="gone"))
    tick(harness)
    queue.delete(queue.lease(60, 1))
    with pytest.raises(TombstonedTaskError) as raised:
        queue.add(Task(b"x", name="gone"))
    assert raised.value.task == "gone"
    other = harness.new_queue()
    other.add(Task(b"x", name="gone"))  # tombstones are per queue
