"""When Cloud Tasks fails, the adapter raises the legacy error a worker expects and loses nothing.

Each failure is injected into the fake service (quota, 5xx, unreadable replies, denied access,
dropped connections) and the test checks both the error and that the service still holds every
task, leasable again once any lease taken by a lost reply has ended.
"""

from __future__ import annotations

from collections.abc import Iterator

import google.auth.credentials
import pytest

from pullqueue import (
    InternalError,
    PermissionDeniedError,
    Queue,
    Task,
    TaskAlreadyExistsError,
    TaskLeaseExpiredError,
    TransientError,
    UnknownQueueError,
)
from tests.support.cloudtasks_fake import CloudTasksModel, ManualClock, cloudtasks_service


class Sleeps:
    """Records backoff sleeps instead of sleeping."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def seeded(service: CloudTasksModel, clock: ManualClock) -> list[str]:
    names = [service.seed("pulls", f"payload-{i}".encode(), name=f"task-{i}") for i in range(3)]
    clock.advance(1)
    return names


@pytest.fixture
def worker(service: CloudTasksModel, sleeps: Sleeps) -> Iterator[Queue]:
    backend = service.backend(sleep=sleeps, backoff_initial=0.01)
    yield Queue("pulls", backend)
    backend.close()


def held(service: CloudTasksModel) -> list[tuple[str, bytes]]:
    return [(t.name, t.payload) for t in service.tasks("pulls")]


EVERY_TASK = [(f"task-{i}", f"payload-{i}".encode()) for i in range(3)]


def test_quota_refusal_backs_off_then_leases(
    worker: Queue, service: CloudTasksModel, sleeps: Sleeps, seeded: list[str]
) -> None:
    service.fail("LeaseTasks", 429, times=2)

    leased = worker.lease(30, 10)

    assert sorted(t.name for t in leased) == seeded
    assert len(sleeps.delays) == 2
    assert sleeps.delays[1] > sleeps.delays[0] / 2


def test_lasting_quota_refusal_surfaces_as_transient_and_leases_nothing(
    worker: Queue, service: CloudTasksModel, sleeps: Sleeps, seeded: list[str]
) -> None:
    service.fail("LeaseTasks", 429, times=100)

    with pytest.raises(TransientError) as caught:
        worker.lease(30, 10)

    assert "back off" in str(caught.value)
    assert service.rpc_count("LeaseTasks") == 5
    assert held(service) == EVERY_TASK
    assert all(t.retry_count == 0 for t in service.tasks("pulls"))


def test_unavailable_lease_is_retried(
    worker: Queue, service: CloudTasksModel, seeded: list[str]
) -> None:
    service.fail("LeaseTasks", 503)

    assert len(worker.lease(30, 10)) == 3


def test_unavailable_add_is_not_replayed_and_reports_what_was_not_added(
    worker: Queue, service: CloudTasksModel
) -> None:
    service.seed("pulls", b"before", name="before")
    batch = [Task(b"x", name="x"), Task(b"y", name="y")]
    service.fail("CreateTask", 503)

    with pytest.raises(TransientError):
        worker.add(batch)

    assert [t.was_added for t in batch] == [False, False]
    assert service.rpc_count("CreateTask") == 1
    assert [t.name for t in service.tasks("pulls")] == ["before"]


def test_internal_error_is_an_internal_error_and_leases_nothing(
    worker: Queue, service: CloudTasksModel, seeded: list[str]
) -> None:
    service.fail("LeaseTasks", 500)

    with pytest.raises(InternalError):
        worker.lease(30, 10)

    assert all(t.retry_count == 0 for t in service.tasks("pulls"))
    assert len(worker.lease(30, 10)) == 3


def test_unreadable_lease_reply_is_transient_and_the_tasks_come_back(
    worker: Queue, service: CloudTasksModel, clock: ManualClock, seeded: list[str]
) -> None:
    service.fail("LeaseTasks", 200, after=True, body="<html>502 Bad Gateway</html>")

    with pytest.raises(TransientError) as caught:
        worker.lease(30, 10)

    assert "could not be read" in str(caught.value)
    assert held(service) == EVERY_TASK
    assert worker.lease(30, 10) == []
    clock.advance(31)
    assert sorted(t.name for t in worker.lease(30, 10)) == seeded


def test_dropped_connection_is_transient_and_loses_nothing(
    worker: Queue, service: CloudTasksModel, seeded: list[str]
) -> None:
    service.fail("AcknowledgeTask", 0)
    leased = worker.lease(30, 10)

    with pytest.raises(TransientError):
        worker.delete(leased)

    assert held(service) == EVERY_TASK


def test_permission_denied_names_the_role_to_grant(
    worker: Queue, service: CloudTasksModel, seeded: list[str]
) -> None:
    service.fail("LeaseTasks", 403)

    with pytest.raises(PermissionDeniedError) as caught:
        worker.lease(30, 10)

    assert caught.value.queue == "pulls"
    assert "roles/cloudtasks.taskRunner" in str(caught.value)
    assert held(service) == EVERY_TASK


def test_purge_denied_names_the_queue_admin_role(worker: Queue, service: CloudTasksModel) -> None:
    service.seed("pulls", b"keep", name="keep")
    service.fail("PurgeQueue", 403)

    with pytest.raises(PermissionDeniedError, match=r"roles/cloudtasks\.queueAdmin"):
        worker.purge()

    assert [t.name for t in service.tasks("pulls")] == ["keep"]


def test_rejected_credentials_say_how_to_renew_them(
    worker: Queue, service: CloudTasksModel, seeded: list[str]
) -> None:
    service.fail("GetQueue", 401)

    with pytest.raises(PermissionDeniedError, match="application-default login"):
        worker.stats()


def test_a_missing_queue_is_reported_even_without_the_legacy_code(
    clock: ManualClock, sleeps: Sleeps
) -> None:
    with cloudtasks_service(clock=clock, legacy_codes=False) as service:
        backend = service.backend(sleep=sleeps)
        stray = Task.restore(payload=b"", name="t", tag=None, eta_posix=clock.now + 5)

        with pytest.raises(UnknownQueueError):
            Queue("missing", backend).modify_lease(stray, 10)
        with pytest.raises(UnknownQueueError):
            Queue("missing", backend).delete_by_name("t")


def test_expired_token_without_the_legacy_code_is_lease_expired(
    clock: ManualClock, sleeps: Sleeps
) -> None:
    with cloudtasks_service(clock=clock, queues=["pulls"], legacy_codes=False) as service:
        queue = Queue("pulls", service.backend(sleep=sleeps))
        service.seed("pulls", b"work", name="job")
        clock.advance(1)
        first = queue.lease(10, 1)[0]
        clock.advance(11)
        queue.lease(10, 1)

        with pytest.raises(TaskLeaseExpiredError):
            queue.modify_lease(first, 30)
        assert [t.name for t in service.tasks("pulls")] == ["job"]


def test_a_token_from_another_backend_is_not_a_lease_here(
    worker: Queue, service: CloudTasksModel, seeded: list[str]
) -> None:
    foreign = Task.restore(
        payload=b"", name="task-0", tag=None, eta_posix=0.0, lease_token="1795303623000000"
    )

    with pytest.raises(TaskLeaseExpiredError, match="lease it here first"):
        worker.modify_lease(foreign, 30)
    assert held(service) == EVERY_TASK


def test_unavailable_delete_is_replayed(
    worker: Queue, service: CloudTasksModel, seeded: list[str]
) -> None:
    service.fail("DeleteTask", 503)

    assert worker.delete_by_name("task-1")[0].was_deleted is True
    assert [t.name for t in service.tasks("pulls")] == ["task-0", "task-2"]


class RenewingCredentials(google.auth.credentials.Credentials):
    """Credentials whose refresh succeeds, so a 401 reaches the client as UNAUTHENTICATED."""

    def refresh(self, request: object) -> None:
        self.token = "renewed"


def test_credentials_rejected_after_renewal_say_how_to_replace_them(
    service: CloudTasksModel, sleeps: Sleeps
) -> None:
    queue = Queue("pulls", service.backend(credentials=RenewingCredentials(), sleep=sleeps))
    service.fail("GetQueue", 401, times=5)

    with pytest.raises(PermissionDeniedError, match="rejected the credentials"):
        queue.stats()


def test_a_lost_add_reply_is_transient_and_a_named_retry_finds_the_task(
    worker: Queue, service: CloudTasksModel
) -> None:
    service.fail("CreateTask", 503, after=True)

    with pytest.raises(TransientError):
        worker.add(Task(b"once", name="only-once"))
    with pytest.raises(TaskAlreadyExistsError):
        worker.add(Task(b"once", name="only-once"))

    assert held(service) == [("only-once", b"once")]


def test_a_gateway_timeout_on_stats_is_replayed(
    worker: Queue, service: CloudTasksModel, sleeps: Sleeps, seeded: list[str]
) -> None:
    service.fail("GetQueue", 504, times=2)

    assert worker.stats().tasks == 3
    assert len(sleeps.delays) == 2
