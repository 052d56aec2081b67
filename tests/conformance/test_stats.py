"""Conformance: stats() counts tasks, tells the oldest ETA, leases in flight and recent leases.

Operators watch these numbers to see a backlog grow or drain; each count is checked against
what the test did to the queue.
"""

from __future__ import annotations

import pytest

from pullqueue import Task
from tests.conformance.harness import Harness
from tests.conformance.helpers import ago, expire, tick


def test_stats_name_the_queue(harness: Harness) -> None:
    queue = harness.new_queue()
    assert harness.new_queue().stats().queue != queue.stats().queue == queue.name


@pytest.mark.feature("stats_exact")
def test_empty_queue(harness: Harness) -> None:
    stats = harness.new_queue().stats()
    assert (stats.tasks, stats.oldest_eta) == (0, None)


@pytest.mark.feature("stats_exact")
def test_tasks_and_oldest_eta(harness: Harness) -> None:
    queue = harness.new_queue()
    oldest = ago(harness, 500)
    queue.add([Task(b"a", eta=ago(harness, 100)), Task(b"b", eta=oldest), Task(b"c")])
    stats = queue.stats()
    assert stats.tasks == 3 and not stats.approximate
    assert stats.oldest_eta == pytest.approx(oldest.timestamp(), abs=1e-6)
    leased = queue.lease(3600, 2)
    stats = queue.stats()
    assert stats.tasks == 3
    queue.delete(leased)
    stats = queue.stats()
    assert stats.tasks == 1 and stats.oldest_eta is not None


@pytest.mark.feature("stats_exact")
def test_oldest_eta_counts_leased_tasks(harness: Harness) -> None:
    queue = harness.new_queue()
    queue.add(Task(b"x"))
    tick(harness)
    (task,) = queue.lease(30, 1)
    assert queue.stats().oldest_eta == pytest.approx(task.eta_posix, abs=1e-6)


@pytest.mark.feature("stats_exact")
def test_purge_and_delete_show_in_stats(harness: Harness) -> None:
    queue = harness.new_queue()
    queue.add([Task(b"x", name=f"s{i}") for i in range(5)])
    queue.delete_by_name(["s0", "s1"])
    assert queue.stats().tasks == 3
    queue.purge()
    assert (queue.stats().tasks, queue.stats().oldest_eta) == (0, None)


@pytest.mark.feature("stats_leased", "lease_expiry")
def test_leased_counts_current_leases(harness: Harness) -> None:
    queue = harness.new_queue()
    queue.add([Task(b"x") for _ in range(5)])
    tick(harness)
    assert queue.stats().leased == 0
    short = queue.lease(harness.short_lease, 2)
    long = queue.lease(600, 1)
    assert queue.stats().leased == 3
    queue.delete(long)
    assert queue.stats().leased == 2
    expire(harness)
    assert queue.stats().leased == 0
    assert len(short) == 2


@pytest.mark.feature("executed_last_minute")
def test_executed_last_minute(harness: Harness) -> None:
    queue = harness.new_queue()
    queue.add([Task(b"x") for _ in range(7)])
    tick(harness)
    assert queue.stats().executed_last_minute == 0
    queue.lease(600, 3)
    queue.lease(600, 2)
    assert queue.stats().executed_last_minute == 5
    queue.lease(600, 10)
    assert queue.stats().executed_last_minute == 7
