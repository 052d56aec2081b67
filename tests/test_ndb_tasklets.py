"""`*_async` calls inside ndb tasklets of the bundled-services SDK, on the SDK and on pullqueue.

Services built on `google.appengine.ext.ndb` yield taskqueue RPCs from tasklets, and add tasks
with `transactional=True` inside transactional tasklets, so a task is enqueued only if the
transaction commits. Each test runs the same tasklet code on the SDK (its taskqueue stub) and on
`pullqueue.compat.taskqueue` (memory://), both on the testbed's datastore, and compares what the
caller sees and what ends up in the queue.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from google.appengine.api import taskqueue as sdk_taskqueue
from google.appengine.ext import ndb, testbed

from pullqueue.adapters.memory import MemoryBackend
from pullqueue.compat import taskqueue as compat
from pullqueue.registry import reset_default_backends

QUEUE = "pulls"


class Order(ndb.Model):
    """The entity a tasklet writes in the same transaction as its task."""

    number = ndb.IntegerProperty()


@dataclass
class Side:
    """One implementation: its taskqueue module and a queue named QUEUE on it."""

    name: str
    tq: Any
    queue: Any

    def tasks(self) -> list[bytes]:
        """Payloads of every task in the queue (leased to read them, then released)."""
        leased = self.queue.lease_tasks(60, 1000)
        for task in leased:
            self.queue.modify_task_lease(task, 0)
        return sorted(task.payload for task in leased)


@pytest.fixture(params=["sdk", "pullqueue"])
def side(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Side]:
    # Task.add_async(queue_name) reaches the process-wide backend: a fresh memory:// one.
    monkeypatch.setenv("PULLQUEUE_URL", "memory://")
    reset_default_backends()
    with tempfile.TemporaryDirectory(prefix="ndb-tasklets-") as root:
        (Path(root) / "queue.yaml").write_text(f"queue:\n- name: {QUEUE}\n  mode: pull\n")
        bed = testbed.Testbed()
        bed.activate()
        try:
            bed.init_datastore_v3_stub()
            bed.init_memcache_stub()
            bed.init_taskqueue_stub(root_path=root)
            ndb.get_context().clear_cache()
            if request.param == "sdk":
                yield Side("sdk", sdk_taskqueue, sdk_taskqueue.Queue(QUEUE))
            else:
                yield Side("pullqueue", compat, compat.Queue(QUEUE))
        finally:
            bed.deactivate()
            reset_default_backends()


def _view(task: Any) -> tuple[Any, ...]:
    """What a caller reads of a task an add returned (the name only whether it is set)."""
    return (type(task).__name__, task.payload, task.queue_name, task.was_enqueued)


def _add_in_transaction(side: Side, tasks: Any, *, transactional: bool, fail: bool) -> Any:
    """Run a transactional tasklet that writes an Order and yields add_async(tasks)."""

    @ndb.transactional_tasklet
    def place_order() -> Any:
        yield Order(id=1, number=7).put_async()
        added = yield side.queue.add_async(tasks, transactional=transactional)
        if fail:
            raise ValueError("the order is refused after the add")
        raise ndb.Return(added)

    return place_order().get_result()


@pytest.mark.parametrize("many", [False, True], ids=["one-task", "a-list"])
def test_a_transactional_add_yielded_in_a_transactional_tasklet_happens_once_at_commit(
    side: Side, many: bool
) -> None:
    tasks = [side.tq.Task(payload=b"a", method="PULL"), side.tq.Task(payload=b"b", method="PULL")]
    result = _add_in_transaction(side, tasks if many else tasks[0], transactional=True, fail=False)
    returned = result if many else [result]
    assert all(got is given for got, given in zip(returned, tasks, strict=False))
    seen = [_view(task) for task in returned]
    assert seen == [("Task", p, QUEUE, True) for p in ([b"a", b"b"] if many else [b"a"])]
    assert Order.get_by_id(1).number == 7
    assert side.tasks() == ([b"a", b"b"] if many else [b"a"])


def test_a_transactional_add_is_dropped_when_the_transaction_rolls_back(side: Side) -> None:
    task = side.tq.Task(payload=b"a", method="PULL")
    with pytest.raises(ValueError, match="refused"):
        _add_in_transaction(side, task, transactional=True, fail=True)
    assert Order.get_by_id(1) is None
    assert side.tasks() == []


@pytest.mark.parametrize("fail", [False, True], ids=["commit", "rollback"])
def test_a_plain_add_yielded_in_a_transactional_tasklet_is_added_once_either_way(
    side: Side, fail: bool
) -> None:
    task = side.tq.Task(payload=b"a", method="PULL", tag="t")
    if fail:
        with pytest.raises(ValueError, match="refused"):
            _add_in_transaction(side, task, transactional=False, fail=True)
    else:
        result = _add_in_transaction(side, task, transactional=False, fail=False)
        assert result is task
    assert task.was_enqueued and task.name and task.queue_name == QUEUE
    assert side.tasks() == [b"a"]


def test_transactional_adds_need_a_transaction_and_refuse_names(side: Side) -> None:
    @ndb.tasklet
    def outside() -> Any:
        yield side.queue.add_async(side.tq.Task(payload=b"a", method="PULL"), transactional=True)

    with pytest.raises(side.tq.BadTransactionStateError):
        outside().get_result()

    @ndb.transactional_tasklet
    def named() -> Any:
        yield side.queue.add_async(
            side.tq.Task(payload=b"a", method="PULL", name="n1"), transactional=True
        )

    with pytest.raises(side.tq.InvalidTaskNameError):
        named().get_result()
    assert side.tasks() == []


@pytest.mark.parametrize(
    ("calls", "size", "error"),
    [
        ([3, 3], 1, "DatastoreError"),
        ([6], 1, "DatastoreError"),
        ([2], 600_000, "TransactionalRequestTooLargeError"),
    ],
    ids=["six-tasks-in-two-calls", "six-tasks-in-one-call", "two-tasks-over-one-mib"],
)
def test_a_transaction_adds_at_most_five_tasks_of_at_most_one_mib_a_call(
    side: Side, calls: list[int], size: int, error: str
) -> None:
    @ndb.transactional_tasklet
    def place_orders() -> Any:
        for count in calls:
            tasks = [side.tq.Task(payload=b"x" * size, method="PULL") for _ in range(count)]
            yield side.queue.add_async(tasks, transactional=True)

    with pytest.raises(getattr(side.tq, error)):
        place_orders().get_result()
    assert side.tasks() == []


def test_every_async_call_can_be_yielded_by_a_tasklet(side: Side) -> None:
    tq, queue = side.tq, side.queue
    seen: list[Any] = []

    @ndb.tasklet
    def work() -> Any:
        added = yield queue.add_async(
            [tq.Task(payload=b"x", method="PULL", tag="t"), tq.Task(payload=b"y", method="PULL")]
        )
        seen.append(("add", [t.was_enqueued for t in added]))
        task = yield tq.Task(payload=b"z", method="PULL", name="zed").add_async(QUEUE)
        seen.append(("task.add", task.name, task.was_enqueued))
        stats = yield queue.fetch_statistics_async()
        seen.append(("stats", type(stats).__name__, stats.tasks))
        stats = yield tq.QueueStatistics.fetch_async([queue])
        seen.append(("QueueStatistics.fetch", [s.tasks for s in stats]))
        by_tag = yield queue.lease_tasks_by_tag_async(60, 10, "t")
        seen.append(("lease_by_tag", [t.payload for t in by_tag]))
        leased = yield queue.lease_tasks_async(60, 10)
        seen.append(("lease", sorted(t.payload for t in leased)))
        deleted = yield queue.delete_tasks_async(by_tag)
        seen.append(("delete", [t.was_deleted for t in deleted]))
        by_name = yield queue.delete_tasks_by_name_async(["zed", "never-added"])
        seen.append(("delete_by_name", [t.was_deleted for t in by_name]))
        try:
            yield tq.Task(payload=b"z", method="PULL", name="zed").add_async(QUEUE)
        except tq.TombstonedTaskError:
            seen.append(("error thrown into the tasklet", "TombstonedTaskError"))
        raise ndb.Return("done")

    assert work().get_result() == "done"
    assert seen == [
        ("add", [True, True]),
        ("task.add", "zed", True),
        ("stats", "QueueStatistics", 3),
        ("QueueStatistics.fetch", [3]),
        ("lease_by_tag", [b"x"]),
        ("lease", [b"y", b"z"]),
        ("delete", [True]),
        ("delete_by_name", [True, False]),
        ("error thrown into the tasklet", "TombstonedTaskError"),
    ]


def test_an_rpc_the_caller_created_is_the_one_yielded_and_keeps_the_sdk_attributes(
    side: Side,
) -> None:
    callbacks: list[str] = []
    rpc = side.tq.create_rpc(deadline=5, callback=lambda: callbacks.append("called"))

    @ndb.tasklet
    def work() -> Any:
        returned = side.queue.add_async(side.tq.Task(payload=b"a", method="PULL"), rpc=rpc)
        assert returned is rpc
        task = yield returned
        raise ndb.Return(task)

    task = work().get_result()
    assert task.payload == b"a" and task.was_enqueued
    assert (rpc.service, rpc.deadline, rpc.get_result()) == ("taskqueue", 5, task)
    assert callbacks == ["called"]


def test_without_ndb_the_async_calls_answer_plain_rpcs() -> None:
    script = textwrap.dedent(
        """
        import sys
        from pullqueue.adapters.memory import MemoryBackend
        from pullqueue.compat import taskqueue as tq
        queue = tq.Queue("q", backend=MemoryBackend())
        rpc = queue.add_async(tq.Task(payload=b"a", method="PULL"))
        assert type(rpc) is tq.RPC, type(rpc).__mro__
        assert rpc.get_result().was_enqueued
        assert [t.payload for t in queue.lease_tasks_async(60, 10).get_result()] == [b"a"]
        assert not any(name.startswith("google.appengine") for name in sys.modules)
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.stdout.strip() == "ok", done.stderr


