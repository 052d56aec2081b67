"""Conformance: pause and resume. While a queue is paused every lease of it answers empty (any
tag, by oldest tag, through compat), adds are accepted and other queues run on; resume lets the
tasks out, none lost. A backend that keeps no pause refuses, typed, and changes nothing."""

from __future__ import annotations

import pytest

from pullqueue import Task
from pullqueue import pause as pausing
from pullqueue.compat import taskqueue
from tests.conformance.harness import Harness
from tests.conformance.helpers import names, tick


@pytest.mark.feature("pause")
def test_a_paused_queue_leases_nothing_until_resumed(harness: Harness) -> None:
    queue, neighbour = harness.new_queue(), harness.new_queue()
    queue.add([Task(b"x", name=f"p{i}", tag="t") for i in range(3)])
    neighbour.add(Task(b"y", name="n"))
    tick(harness)
    pausing.pause(harness.backend, queue.name)
    assert pausing.paused_since(harness.backend, queue.name) is not None
    assert queue.lease(60, 10) == []
    assert queue.lease(60, 10, tag="t") == []
    assert queue.lease(60, 10, group_by_tag=True) == []
    assert taskqueue.Queue(queue.name, backend=harness.backend).lease_tasks(60, 10) == []
    queue.add(Task(b"x", name="late", tag="t"))
    assert names(neighbour.lease(60, 10)) == ["n"]
    pausing.resume(harness.backend, queue.name)
    assert pausing.paused_since(harness.backend, queue.name) is None
    tick(harness)
    got: list[Task] = []
    for _ in range(5):
        got += queue.lease(60, 10)
        if len(got) == 4:
            break
    assert sorted(names(got)) == ["late", "p0", "p1", "p2"]


def test_a_backend_without_a_pause_refuses_and_changes_nothing(harness: Harness) -> None:
    if pausing.can_pause(harness.backend):
        assert pausing.paused_since(harness.backend, harness.new_queue().name) is None
        return
    queue = harness.new_queue()
    queue.add(Task(b"x", name="stays"))
    tick(harness)
    with pytest.raises(pausing.PauseNotSupportedError, match="cannot pause a queue"):
        pausing.pause(harness.backend, queue.name)
    assert names(queue.lease(60, 10)) == ["stays"]
