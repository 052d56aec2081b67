"""The appengine:// adapter maps pullqueue onto the bundled taskqueue API one to one.

Tests run against the testbed's taskqueue stub (Google's legacy implementation) and check what the
stub holds afterwards, so a task lost or leased twice would show.
"""

from __future__ import annotations

import pytest
from google.appengine.api import apiproxy_stub_map
from google.appengine.api.taskqueue import taskqueue_service_bytes_pb2 as tq
from google.appengine.runtime import apiproxy_errors

from pullqueue import (
    ConfigurationError,
    InvalidQueueModeError,
    Queue,
    Task,
    TaskAlreadyExistsError,
    TaskLeaseExpiredError,
    TaskTooLargeError,
    TombstonedTaskError,
    TransientError,
    UnknownQueueError,
    connect,
)
from pullqueue.adapters.appengine import AppEngineBackend
from pullqueue.adapters.base import Backend, ListingBackend
from tests.support.appengine_testbed import AppEngineTestbed


def test_added_tasks_are_leased_with_payload_tag_and_retry_count(
    queue: Queue, bed: AppEngineTestbed
) -> None:
    queue.add([Task(b"first", name="a", tag="red"), Task("second")])
    bed.clock.advance(1)

    leased = queue.lease(60, 10)

    assert [(t.name, t.payload, t.tag, t.retry_count) for t in leased] == [
        ("a", b"first", "red", 1),
        (leased[1].name, b"second", None, 1),
    ]
    assert all(t.lease_expires == bed.clock.now + 60 for t in leased)
    assert [t.eta for t in bed.tasks("pulls")] == [bed.clock.now + 60] * 2


def test_delete_removes_leased_and_unleased_tasks(queue: Queue, bed: AppEngineTestbed) -> None:
    queue.add([Task(b"1", name="one"), Task(b"2", name="two", countdown=3600)])
    bed.clock.advance(1)
    leased = queue.lease(60, 10)

    assert [t.was_deleted for t in queue.delete(leased)] == [True]
    assert [t.was_deleted for t in queue.delete_by_name(["two", "never"])] == [True, False]
    assert bed.tasks("pulls") == []


def test_future_tasks_wait_for_their_eta_and_show_in_stats(
    queue: Queue, bed: AppEngineTestbed
) -> None:
    bed.seed("pulls", b"later", name="later", countdown=3600)
    queue.add(Task(b"soon", name="soon", countdown=5))
    bed.clock.advance(1)

    assert queue.lease(60, 10) == []
    stats = queue.stats()
    assert (stats.tasks, stats.oldest_eta) == (2, bed.clock.now + 4)
    bed.clock.advance(5)
    assert [t.name for t in queue.lease(60, 10)] == ["soon"]


def test_the_bundled_api_cannot_list_tasks(bed: AppEngineTestbed) -> None:
    backend = bed.backend()

    assert isinstance(backend, Backend)
    assert not isinstance(backend, ListingBackend)


def test_lease_by_tag_and_by_the_oldest_tasks_tag(queue: Queue, bed: AppEngineTestbed) -> None:
    queue.add(Task(b"u", name="untagged-old"))
    bed.clock.advance(1)
    queue.add([Task(b"b1", name="blue-1", tag="blue"), Task(b"r1", name="red-1", tag="red")])
    bed.clock.advance(1)
    queue.add([Task(b"b2", name="blue-2", tag="blue"), Task(b"u2", name="untagged-new")])
    bed.clock.advance(1)

    assert [t.name for t in queue.lease(60, 10, tag="blue")] == ["blue-1", "blue-2"]
    assert [t.name for t in queue.lease(60, 10, group_by_tag=True)] == [
        "untagged-old",
        "untagged-new",
    ]
    assert [t.name for t in queue.lease(60, 10, group_by_tag=True)] == ["red-1"]


def test_an_expired_lease_cannot_be_modified(queue: Queue, bed: AppEngineTestbed) -> None:
    queue.add(Task(b"work", name="job"))
    bed.clock.advance(1)
    first = queue.lease(10, 1)[0]
    bed.clock.advance(11)
    second = queue.lease(10, 1)[0]

    with pytest.raises(TaskLeaseExpiredError) as caught:
        queue.modify_lease(first, 30)

    assert (caught.value.queue, caught.value.task) == ("pulls", "job")
    assert second.retry_count == 2
    assert [(t.name, t.retry_count) for t in bed.tasks("pulls")] == [("job", 2)]


def test_modify_lease_extends_and_zero_releases(queue: Queue, bed: AppEngineTestbed) -> None:
    queue.add(Task(b"work", name="job"))
    bed.clock.advance(1)
    held = queue.lease(10, 1)[0]

    queue.modify_lease(held, 300)
    bed.clock.advance(60)
    assert queue.lease(10, 1) == []
    assert held.lease_expires == bed.clock.now - 60 + 300

    queue.modify_lease(held, 0)
    bed.clock.advance(0.001)
    assert [(t.name, t.retry_count) for t in queue.lease(10, 1)] == [("job", 2)]