def test_a_transactional_add_outside_ndb_leaves_ndb_untouched() -> None:
    """Looking for a transaction must not make an ndb context: one made outside a request leaves
    work on ndb's event loop that hangs the next tasklet of the thread."""
    from google.appengine.ext.ndb import tasklets

    seen: list[Any] = []

    def outside_any_request() -> None:
        queue = compat.Queue(QUEUE, backend=MemoryBackend())
        try:
            queue.add(compat.Task(payload=b"a", method="PULL"), transactional=True)
        except compat.BadTransactionStateError as exc:
            seen.append(type(exc).__name__)
        seen.append(tasklets._state.current_context)

    worker = threading.Thread(target=outside_any_request)
    worker.start()
    worker.join(30)
    assert seen == ["BadTransactionStateError", None]


def test_a_transactional_add_in_a_db_transaction_happens_at_commit_and_not_on_rollback(
    side: Side,
) -> None:
    """The older db API's transactions are joined as the SDK joins them: staged in the
    transaction, published after its commit, nothing left by a rollback."""
    from google.appengine.ext import db

    def place_order(payload: bytes, fail: bool) -> None:
        Order(number=1).put()
        side.queue.add(side.tq.Task(payload=payload, method="PULL"), transactional=True)
        if fail:
            raise db.Rollback()

    db.run_in_transaction(place_order, b"kept", False)
    db.run_in_transaction(place_order, b"rolled back", True)
    assert side.tasks() == [b"kept"]
