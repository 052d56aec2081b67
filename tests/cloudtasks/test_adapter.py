"""The cloudtasks:// adapter keeps the legacy pull-queue semantics over the Cloud Tasks v2beta2 API.

Every test drives the real google-cloud-tasks client over REST against the fake service, whose
queues are the App Engine SDK's taskqueue stub, and checks what the service then holds.
"""

from __future__ import annotations

import datetime as dt

import pytest

from pullqueue import (
    InvalidQueueModeError,
    Queue,
    Task,
    TaskAlreadyExistsError,
    TaskLeaseExpiredError,
    TaskTooLargeError,
    TombstonedTaskError,
    UnknownQueueError,
)
from pullqueue.adapters.base import ListingBackend
from pullqueue.adapters.cloudtasks import CloudTasksBackend
from tests.support.cloudtasks_fake import CloudTasksModel, ManualClock, cloudtasks_service


def test_added_tasks_are_leased_with_payload_tag_and_retry_count(
    queue: Queue, service: CloudTasksModel, clock: ManualClock
) -> None:
    queue.add([Task(b"first", name="a", tag="red"), Task("second")])
    clock.advance(1)

    leased = queue.lease(60, 10)

    assert [(t.name, t.payload, t.tag, t.retry_count) for t in leased] == [
        ("a", b"first", "red", 1),
        (leased[1].name, b"second", None, 1),
    ]
    assert all(t.lease_expires == pytest.approx(clock.now + 60) for t in leased)
    assert [t.eta for t in service.tasks("pulls")] == [clock.now + 60] * 2


def test_delete_acknowledges_leased_tasks_and_empties_the_queue(
    queue: Queue, service: CloudTasksModel, clock: ManualClock
) -> None:
    queue.add([Task(b"1", name="one"), Task(b"2", name="two")])
    clock.advance(1)
    leased = queue.lease(60, 10)

    deleted = queue.delete(leased)

    assert [t.was_deleted for t in deleted] == [True, True]
    assert service.tasks("pulls") == []
    assert service.rpc_count("AcknowledgeTask") == 2
    assert service.rpc_count("DeleteTask") == 0
    assert queue.stats().executed_last_minute == 2


def test_delete_by_name_of_an_unleased_task_and_of_an_unknown_one(
    queue: Queue, service: CloudTasksModel
) -> None:
    service.seed("pulls", b"x", name="waiting", countdown=3600)

    deleted = queue.delete_by_name(["waiting", "never-added"])

    assert [t.was_deleted for t in deleted] == [True, False]
    assert service.tasks("pulls") == []


def test_future_tasks_wait_for_their_eta_but_are_listed_and_counted(
    queue: Queue, backend: CloudTasksBackend, service: CloudTasksModel, clock: ManualClock
) -> None:
    eta = dt.datetime.fromtimestamp(clock.now + 3600, tz=dt.timezone.utc)
    queue.add([Task(b"later", name="later", eta=eta), Task(b"soon", name="soon", countdown=5)])
    clock.advance(1)

    assert queue.lease(60, 10) == []
    assert isinstance(backend, ListingBackend)
    listed = {t.name: t.eta_posix for t in backend.list_tasks("pulls")}
    assert listed == {"later": clock.now + 3599, "soon": clock.now + 4}
    stats = queue.stats()
    assert (stats.tasks, stats.oldest_eta, stats.approximate) == (2, clock.now + 4, True)

    clock.advance(5)
    assert [t.name for t in queue.lease(60, 10)] == ["soon"]


def test_listing_pages_through_more_than_one_page(
    backend: CloudTasksBackend, service: CloudTasksModel
) -> None:
    names = {service.seed("pulls", b"p", name=f"t{i:04d}", countdown=i) for i in range(1203)}

    listed = list(backend.list_tasks("pulls"))

    assert {t.name for t in listed} == names
    assert all(t.lease_token is None for t in listed)
    assert service.rpc_count("ListTasks") == 2


def test_lease_by_tag_and_by_the_oldest_tasks_tag(queue: Queue, clock: ManualClock) -> None:
    queue.add(Task(b"u", name="untagged-old"))
    clock.advance(1)
    queue.add([Task(b"b1", name="blue-1", tag="blue"), Task(b"r1", name="red-1", tag="red")])
    clock.advance(1)
    queue.add([Task(b"b2", name="blue-2", tag="blue"), Task(b"u2", name="untagged-new")])
    clock.advance(1)

    assert [t.name for t in queue.lease(60, 10, tag="blue")] == ["blue-1", "blue-2"]
    assert [t.name for t in queue.lease(60, 10, group_by_tag=True)] == [
        "untagged-old",
        "untagged-new",
    ]
    assert [t.name for t in queue.lease(60, 10, group_by_tag=True)] == ["red-1"]


def test_tags_with_quotes_and_backslashes_survive_the_filter(
    queue: Queue, clock: ManualClock
) -> None:
    tag = 'say "hi" \\ bye'
    queue.add([Task(b"q", name="quoted", tag=tag), Task(b"o", name="other", tag="say")])
    clock.advance(1)

    leased = queue.lease(60, 10, tag=tag)

    assert [(t.name, t.tag) for t in leased] == [("quoted", tag)]


