"""The errors a worker catches are the same over gRPC (the default transport) as over REST.

The gRPC transport raises google-api-core exceptions built from gRPC status codes, with no HTTP
body to read; these are the exceptions it raises, translated as the adapter translates them.
"""

from __future__ import annotations

import pytest
from google.api_core import exceptions as api_exceptions

from pullqueue import (
    DeadlineExceededError,
    Error,
    InternalError,
    InvalidTaskError,
    PermissionDeniedError,
    TaskAlreadyExistsError,
    TaskLeaseExpiredError,
    TombstonedTaskError,
    TransientError,
    UnknownQueueError,
)
from pullqueue.adapters.cloudtasks_errors import status_of, translate


def _translate(exc: BaseException, *, on_lease: bool = False) -> Error:
    return translate(
        exc, queue="pulls", task="t1", action="lease tasks", role="roles/x", on_lease=on_lease
    )


@pytest.mark.parametrize(
    ("raised", "status", "expected"),
    [
        (api_exceptions.ResourceExhausted("quota"), "RESOURCE_EXHAUSTED", TransientError),
        (api_exceptions.ServiceUnavailable("down"), "UNAVAILABLE", TransientError),
        (api_exceptions.DeadlineExceeded("slow"), "DEADLINE_EXCEEDED", DeadlineExceededError),
        (api_exceptions.Aborted("contention"), "ABORTED", TransientError),
        (api_exceptions.InternalServerError("oops"), "INTERNAL", InternalError),
        (api_exceptions.PermissionDenied("no"), "PERMISSION_DENIED", PermissionDeniedError),
        (api_exceptions.Unauthenticated("who"), "UNAUTHENTICATED", PermissionDeniedError),
        (api_exceptions.NotFound("queue"), "NOT_FOUND", UnknownQueueError),
        (api_exceptions.AlreadyExists("name"), "ALREADY_EXISTS", TaskAlreadyExistsError),
        (api_exceptions.InvalidArgument("bad"), "INVALID_ARGUMENT", InvalidTaskError),
    ],
)
def test_grpc_statuses_become_legacy_errors(
    raised: BaseException, status: str, expected: type[Error]
) -> None:
    assert status_of(raised) == status
    error = _translate(raised)
    assert type(error) is expected
    assert (error.queue, error.task) == ("pulls", "t1")


def test_on_a_lease_call_a_missing_task_or_stale_token_is_an_expired_lease() -> None:
    assert type(_translate(api_exceptions.NotFound("t"), on_lease=True)) is TaskLeaseExpiredError
    stale = api_exceptions.FailedPrecondition("schedule time mismatch")
    assert type(_translate(stale, on_lease=True)) is TaskLeaseExpiredError


def test_the_legacy_code_in_the_message_wins_over_the_status() -> None:
    raised = api_exceptions.NotFound("gone. apphosting::ExecutorServiceError::TOMBSTONED_TASK")

    assert type(_translate(raised, on_lease=True)) is TombstonedTaskError


def test_errors_say_what_to_do_next() -> None:
    assert "back off and retry" in str(_translate(api_exceptions.ResourceExhausted("quota")))
    assert "grant roles/x" in str(_translate(api_exceptions.PermissionDenied("no")))
    assert "mode: pull" in str(_translate(api_exceptions.NotFound("queue")))
