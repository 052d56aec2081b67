"""Conformance: adding tasks, with names, tags and payloads, and every limit of an add call.

An add either puts the tasks in the queue with their names and ETAs set, or fails with the legacy
error and leaves the queue unchanged (per-task name clashes excepted, as in the legacy bulk add).
"""

from __future__ import annotations

import datetime as dt

import pytest

from pullqueue import (
    BadTaskStateError,
    DuplicateTaskNameError,
    InvalidEtaError,
    InvalidQueueNameError,
    InvalidTagError,
    InvalidTaskError,
    InvalidTaskNameError,
    Queue,
    Task,
    TaskAlreadyExistsError,
    TaskTooLargeError,
    TooManyTasksError,
)
from pullqueue.limits import MAX_PULL_TASK_SIZE_BYTES, MAX_TAG_LENGTH, MAX_TASKS_PER_ADD
from tests.conformance.harness import Harness
from tests.conformance.helpers import drain, tick


def test_add_one_sets_name_queue_and_eta(harness: Harness) -> None:
    queue = harness.new_queue()
    before = harness.backend.now()
    task = Task(b"hello")
    returned = queue.add(task)
    after = harness.backend.now()
    assert returned is task
    assert task.was_added and task.queue_name == queue.name
    assert task.name
    assert task.eta_posix is not None and before - 1e-6 <= task.eta_posix <= after + 1e-6


def test_add_many_returns_them_with_distinct_names(harness: Harness) -> None:
    queue = harness.new_queue()
    tasks = queue.add([Task(f"p{i}") for i in range(MAX_TASKS_PER_ADD)])
    assert len(tasks) == MAX_TASKS_PER_ADD
    assert len({t.name for t in tasks}) == MAX_TASKS_PER_ADD
    tick(harness)
    assert sorted(t.payload for t in drain(queue)) == sorted(f"p{i}".encode() for i in range(100))


def test_add_nothing_is_a_no_op(harness: Harness) -> None:
    queue = harness.new_queue()
    assert queue.add([]) == []
    tick(harness)
    assert queue.lease(60, 10) == []


def test_payload_bytes_round_trip_exactly(harness: Harness) -> None:
    queue = harness.new_queue()
    binary = bytes(range(256)) * 4
    queue.add([Task(binary, name="binary"), Task("héllo ☃", name="text"), Task(b"", name="empty")])
    tick(harness)
    leased = {t.name: t.payload for t in drain(queue)}
    assert leased == {"binary": binary, "text": "héllo ☃".encode(), "empty": b""}


def test_named_task_keeps_its_name_and_tag(harness: Harness) -> None:
    queue = harness.new_queue()
    queue.add(Task(b"x", name="job-1_A", tag="user-42"))
    tick(harness)
    (task,) = queue.lease(60, 10)
    assert (task.name, task.tag, task.payload) == ("job-1_A", "user-42", b"x")


@pytest.mark.feature("unique_names")
def test_name_in_queue_is_refused_and_the_others_added(harness: Harness) -> None:
    queue = harness.new_queue()
    queue.add(Task(b"first", name="dup"))
    second, fresh = Task(b"second", name="dup"), Task(b"fresh", name="fresh")
    with pytest.raises(TaskAlreadyExistsError) as raised:
        queue.add([second, fresh])
    assert raised.value.task == "dup" and raised.value.queue == queue.name
    assert fresh.was_added and not second.was_added
    tick(harness)
    assert sorted(t.payload for t in drain(queue)) == [b"first", b"fresh"]


def test_same_name_twice_in_one_add_changes_nothing(harness: Harness) -> None:
    queue = harness.new_queue()
    with pytest.raises(DuplicateTaskNameError):
        queue.add([Task(b"a", name="twin"), Task(b"b", name="other"), Task(b"c", name="twin")])
    tick(harness)
    assert queue.lease(60, 10) == []


def test_more_than_100_tasks_in_one_add_changes_nothing(harness: Harness) -> None:
    queue = harness.new_queue()
    with pytest.raises(TooManyTasksError) as raised:
        queue.add([Task(b"x") for _ in range(MAX_TASKS_PER_ADD + 1)])
    assert "100" in str(raised.value)
    tick(harness)
    assert queue.lease(60, 1000) == []


@pytest.mark.parametrize("bad", ["", "has space", "dot.ted", "x" * 501, "ünï"])
def test_illegal_task_name_is_refused(harness: Harness, bad: str) -> None:
    queue = harness.new_queue()
    with pytest.raises(InvalidTaskNameError):
        queue.add([Task(b"ok", name="fine"), Task(b"x", name=bad)])
    tick(harness)
    assert queue.lease(60, 10) == []


def test_longest_legal_name_and_tag_are_accepted(harness: Harness) -> None:
    queue = harness.new_queue()
    queue.add(Task(b"x", name="n" * 500, tag="t" * MAX_TAG_LENGTH))
    tick(harness)
    (task,) = queue.lease(60, 10)
    assert task.name == "n" * 500 and task.tag == "t" * MAX_TAG_LENGTH


def test_tag_over_500_bytes_is_refused(harness: Harness) -> None:
    queue = harness.new_queue()
    with pytest.raises(InvalidTagError):
        queue.add(Task(b"x", tag="é" * 251))
    tick(harness)
    assert queue.lease(60, 10) == []


def test_payload_over_1_mib_is_refused_and_just_under_accepted(harness: Harness) -> None:
    queue = harness.new_queue()
    with pytest.raises(TaskTooLargeError):
        queue.add([Task(b"small"), Task(b"x" * (MAX_PULL_TASK_SIZE_BYTES + 1))])
    queue.add(Task(b"y" * (MAX_PULL_TASK_SIZE_BYTES - 1024), name="big"))
    tick(harness)
    (task,) = queue.lease(60, 10)
    assert task.name == "big" and len(task.payload) == MAX_PULL_TASK_SIZE_BYTES - 1024


@pytest.mark.feature("full_mib_payload")
def test_payload_of_exactly_1_mib_is_accepted(harness: Harness) -> None:
    queue = harness.new_queue()
    queue.add(Task(b"y" * MAX_PULL_TASK_SIZE_BYTES, name="big"))
    tick(harness)
    (task,) = queue.lease(60, 10)
    assert task.name == "big" and len(task.payload) == MAX_PULL_TASK_SIZE_BYTES


def test_eta_more_than_30_days_ahead_is_refused(harness: Harness) -> None:
    queue = harness.new_queue()
    with pytest.raises(InvalidEtaError):
        queue.add(Task(b"x", countdown=31 * 24 * 3600))
    far = dt.datetime.fromtimestamp(harness.backend.now() + 31 * 24 * 3600, tz=dt.timezone.utc)
    with pytest.raises(InvalidEtaError):
        queue.add(Task(b"x", eta=far))
    queue.add(Task(b"ok", countdown=29 * 24 * 3600))


def test_eta_and_countdown_together_are_refused() -> None:
    with pytest.raises(InvalidTaskError):
        Task(b"x", eta=dt.datetime.now(dt.timezone.utc), countdown=5)


def test_a_task_is_added_once(harness: Harness) -> None:
    queue = harness.new_queue()
    task = queue.add(Task(b"x"))
    with pytest.raises(BadTaskStateError):
        queue.add(task)


def test_illegal_queue_name_is_refused(harness: Harness) -> None:
    for bad in ("", "under_score", "q" * 101, "sp ace"):
        with pytest.raises(InvalidQueueNameError):
            Queue(bad, harness.backend)
