"""Transactional adds through pullqueue.compat: the SDK's rules, staging, publish and the sweeper.

The differential tests run the same transaction code on the SDK's taskqueue stub, on memory://
and on Pub/Sub; the outbox tests make the post-commit publish fail (as a crash between commit and
publish would) and check that a sweep publishes each committed task once, and nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from google.appengine.api import datastore
from google.appengine.ext import db, ndb

from pullqueue.adapters.base import Backend
from pullqueue.errors import Error, TransientError
from pullqueue.outbox import KIND, sweep
from pullqueue.outbox.appengine import AppEngineStore
from pullqueue.outbox.publish import publish, publish_committed
from pullqueue.task import Task
from tests.outbox.conftest import Order, Side


def staged_entities() -> list[Any]:
    return list(datastore.Query(KIND).Run())


@pytest.mark.parametrize("api", ["ndb", "db"])
def test_a_task_added_before_the_transaction_writes_its_entity_commits_with_it(
    side: Side, api: str
) -> None:
    """Non-XG: the entity group is not known at the add, only at the commit."""

    def place(number: int, fail: bool) -> Any:
        task = side.queue.add(
            side.tq.Task(payload=b"order-%d" % number, method="PULL"), transactional=True
        )
        if api == "ndb":
            Order(id=number, number=number).put()
        else:
            datastore.Put(datastore.Entity("Order", id=number))
        if fail:
            raise db.Rollback()
        return task

    if api == "ndb":
        task = ndb.transaction(lambda: place(1, False))
        ndb.transaction(lambda: place(2, True))
    else:
        task = db.run_in_transaction(place, 1, False)
        db.run_in_transaction(place, 2, True)
    assert task.name and task.was_enqueued and task.queue_name == "pulls"
    assert Order.get_by_id(1, use_cache=False) is not None
    assert Order.get_by_id(2, use_cache=False) is None
    assert side.tasks() == [b"order-1"]
    assert staged_entities() == []


def test_a_transaction_in_an_existing_entity_group_and_a_child_entity(side: Side) -> None:
    parent = Order(id=7, number=7).put()

    def place() -> None:
        order = parent.get()
        order.number = 8
        side.queue.add(
            [
                side.tq.Task(payload=b"a", method="PULL"),
                side.tq.Task(payload=b"b", tag="t", method="PULL"),
            ],
            transactional=True,
        )
        Order(parent=parent, number=1).put()
        order.put()

    ndb.transaction(place)
    assert side.tasks() == [b"a", b"b"]


def test_five_tasks_per_transaction_across_calls_and_the_sixth_fails_the_add(side: Side) -> None:
    def place() -> bool | str:
        side.queue.add(
            [side.tq.Task(payload=b"%d" % i, method="PULL") for i in range(3)], transactional=True
        )
        try:
            side.queue.add(
                [side.tq.Task(payload=b"x%d" % i, method="PULL") for i in range(3)],
                transactional=True,
            )
        except Exception as exc:
            Order(number=1).put()
            return isinstance(exc, side.tq.DatastoreError)
        return "no error"

    assert ndb.transaction(place) is True
    assert side.tasks() == [b"0", b"1", b"2"]


def test_outside_a_transaction_and_named_tasks_are_refused(side: Side) -> None:
    with pytest.raises(side.tq.BadTransactionStateError):
        side.queue.add(side.tq.Task(payload=b"a", method="PULL"), transactional=True)

    def named() -> None:
        side.queue.add(side.tq.Task(payload=b"a", name="n1", method="PULL"), transactional=True)

    with pytest.raises(side.tq.InvalidTaskNameError):
        ndb.transaction(named)
    assert side.tasks() == []


class FailingAdds:
    """A backend whose adds fail (as the publish of a process killed after its commit)."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self.failing = True

    def add(self, queue: str, tasks: Sequence[Task]) -> list[Error | None]:
        if self.failing:
            raise TransientError("publish lost")
        return self._backend.add(queue, tasks)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)


def test_a_task_whose_publish_failed_after_commit_is_swept_once_after_the_grace(
    ours: Side, caplog: pytest.LogCaptureFixture
) -> None:
    assert ours.backend is not None
    failing = FailingAdds(ours.backend)
    queue = ours.tq.Queue("pulls", backend=failing)

    def place() -> None:
        queue.add(ours.tq.Task(payload=b"kept", method="PULL"), transactional=True)
        Order(id=1, number=1).put()

    ndb.transaction(place)
    assert Order.get_by_id(1) is not None
    assert ours.tasks() == []
    assert len(staged_entities()) == 1
    assert "the sweeper publishes it" in caplog.text
    store = AppEngineStore()
    early = sweep(store, ours.backend, grace_seconds=60)
    assert (early.found, ours.tasks()) == (0, [])
    report = sweep(store, ours.backend, grace_seconds=0)
    assert (report.found, report.published, report.failed) == (1, 1, 0)
    assert ours.tasks() == [b"kept"]
    assert staged_entities() == []
    assert sweep(store, ours.backend, grace_seconds=0).found == 0
    assert ours.tasks() == [b"kept"]