def test_an_expired_lease_returns_the_task_and_the_old_holder_loses_it(
    queue: Queue, clock: ManualClock, service: CloudTasksModel
) -> None:
    queue.add(Task(b"work", name="job"))
    clock.advance(1)
    first = queue.lease(10, 1)[0]
    clock.advance(11)

    second = queue.lease(10, 1)[0]

    assert (second.name, second.retry_count) == ("job", 2)
    with pytest.raises(TaskLeaseExpiredError) as caught:
        queue.modify_lease(first, 30)
    assert (caught.value.queue, caught.value.task) == ("pulls", "job")
    assert [t.name for t in service.tasks("pulls")] == ["job"]


def test_deleting_with_an_expired_lease_still_deletes_as_the_legacy_api_did(
    queue: Queue, clock: ManualClock, service: CloudTasksModel
) -> None:
    queue.add(Task(b"work", name="job"))
    clock.advance(1)
    held = queue.lease(10, 1)[0]
    clock.advance(11)

    assert queue.delete(held)[0].was_deleted is True
    assert service.tasks("pulls") == []
    assert service.rpc_count("DeleteTask") == 1


def test_modify_lease_extends_and_zero_releases_at_once(
    queue: Queue, clock: ManualClock, service: CloudTasksModel
) -> None:
    queue.add(Task(b"work", name="job"))
    clock.advance(1)
    held = queue.lease(10, 1)[0]

    queue.modify_lease(held, 300)
    clock.advance(60)
    assert queue.lease(10, 1) == []
    assert held.lease_expires == pytest.approx(clock.now - 60 + 300)

    queue.modify_lease(held, 0)
    clock.advance(0.001)
    again = queue.lease(10, 1)
    assert [(t.name, t.retry_count) for t in again] == [("job", 2)]
    assert service.rpc_count("RenewLease") == 1
    assert service.rpc_count("CancelLease") == 1


def test_fractional_lease_seconds_round_up_never_down(queue: Queue, clock: ManualClock) -> None:
    queue.add(Task(b"work", name="job"))
    clock.advance(1)

    held = queue.lease(1.2, 1)[0]

    assert held.lease_expires == clock.now + 2
    clock.advance(1.5)
    assert queue.lease(10, 1) == []


def test_names_are_unique_and_deleted_names_stay_tombstoned(
    queue: Queue, clock: ManualClock
) -> None:
    queue.add(Task(b"1", name="unique"))
    with pytest.raises(TaskAlreadyExistsError):
        queue.add(Task(b"2", name="unique"))

    queue.delete_by_name("unique")
    with pytest.raises(TombstonedTaskError) as caught:
        queue.add(Task(b"3", name="unique"))
    assert "choose another name" in str(caught.value)


def test_tombstones_are_told_apart_without_the_legacy_error_code(clock: ManualClock) -> None:
    with cloudtasks_service(clock=clock, queues=["pulls"], legacy_codes=False) as service:
        queue = Queue("pulls", service.backend())
        queue.add(Task(b"1", name="gone"))
        queue.delete_by_name("gone")
        queue.add(Task(b"1", name="here"))

        with pytest.raises(TombstonedTaskError):
            queue.add(Task(b"2", name="gone"))
        with pytest.raises(TaskAlreadyExistsError):
            queue.add(Task(b"2", name="here"))
        assert [t.payload for t in service.tasks("pulls")] == [b"1"]


def test_a_failed_task_in_a_batch_does_not_stop_the_others(
    queue: Queue, service: CloudTasksModel
) -> None:
    service.seed("pulls", b"old", name="taken")
    batch = [Task(b"a", name="fresh-1"), Task(b"b", name="taken"), Task(b"c", name="fresh-2")]

    with pytest.raises(TaskAlreadyExistsError):
        queue.add(batch)

    assert [t.was_added for t in batch] == [True, False, True]
    assert sorted(t.name for t in service.tasks("pulls")) == ["fresh-1", "fresh-2", "taken"]


def test_a_full_mib_payload_is_too_large_for_the_service(
    queue: Queue, service: CloudTasksModel
) -> None:
    limit = 1024 * 1024
    with pytest.raises(TaskTooLargeError):
        queue.add(Task(b"x" * limit, name="full"))

    queue.add(Task(b"x" * (limit - 1024), name="under"))
    assert [t.name for t in service.tasks("pulls")] == ["under"]


def test_purge_empties_the_queue(queue: Queue, service: CloudTasksModel) -> None:
    queue.add([Task(b"a"), Task(b"b", countdown=600)])

    queue.purge()

    assert service.tasks("pulls") == []
    assert queue.stats().tasks == 0


def test_unknown_queues_raise_unknown_queue_error(backend: CloudTasksBackend) -> None:
    missing = Queue("not-declared", backend)
    for call in (
        lambda: missing.lease(10, 1),
        lambda: missing.add(Task(b"x")),
        lambda: missing.stats(),
        lambda: missing.purge(),
        lambda: missing.delete_by_name("x"),
    ):
        with pytest.raises(UnknownQueueError) as caught:
            call()
        assert caught.value.queue == "not-declared"


def test_a_push_queue_refuses_leases(backend: CloudTasksBackend, service: CloudTasksModel) -> None:
    service.create_queue("pushes", mode="push")

    with pytest.raises(InvalidQueueModeError) as caught:
        Queue("pushes", backend).lease(10, 1)
    assert "mode: pull" in str(caught.value)


def test_lease_asks_for_payloads_and_tasks_carry_their_queue(
    queue: Queue, clock: ManualClock
) -> None:
    queue.add(Task(b"\x00\xffbinary", name="bin"))
    clock.advance(1)

    leased = queue.lease(30, 5)

    assert leased[0].payload == b"\x00\xffbinary"
    assert leased[0].queue_name == "pulls"