def test_modifying_a_deleted_or_unknown_task(queue: Queue, bed: AppEngineTestbed) -> None:
    queue.add(Task(b"work", name="job"))
    bed.clock.advance(1)
    held = queue.lease(10, 1)[0]
    queue.delete_by_name("job")
    stranger = Task.restore(payload=b"", name="nobody", tag=None, eta_posix=bed.clock.now + 5)

    with pytest.raises(TombstonedTaskError):
        queue.modify_lease(held, 30)
    with pytest.raises(TaskLeaseExpiredError, match="no such task"):
        queue.modify_lease(stranger, 30)


def test_names_are_unique_and_a_batch_adds_all_it_can(queue: Queue, bed: AppEngineTestbed) -> None:
    queue.add([Task(b"1", name="kept"), Task(b"2", name="dropped")])
    queue.delete_by_name("dropped")
    batch = [Task(b"a", name="kept"), Task(b"b", name="fresh"), Task(b"c", name="dropped")]

    with pytest.raises((TaskAlreadyExistsError, TombstonedTaskError)):
        queue.add(batch)

    assert [t.was_added for t in batch] == [False, True, False]
    assert sorted(t.name for t in bed.tasks("pulls")) == ["fresh", "kept"]
    with pytest.raises(TombstonedTaskError, match="choose another name"):
        queue.add(Task(b"again", name="dropped"))
    with pytest.raises(TaskAlreadyExistsError):
        queue.add(Task(b"again", name="kept"))


def test_chosen_names_and_etas_are_reported_back(queue: Queue, bed: AppEngineTestbed) -> None:
    task = queue.add(Task(b"anonymous", countdown=30))

    assert task.name is not None
    assert task.eta_posix == bed.clock.now + 30
    assert [(t.name, t.eta) for t in bed.tasks("pulls")] == [(task.name, bed.clock.now + 30)]


def test_a_full_mib_payload_is_too_large_for_the_legacy_service(
    queue: Queue, bed: AppEngineTestbed
) -> None:
    limit = 1024 * 1024
    with pytest.raises(TaskTooLargeError):
        queue.add(Task(b"x" * limit, name="full"))

    queue.add(Task(b"x" * (limit - 1024), name="under"))
    assert [t.name for t in bed.tasks("pulls")] == ["under"]


def test_purge_empties_the_queue(queue: Queue, bed: AppEngineTestbed) -> None:
    queue.add([Task(b"a"), Task(b"b", countdown=600)])

    queue.purge()

    assert bed.tasks("pulls") == []
    assert queue.stats().tasks == 0


def test_the_queue_retry_limit_from_queue_yaml_applies(bed: AppEngineTestbed) -> None:
    bed.declare_queue("limited", retry_limit=2)
    queue = Queue("limited", bed.backend())
    queue.add(Task(b"flaky", name="flaky"))

    counts = []
    for _ in range(3):
        bed.clock.advance(11)
        counts.append([t.retry_count for t in queue.lease(10, 1)])

    assert counts == [[1], [2], []]
    assert bed.tasks("limited") == []


def test_unknown_and_push_queues(bed: AppEngineTestbed) -> None:
    backend = bed.backend()
    bed.declare_queue("pushes", mode="push")

    with pytest.raises(UnknownQueueError) as caught:
        Queue("undeclared", backend).lease(10, 1)
    assert "mode: pull" in str(caught.value)
    with pytest.raises(UnknownQueueError):
        Queue("undeclared", backend).add(Task(b"x"))
    with pytest.raises(InvalidQueueModeError):
        Queue("pushes", backend).lease(10, 1)


def test_service_deadline_is_transient_and_leases_nothing(
    queue: Queue, bed: AppEngineTestbed
) -> None:
    queue.add(Task(b"work", name="job"))
    bed.clock.advance(1)
    stub = bed.testbed.get_stub("taskqueue")
    stub.SetError(apiproxy_errors.DeadlineExceededError("too slow"), "QueryAndOwnTasks")

    with pytest.raises(TransientError, match="back off"):
        queue.lease(10, 1)

    assert [(t.name, t.retry_count) for t in bed.tasks("pulls")] == [("job", 0)]


def test_a_transient_service_error_is_transient(queue: Queue, bed: AppEngineTestbed) -> None:
    stub = bed.testbed.get_stub("taskqueue")
    error = apiproxy_errors.ApplicationError(tq.TaskQueueServiceError.TRANSIENT_ERROR)
    stub.SetError(error, "BulkAdd")
    task = Task(b"work", name="job")

    with pytest.raises(TransientError):
        queue.add(task)

    assert task.was_added is False
    assert bed.tasks("pulls") == []


def test_connect_builds_the_backend_on_the_testbed(bed: AppEngineTestbed) -> None:
    backend = connect("appengine://", clock=bed.clock)

    assert isinstance(backend, AppEngineBackend)
    assert backend.now() == bed.clock.now


def test_outside_app_engine_connect_says_what_is_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(apiproxy_stub_map, "apiproxy", apiproxy_stub_map.APIProxyStubMap())

    with pytest.raises(ConfigurationError) as caught:
        connect("appengine://")

    assert "app_engine_apis: true" in str(caught.value)
    assert "cloudtasks://" in str(caught.value)


@pytest.mark.parametrize("url", ["appengine://my-app", "appengine:///queues"])
def test_an_appengine_url_takes_no_host_or_path(url: str, bed: AppEngineTestbed) -> None:
    with pytest.raises(ConfigurationError, match="no host or path"):
        connect(url)