def test_a_sweeper_racing_the_post_commit_publish_publishes_once(ours: Side) -> None:
    assert ours.backend is not None
    failing = FailingAdds(ours.backend)

    def place() -> None:
        ours.tq.Queue("pulls", backend=failing).add(
            ours.tq.Task(payload=b"once", method="PULL"), transactional=True
        )
        Order(number=1).put()

    ndb.transaction(place)
    [(_key, staged)] = AppEngineStore().staged(2**62, 10)
    # A slow post-commit publish lands after a sweeper published and deleted the staging.
    assert sweep(AppEngineStore(), ours.backend, grace_seconds=0).published == 1
    late = publish(ours.backend, [staged])
    assert (len(late.published), len(late.already)) == (0, 1)
    assert ours.tasks() == [b"once"]


def test_a_rolled_back_transaction_stages_nothing_a_sweep_could_find(ours: Side) -> None:
    def place() -> None:
        ours.queue.add(ours.tq.Task(payload=b"never", method="PULL"), transactional=True)
        Order(number=1).put()
        raise db.Rollback()

    ndb.transaction(place)
    assert staged_entities() == []
    assert sweep(AppEngineStore(), ours.queue.backend, grace_seconds=0).found == 0
    assert ours.tasks() == []


@pytest.mark.parametrize("ours", ["pubsub"], indirect=True)  # memory:// claims as it adds
def test_a_publisher_killed_between_its_claim_and_its_publish_loses_nothing(ours: Side) -> None:
    """The registry holds the name live and no message exists: the sweep publishes it again."""
    backend = ours.backend
    failing = FailingAdds(backend)  # type: ignore[arg-type]

    def place() -> None:
        ours.tq.Queue("pulls", backend=failing).add(
            ours.tq.Task(payload=b"claimed", method="PULL"), transactional=True
        )
        Order(number=1).put()

    ndb.transaction(place)
    [(_key, staged)] = AppEngineStore().staged(2**62, 10)
    assert backend.names.claim("pulls", [staged.name]) == [None]  # type: ignore[union-attr]
    report = sweep(AppEngineStore(), backend, grace_seconds=0)  # type: ignore[arg-type]
    assert (report.published, report.republished, report.already) == (1, 1, 0)
    assert ours.tasks() == [b"claimed"]


def test_a_post_commit_publish_after_a_sweeper_killed_mid_publish_leaves_it_staged(
    ours: Side,
) -> None:
    """The post-commit publish, slower than the grace period, finds the name taken: on Pub/Sub
    (a registry) a sweeper claimed it and may have been killed before Pub/Sub took the message,
    so the staging stays and the next sweep publishes it (it was deleted, and the task lost,
    in a crash test run); where an add is atomic (memory://) the name is a published task."""
    backend = ours.backend
    assert backend is not None
    failing = FailingAdds(backend)

    def place() -> None:
        ours.tq.Queue("pulls", backend=failing).add(
            ours.tq.Task(payload=b"late", method="PULL"), transactional=True
        )
        Order(number=1).put()

    ndb.transaction(place)
    [(_key, staged)] = AppEngineStore().staged(2**62, 10)
    names = getattr(backend, "names", None)
    if names is not None:
        assert names.claim("pulls", [staged.name]) == [None]  # the killed sweeper's claim
        assert publish_committed(backend, [staged]) == set()
        assert [item.name for _key, item in AppEngineStore().staged(2**62, 10)] == [staged.name]
        report = sweep(AppEngineStore(), backend, grace_seconds=0)  # type: ignore[arg-type]
        assert (report.published, report.republished) == (1, 1)
    else:
        assert publish(backend, [staged]).published == [staged]  # the sweeper's publish
        assert publish_committed(backend, [staged]) == {staged.name}
    assert ours.tasks() == [b"late"]


def test_two_sweepers_one_lock_and_a_deleted_task_is_not_published_again(ours: Side) -> None:
    assert ours.backend is not None
    failing = FailingAdds(ours.backend)

    def place() -> None:
        ours.tq.Queue("pulls", backend=failing).add(
            [ours.tq.Task(payload=b"a", method="PULL"), ours.tq.Task(payload=b"b", method="PULL")],
            transactional=True,
        )
        Order(number=1).put()

    ndb.transaction(place)
    store = AppEngineStore()
    [(key, _a), _b] = sorted(store.staged(2**62, 10), key=lambda pair: pair[1].payload)
    assert store.lock(key, 2**62, 0)  # another sweeper is publishing task "a"
    report = sweep(store, ours.backend, grace_seconds=0)
    assert (report.found, report.skipped, report.published) == (2, 1, 1)
    [leased] = ours.queue.lease_tasks(60, 10)
    assert leased.payload == b"b"
    ours.queue.delete_tasks(leased)
    # "b" was delivered and deleted; its staging is gone, and a stray republish is refused.
    assert [item.payload for _key, item in store.staged(2**62, 10)] == [b"a"]
    late = publish(ours.backend, [_b[1]])
    assert len(late.already) == 1
