"""What pubsub:// does where it differs from the legacy queue, tested as docs/pubsub.md says.

Each test here stands for an entry of `differs` in tests/conformance/case_pubsub.py (or another
documented limit): the conformance test for the legacy rule is not generated for Pub/Sub, and
this one checks the rule Pub/Sub follows instead.
"""

from __future__ import annotations

import datetime as dt
import random
import time

import pytest

from pullqueue import Queue, Task
from pullqueue.adapters.pubsub.layout import shard_of
from pullqueue.dedupe.memory import MemoryNameRegistry
from tests.pubsub.conftest import MakeBackend


def _ago(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(time.time() - seconds, tz=dt.timezone.utc)


@pytest.mark.unchecked_names
def test_exact_eta_order__a_lease_sorts_what_its_pulls_brought(make_backend: MakeBackend) -> None:
    queue = Queue("order", make_backend())
    rng = random.Random(5)
    # Names that do not sort like the ETAs, added in an order unrelated to either.
    names = [f"t{n:02d}" for n in rng.sample(range(40), 40)]
    order = rng.sample(range(40), 40)
    queue.add([Task(f"{i}", name=names[i], eta=_ago(100 - i)) for i in order])
    leased = queue.lease(60, 40)
    assert [t.name for t in leased] == names


@pytest.mark.unchecked_names
def test_oldest_tag__follows_the_oldest_task_in_hand(make_backend: MakeBackend) -> None:
    queue = Queue("oldest", make_backend())
    assert shard_of("a") != shard_of("b")
    queue.add(
        [
            Task(b"x", name="a-1", tag="a", eta=_ago(20)),
            Task(b"x", name="b-new", tag="b", eta=_ago(10)),
            Task(b"x", name="plain", eta=_ago(15)),
            Task(b"x", name="b-old", tag="b", eta=_ago(30)),
        ]
    )
    # In hand: the first task of each subscription (a-1 on a's shard, b-new on b's, plain on the
    # worker subscription). b-old is behind b-new in b's shard, so a-1 is the oldest in hand;
    # the legacy queue would lease b's tasks first.
    assert [t.name for t in queue.lease(60, 10, group_by_tag=True)] == ["a-1"]
    assert [t.name for t in queue.lease(60, 10, group_by_tag=True)] == ["plain"]
    # Choosing b drains b's shard: its tasks come out together, oldest first.
    assert [t.name for t in queue.lease(60, 10, group_by_tag=True)] == ["b-old", "b-new"]
    assert queue.lease(60, 10, group_by_tag=True) == []


def test_stats__counts_this_processes_leases_and_held_tasks_approximately(
    make_backend: MakeBackend,
) -> None:
    mine = Queue("counted", make_backend(pubsub_hold_seconds=30))
    theirs = Queue("counted", make_backend())
    # Tags on one shard: leasing one pulls (and holds) the other's tasks on the way.
    assert shard_of("alpha") == shard_of("beta-3")
    mine.add(
        [Task(b"x", tag="alpha") for _ in range(3)] + [Task(b"y", tag="beta-3") for _ in range(2)]
    )
    assert len(mine.lease(60, 10, tag="beta-3")) == 2  # the alpha tasks are pulled and held
    assert len(theirs.lease(60, 10)) == 0
    stats = mine.stats()
    assert stats.approximate is True
    assert (stats.tasks, stats.leased) == (5, 2)
    assert stats.oldest_eta is None and stats.executed_last_minute is None
    leased = mine.lease(60, 10)
    assert len(leased) == 3
    assert theirs.stats().leased == 0  # another process's leases are not seen
    mine.delete(leased)
    assert (mine.stats().tasks, mine.stats().leased) == (2, 2)


@pytest.mark.unchecked_names
def test_names_without_a_registry__duplicates_are_not_detected(make_backend: MakeBackend) -> None:
    queue = Queue("dupes", make_backend())
    queue.add(Task(b"first", name="same"))
    queue.add(Task(b"second", name="same"))
    leased = queue.lease(60, 10) + queue.lease(60, 10)
    assert sorted(t.payload for t in leased) == [b"first", b"second"]
    assert [t.name for t in leased] == ["same", "same"]


def test_names_with_a_registry__unique_tombstoned_and_released(
    make_backend: MakeBackend, raw: tuple[object, object]
) -> None:
    publisher, _ = raw
    registry = MemoryNameRegistry()
    backend = make_backend(names=registry)
    queue = Queue("named", backend)
    queue.add(Task(b"x", name="taken"))
    tasks = [Task(b"a", name="free"), Task(b"b", name="taken")]
    try:
        queue.add(tasks)
        raise AssertionError("the second 'taken' was accepted")
    except Exception as exc:
        assert type(exc).__name__ == "TaskAlreadyExistsError"
    assert [t.was_added for t in tasks] == [True, False]
    leased = queue.lease(60, 10)
    assert sorted(t.name or "" for t in leased) == ["free", "taken"]
    queue.delete(leased)
    assert [type(e).__name__ for e in registry.claim("named", ["taken"])] == ["TombstonedTaskError"]
    # A publish that fails gives its claim back.
    publisher.delete_topic(request={"topic": backend.topology("named").topic})  # type: ignore[attr-defined]
    try:
        queue.add(Task(b"x", name="retry-me"))
        raise AssertionError("published to a deleted topic")
    except Exception as exc:
        assert type(exc).__name__ == "NotProvisionedError"
    assert registry.claim("named", ["retry-me"]) == [None]
