"""Conformance: purge empties a queue, leased tasks included, and leaves it usable.

Purging is the operator's reset: nothing that was in the queue is leased afterwards, other queues
are untouched, and new tasks can be added at once.
"""

from __future__ import annotations

import pytest

from pullqueue import Task, TombstonedTaskError
from tests.conformance.harness import Harness
from tests.conformance.helpers import expire, names, tick


def test_purge_removes_waiting_and_leased_tasks(harness: Harness) -> None:
    queue, neighbour = harness.new_queue(), harness.new_queue()
    queue.add([Task(f"{i}") for i in range(10)])
    neighbour.add(Task(b"stay", name="stay"))
    tick(harness)
    queue.lease(harness.short_lease, 3)
    queue.purge()
    expire(harness)
    assert queue.lease(60, 100) == []
    assert names(neighbour.lease(60, 10)) == ["stay"]


def test_queue_is_usable_after_purge(harness: Harness) -> None:
    queue = harness.new_queue()
    queue.add(Task(b"old"))
    queue.purge()
    queue.add(Task(b"new", name="new"))
    tick(harness)
    assert names(queue.lease(60, 10)) == ["new"]


def test_purge_of_an_empty_queue(harness: Harness) -> None:
    queue = harness.new_queue()
    queue.purge()
    tick(harness)
    assert queue.lease(60, 10) == []


@pytest.mark.feature("purge_tombstones")
def test_purged_names_are_tombstoned(harness: Harness) -> None:
    queue = harness.new_queue()
    queue.add(Task(b"x", name="purged"))
    queue.purge()
    with pytest.raises(TombstonedTaskError):
        queue.add(Task(b"x", name="purged"))
