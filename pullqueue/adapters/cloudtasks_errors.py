"""Turn Cloud Tasks API failures into pullqueue's typed errors, as the legacy taskqueue named them.

Both transports raise google-api-core exceptions (gRPC by status, REST by HTTP code with the status
in the JSON body); the service also names the legacy executor error in its message, which is read
first so a worker sees the same error class it saw from `google.appengine.api.taskqueue`.
"""

from __future__ import annotations

import re

from google.api_core import exceptions as api_exceptions
from google.auth import exceptions as auth_exceptions
from google.protobuf import json_format

from pullqueue.errors import (
    DeadlineExceededError,
    Error,
    InternalError,
    InvalidEtaError,
    InvalidQueueModeError,
    InvalidTagError,
    InvalidTaskError,
    InvalidTaskNameError,
    PermissionDeniedError,
    QueuePausedError,
    TaskAlreadyExistsError,
    TaskLeaseExpiredError,
    TaskTooLargeError,
    TombstonedTaskError,
    TransientError,
    UnknownQueueError,
)

_LEGACY_CODE = re.compile(r"ExecutorServiceError::([A-Z_]+)")
_REQUEST_LINE = re.compile(r"^[A-Z]+ https?://\S+: ")

_HTTP_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}

TRANSIENT_STATUSES = frozenset(
    {"RESOURCE_EXHAUSTED", "UNAVAILABLE", "DEADLINE_EXCEEDED", "ABORTED"}
)

_BY_LEGACY_CODE: dict[str, type[Error]] = {
    "UNKNOWN_QUEUE": UnknownQueueError,
    "TOMBSTONED_QUEUE": UnknownQueueError,
    "TRANSIENT_ERROR": TransientError,
    "INTERNAL_ERROR": InternalError,
    "TASK_TOO_LARGE": TaskTooLargeError,
    "INVALID_TASK_NAME": InvalidTaskNameError,
    "PERMISSION_DENIED": PermissionDeniedError,
    "TASK_ALREADY_EXISTS": TaskAlreadyExistsError,
    "TOMBSTONED_TASK": TombstonedTaskError,
    "INVALID_ETA": InvalidEtaError,
    "UNKNOWN_TASK": TaskLeaseExpiredError,
    "INVALID_QUEUE_MODE": InvalidQueueModeError,
    "TASK_LEASE_EXPIRED": TaskLeaseExpiredError,
    "QUEUE_PAUSED": QueuePausedError,
    "INVALID_TAG": InvalidTagError,
}

_ADVICE: dict[type[Error], str] = {
    UnknownQueueError: "declare it as a pull queue (queue.yaml `mode: pull`) or check the URL's "
    "project and location",
    TransientError: "back off and retry",
    DeadlineExceededError: "the call ran out of its deadline; back off and retry",
    InternalError: "retry later; if it persists, check the Cloud Tasks status page",
    TaskLeaseExpiredError: "the lease ended or another worker holds the task now; lease it again",
    TombstonedTaskError: "the name belonged to a deleted task; choose another name",
    TaskAlreadyExistsError: "a task with this name is in the queue; choose another name",
    InvalidQueueModeError: "the queue is a push queue; pull operations need `mode: pull`",
}


def status_of(exc: BaseException) -> str:
    """The canonical status name (e.g. FAILED_PRECONDITION) of an API failure, either transport."""
    if not isinstance(exc, api_exceptions.GoogleAPICallError):
        return "UNKNOWN"
    response = exc.response
    if response is not None and hasattr(response, "json"):
        try:
            body = response.json()
        except ValueError:
            body = None
        error = body.get("error") if isinstance(body, dict) else None
        status = error.get("status") if isinstance(error, dict) else None
        if isinstance(status, str) and status:
            return status
    if exc.grpc_status_code is not None:
        return str(exc.grpc_status_code.name)
    code = exc.code if isinstance(exc.code, int) else 0
    return _HTTP_STATUS.get(code, "UNKNOWN")


def legacy_code_of(exc: BaseException) -> str | None:
    """The legacy ExecutorServiceError code the service put in its message, if any."""
    match = _LEGACY_CODE.search(str(exc))
    return match.group(1) if match else None


def _message(exc: BaseException) -> str:
    """The service's own words: the JSON error message, else the text without the request line."""
    if isinstance(exc, api_exceptions.GoogleAPICallError):
        text = _REQUEST_LINE.sub("", str(exc.message or ""))
        return text or type(exc).__name__
    return str(exc) or type(exc).__name__


def translate(
    exc: BaseException,
    *,
    queue: str,
    task: str | None = None,
    action: str,
    role: str,
    on_lease: bool = False,
) -> Error:
    """The pullqueue error for a failed call; `action` and `role` explain permission failures.

    `on_lease` marks calls that present a lease (acknowledge, renew, cancel): there NOT_FOUND and
    FAILED_PRECONDITION mean the lease is gone (TaskLeaseExpiredError), as modify_task_lease said.
    """
    if isinstance(exc, json_format.ParseError):
        return TransientError(
            f"the reply to {action} could not be read ({exc}); tasks it leased become available "
            "again when their lease ends; back off and retry",
            queue=queue,
            task=task,
        )
    if isinstance(exc, auth_exceptions.TransportError | OSError):
        return TransientError(
            f"{action} could not reach the service ({exc}); back off and retry",
            queue=queue,
            task=task,
        )
    if isinstance(exc, auth_exceptions.GoogleAuthError):
        return PermissionDeniedError(
            f"credentials could not be used to {action} ({exc}); renew them with "
            "`gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS",
            queue=queue,
            task=task,
        )
    detail = _message(exc)
    if status_of(exc) == "UNAUTHENTICATED":
        return PermissionDeniedError(
            f"the service rejected the credentials used to {action} ({detail}); renew them with "
            "`gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS",
            queue=queue,
            task=task,
        )
    legacy = legacy_code_of(exc)
    cls = _BY_LEGACY_CODE.get(legacy) if legacy else None
    if cls is None:
        cls = _by_status(status_of(exc), on_lease)
    if cls is PermissionDeniedError:
        return PermissionDeniedError(
            f"the credentials may not {action} ({detail}); grant {role} on the queue or project",
            queue=queue,
            task=task,
        )
    advice = _ADVICE.get(cls)
    text = f"{action} failed: {detail}" + (f"; {advice}" if advice else "")
    return cls(text, queue=queue, task=task)


def _by_status(status: str, on_lease: bool) -> type[Error]:
    if status == "DEADLINE_EXCEEDED":
        return DeadlineExceededError
    if status in TRANSIENT_STATUSES:
        return TransientError
    if status in ("PERMISSION_DENIED", "UNAUTHENTICATED"):
        return PermissionDeniedError
    if status == "ALREADY_EXISTS":
        return TaskAlreadyExistsError
    if status == "NOT_FOUND":
        return TaskLeaseExpiredError if on_lease else UnknownQueueError
    if status == "FAILED_PRECONDITION" and on_lease:
        return TaskLeaseExpiredError
    if status == "INVALID_ARGUMENT":
        return InvalidTaskError
    if status in ("INTERNAL", "UNKNOWN", "DATA_LOSS"):
        return InternalError
    return Error
