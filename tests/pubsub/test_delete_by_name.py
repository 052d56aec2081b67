"""Deleting a task by name on Pub/Sub, by a process that holds no lease on it.

Only a lease's holder can acknowledge a message, so a delete by name tombstones the name: in the
name registry when one is configured (every process then drops the task when it is delivered),
else in this process (which drops it, and knows only the names it published or was delivered).
Backends sharing one MemoryNameRegistry stand for processes sharing a Firestore registry.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from pullqueue import Queue, Task, TombstonedTaskError
from pullqueue.compat import taskqueue
from pullqueue.dedupe.memory import MemoryNameRegistry
from tests.pubsub.conftest import MakeBackend


def _names(tasks: list[Task]) -> list[str | None]:
    return sorted(t.name for t in tasks)


def test_with_a_registry_any_process_deletes_by_name_and_nobody_gets_the_task(
    make_backend: MakeBackend,
) -> None:
    registry = MemoryNameRegistry()
    producer = taskqueue.Queue("byname", backend=make_backend(names=registry))
    producer.add(
        [
            taskqueue.Task(payload="a", method="PULL", name="job-41"),
            taskqueue.Task(payload="b", method="PULL", name="job-42"),
        ]
    )
    canceller = taskqueue.Queue("byname", backend=make_backend(names=registry))
    deleted = canceller.delete_tasks(taskqueue.Task(name="job-42"))
    assert deleted.was_deleted is True
    assert canceller.delete_tasks(taskqueue.Task(name="job-42")).was_deleted is False
    assert canceller.delete_tasks_by_name("never-added").was_deleted is False

    worker = taskqueue.Queue("byname", backend=make_backend(names=registry))
    assert [t.name for t in worker.lease_tasks(60, 10)] == ["job-41"]
    assert worker.lease_tasks(60, 10) == []
    with pytest.raises(taskqueue.TombstonedTaskError):
        producer.add(taskqueue.Task(payload="again", method="PULL", name="job-42"))


def test_with_a_registry_a_task_deleted_while_another_process_holds_it_never_comes_back(
    make_backend: MakeBackend,
) -> None:
    registry = MemoryNameRegistry()
    holder = Queue("held", make_backend(names=registry))
    holder.add([Task(b"x", name="job-42")])
    (task,) = holder.lease(60, 10)
    other = Queue("held", make_backend(names=registry))
    (deleted,) = other.delete_by_name("job-42")
    assert deleted.was_deleted is True
    # The holder keeps its lease (Pub/Sub cannot take it back) and gives the task back...
    holder.modify_lease(task, 0)
    # ...but whoever is delivered it next drops it.
    fresh = Queue("held", make_backend(names=registry))
    assert fresh.lease(60, 10) == []
    assert other.lease(60, 10) == []


@pytest.mark.unchecked_names
def test_without_a_registry_this_process_deletes_what_it_added(make_backend: MakeBackend) -> None:
    queue = Queue("local", make_backend())
    queue.add([Task(b"x", name="job-41"), Task(b"y", name="job-42")])
    (deleted, unknown) = queue.delete_by_name(["job-42", "never-added"])
    assert (deleted.was_deleted, unknown.was_deleted) == (True, False)
    assert _names(queue.lease(60, 10)) == ["job-41"]
    assert queue.lease(60, 10) == []


@pytest.mark.unchecked_names
def test_without_a_registry_this_process_drops_what_it_saw_before_the_delete(
    make_backend: MakeBackend,
) -> None:
    producer = Queue("seen", make_backend())
    producer.add([Task(b"x", name="job-42")])
    worker = Queue("seen", make_backend())
    (task,) = worker.lease(60, 10)
    worker.modify_lease(task, 0)  # seen, then given back: no lease held here now
    time.sleep(0.2)
    (deleted,) = worker.delete_by_name("job-42")
    assert deleted.was_deleted is True
    assert worker.lease(60, 10) == []


@pytest.mark.unchecked_names
def test_without_a_registry_a_name_only_another_process_knows_is_not_deleted(
    make_backend: MakeBackend,
) -> None:
    """The documented limit: without a registry a process cannot know a name it never saw, so
    it deletes nothing (was_deleted False) and the task stays for its worker."""
    Queue("other", make_backend()).add([Task(b"x", name="job-42")])
    stranger = Queue("other", make_backend())
    (result,) = stranger.delete_by_name("job-42")
    assert result.was_deleted is False
    worker = Queue("other", make_backend())
    assert _names(worker.lease(60, 10)) == ["job-42"]


def test_a_deleted_name_stays_tombstoned_for_re_adds_with_a_registry(
    make_backend: MakeBackend,
) -> None:
    registry = MemoryNameRegistry()
    queue = Queue("tomb", make_backend(names=registry))
    queue.add([Task(b"x", name="job-42")])
    queue.delete_by_name("job-42")
    with pytest.raises(TombstonedTaskError):
        queue.add(Task(b"again", name="job-42"))


def test_delete_by_name_handles_agree_with_the_sdk_stub(make_backend: MakeBackend) -> None:
    """The same calls on Google's SDK stub and on Pub/Sub with a registry, the delete made by a
    process that holds no lease (another backend): the same was_deleted, the same leases."""
    from google.appengine.api import taskqueue as sdk

    from tests.support.appengine_testbed import appengine_testbed

    def run(tq: Any, producer: Any, canceller: Any, worker: Any, wait: Any) -> Any:
        producer.add(
            [
                tq.Task(payload="a", method="PULL", name="job-41"),
                tq.Task(payload="b", method="PULL", name="job-42"),
            ]
        )
        wait()
        done = [
            canceller.delete_tasks(tq.Task(name=n)).was_deleted
            for n in ("job-42", "job-42", "never-added")
        ]
        wait()
        leased = sorted(t.name for t in worker.lease_tasks(60, 10))
        try:
            producer.add(tq.Task(payload="again", method="PULL", name="job-42"))
            readd = "added"
        except tq.TombstonedTaskError:
            readd = "TombstonedTaskError"
        return done, leased, readd

    with appengine_testbed(["byname"]) as bed:
        legacy_queue = sdk.Queue("byname")
        legacy = run(sdk, legacy_queue, legacy_queue, legacy_queue, lambda: bed.clock.advance(1))
    registry = MemoryNameRegistry()
    queues = [taskqueue.Queue("byname", backend=make_backend(names=registry)) for _ in range(3)]
    ours = run(taskqueue, *queues, lambda: time.sleep(0.05))
    assert ours == legacy == ([True, False, False], ["job-41"], "TombstonedTaskError")
