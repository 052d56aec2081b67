"""Conformance: NaN, infinities and booleans are refused with the parameter's legacy error.

A lease time, a task count or a deadline that is no number of seconds or tasks fails before the
backend is called, so the queue and every lease in it stay as they were; the same holds through
the legacy-shaped API.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from pullqueue import (
    Error,
    InvalidDeadlineError,
    InvalidLeaseTimeError,
    InvalidMaxTasksError,
    Queue,
    Task,
)
from pullqueue.compat import taskqueue
from tests.conformance.harness import Harness
from tests.conformance.helpers import tick

BAD_NUMBERS = [math.nan, math.inf, -math.inf, True, False]
BAD_IDS = ["nan", "inf", "-inf", "True", "False"]

LeaseCall = Callable[[Queue, Any], object]

QUEUE_LEASE_CALLS: list[tuple[str, LeaseCall, type[Error]]] = [
    ("lease_seconds", lambda q, v: q.lease(v, 10), InvalidLeaseTimeError),
    ("max_tasks", lambda q, v: q.lease(60, v), InvalidMaxTasksError),
    ("deadline", lambda q, v: q.lease(60, 10, deadline=v), InvalidDeadlineError),
    ("by_tag_lease_seconds", lambda q, v: q.lease(v, 10, group_by_tag=True), InvalidLeaseTimeError),
    ("by_tag_max_tasks", lambda q, v: q.lease(60, v, tag="t"), InvalidMaxTasksError),
]


def _compat(queue: Queue) -> taskqueue.Queue:
    return taskqueue.Queue(queue.name, backend=queue.backend)


COMPAT_LEASE_CALLS: list[tuple[str, LeaseCall, type[Error]]] = [
    ("lease_tasks_seconds", lambda q, v: _compat(q).lease_tasks(v, 10), InvalidLeaseTimeError),
    ("lease_tasks_max", lambda q, v: _compat(q).lease_tasks(60, v), InvalidMaxTasksError),
    (
        "lease_tasks_deadline",
        lambda q, v: _compat(q).lease_tasks(60, 10, deadline=v),
        InvalidDeadlineError,
    ),
    (
        "by_tag_seconds",
        lambda q, v: _compat(q).lease_tasks_by_tag(v, 10),
        InvalidLeaseTimeError,
    ),
    (
        "by_tag_deadline",
        lambda q, v: _compat(q).lease_tasks_by_tag(60, 10, "t", deadline=v),
        InvalidDeadlineError,
    ),
    (
        "fetch_statistics_deadline",
        lambda q, v: _compat(q).fetch_statistics(deadline=v),
        InvalidDeadlineError,
    ),
]


@pytest.mark.parametrize("bad", BAD_NUMBERS, ids=BAD_IDS)
@pytest.mark.parametrize(
    ("call", "error"),
    [(call, error) for _, call, error in QUEUE_LEASE_CALLS + COMPAT_LEASE_CALLS],
    ids=[name for name, _, _ in QUEUE_LEASE_CALLS + COMPAT_LEASE_CALLS],
)
def test_a_bad_number_is_refused_and_nothing_is_leased(
    harness: Harness, call: LeaseCall, error: type[Error], bad: object
) -> None:
    queue = harness.new_queue()
    queue.add(Task(b"x", name="waiting", tag="t"))
    tick(harness)
    with pytest.raises(error) as raised:
        call(queue, bad)
    assert raised.value.queue == queue.name
    (task,) = queue.lease(60, 10)
    assert (task.name, task.retry_count) == ("waiting", 1)


@pytest.mark.parametrize("bad", BAD_NUMBERS, ids=BAD_IDS)
@pytest.mark.parametrize("api", ["queue", "compat"])
def test_modify_lease_refuses_a_bad_number_and_the_lease_stays(
    harness: Harness, api: str, bad: object
) -> None:
    queue = harness.new_queue()
    queue.add(Task(b"x", name="held"))
    tick(harness)
    (task,) = queue.lease(120, 10)
    expires, token = task.lease_expires, task.lease_token
    modify = queue.modify_lease if api == "queue" else _compat(queue).modify_task_lease
    with pytest.raises(InvalidLeaseTimeError) as raised:
        modify(task, bad)  # type: ignore[arg-type]
    assert raised.value.queue == queue.name
    assert (task.lease_expires, task.lease_token) == (expires, token)
    assert queue.lease(60, 10) == []
    queue.modify_lease(task, 0)
    tick(harness)
    (again,) = queue.lease(60, 10)
    assert (again.name, again.retry_count) == ("held", 2)
