"""Conformance: leasing by tag, with a tag given, with tag=None, and with an untagged oldest task.

Tags group work (all tasks of one user, one shard): a lease by tag returns only that group, and
tag=None follows the oldest available task, as the legacy lease_tasks_by_tag does.
"""

from __future__ import annotations

import pytest

from pullqueue import InvalidTagError, Task
from tests.conformance.harness import Harness
from tests.conformance.helpers import ago, names, tick


def test_lease_by_tag_returns_only_that_tag(harness: Harness) -> None:
    queue = harness.new_queue()
    queue.add(
        [Task(f"{i}", name=f"n{i}", tag=("even" if i % 2 == 0 else "odd")) for i in range(10)]
    )
    queue.add(Task(b"plain", name="plain"))
    tick(harness)
    leased = queue.lease(60, 100, tag="odd")
    assert sorted(names(leased)) == ["n1", "n3", "n5", "n7", "n9"]
    assert all(t.tag == "odd" for t in leased)
    assert queue.lease(60, 100, tag="odd") == []
    even = queue.lease(60, 2, tag="even")
    assert len(even) == 2 and {t.tag for t in even} == {"even"}


def test_unknown_tag_leases_nothing(harness: Harness) -> None:
    queue = harness.new_queue()
    queue.add(Task(b"x", tag="known"))
    tick(harness)
    assert queue.lease(60, 10, tag="unknown") == []


def test_tag_given_as_bytes(harness: Harness) -> None:
    queue = harness.new_queue()
    queue.add(Task(b"x", name="b", tag=b"bytes-tag"))
    tick(harness)
    (task,) = queue.lease(60, 10, tag=b"bytes-tag")  # type: ignore[arg-type]
    assert task.tag == "bytes-tag"


def test_many_dynamic_tags(harness: Harness) -> None:
    queue = harness.new_queue()
    queue.add([Task(f"{i}", tag=f"user-{i % 25}") for i in range(100)])
    tick(harness)
    for user in range(25):
        leased = queue.lease(60, 100, tag=f"user-{user}")
        assert len(leased) == 4 and {t.tag for t in leased} == {f"user-{user}"}


@pytest.mark.feature("exact_eta_order")
def test_lease_by_tag_is_oldest_first(harness: Harness) -> None:
    queue = harness.new_queue()
    queue.add(
        [Task(b"x", name=f"t{i}", tag="g", eta=ago(harness, 50 - i)) for i in (3, 1, 4, 0, 2)]
    )
    assert names(queue.lease(60, 3, tag="g")) == ["t0", "t1", "t2"]


@pytest.mark.feature("oldest_tag", "exact_eta_order")
def test_tag_none_follows_the_oldest_tagged_task(harness: Harness) -> None:
    queue = harness.new_queue()
    queue.add(
        [
            Task(b"x", name="b-old", tag="b", eta=ago(harness, 30)),
            Task(b"x", name="a-1", tag="a", eta=ago(harness, 20)),
            Task(b"x", name="plain", eta=ago(harness, 15)),
            Task(b"x", name="b-new", tag="b", eta=ago(harness, 10)),
        ]
    )
    assert names(queue.lease(60, 10, group_by_tag=True)) == ["b-old", "b-new"]
    assert names(queue.lease(60, 10, group_by_tag=True)) == ["a-1"]
    assert names(queue.lease(60, 10, group_by_tag=True)) == ["plain"]
    assert queue.lease(60, 10, group_by_tag=True) == []


@pytest.mark.feature("oldest_tag", "exact_eta_order")
def test_untagged_oldest_leases_untagged_among_the_oldest_max_tasks(harness: Harness) -> None:
    queue = harness.new_queue()
    queue.add(
        [
            Task(b"x", name="u1", eta=ago(harness, 50)),
            Task(b"x", name="t1", tag="t", eta=ago(harness, 40)),
            Task(b"x", name="u2", eta=ago(harness, 30)),
            Task(b"x", name="u3", eta=ago(harness, 20)),
            Task(b"x", name="u4", eta=ago(harness, 10)),
        ]
    )
    # The legacy rule: the 3 oldest are u1, t1, u2; of those only the untagged are leased.
    assert names(queue.lease(60, 3, group_by_tag=True)) == ["u1", "u2"]
    assert names(queue.lease(60, 3, group_by_tag=True)) == ["t1"]
    assert names(queue.lease(60, 3, group_by_tag=True)) == ["u3", "u4"]


def test_tag_over_500_bytes_is_refused_on_lease(harness: Harness) -> None:
    with pytest.raises(InvalidTagError):
        harness.new_queue().lease(60, 10, tag="x" * 501)
