"""The legacy TaskQueueServiceError code of each pullqueue error, as the SDKs translate them back.

An SDK raises its own exception from the code alone (TaskAlreadyExistsError, ErrTaskAlreadyAdded,
TaskLeaseExpiredError, ...), so the code chosen here is what the application sees.
"""

from __future__ import annotations

from pullqueue import errors
from pullqueue.bridge.proto.taskqueue_service_pb2 import TaskQueueServiceError

Code = TaskQueueServiceError

OK = Code.OK
SKIPPED = Code.SKIPPED

# Most specific first: the first class an error is an instance of gives its code.
_CODES: tuple[tuple[type[errors.Error], int], ...] = (
    (errors.TaskAlreadyExistsError, Code.TASK_ALREADY_EXISTS),
    (errors.TombstonedTaskError, Code.TOMBSTONED_TASK),
    (errors.TaskTooLargeError, Code.TASK_TOO_LARGE),
    (errors.InvalidTaskNameError, Code.INVALID_TASK_NAME),
    (errors.InvalidEtaError, Code.INVALID_ETA),
    (errors.InvalidUrlError, Code.INVALID_URL),
    (errors.InvalidQueueNameError, Code.INVALID_QUEUE_NAME),
    (errors.UnknownQueueError, Code.UNKNOWN_QUEUE),
    (errors.TransientError, Code.TRANSIENT_ERROR),
    (errors.InternalError, Code.INTERNAL_ERROR),
    (errors.PermissionDeniedError, Code.PERMISSION_DENIED),
    (errors.DuplicateTaskNameError, Code.DUPLICATE_TASK_NAME),
    (errors.TooManyTasksError, Code.TOO_MANY_TASKS),
    (errors.InvalidTaskRetryOptionsError, Code.INVALID_RETRY_PARAMETERS),
    (errors.InvalidQueueModeError, Code.INVALID_QUEUE_MODE),
    (errors.TaskLeaseExpiredError, Code.TASK_LEASE_EXPIRED),
    (errors.QueuePausedError, Code.QUEUE_PAUSED),
    (errors.InvalidTagError, Code.INVALID_TAG),
    (errors.ConfigurationError, Code.INTERNAL_ERROR),
)


def code_of(exc: errors.Error) -> int:
    """The code an SDK turns back into the legacy exception of exc's kind.

    Argument errors the SDK would have caught itself (lease time, max_tasks, a task in a state
    that forbids the call) are INVALID_REQUEST, as the service answered them; a bare `Error`
    (the stub's answer for a task that does not exist) is UNKNOWN_TASK.
    """
    for kind, code in _CODES:
        if isinstance(exc, kind):
            return code
    if type(exc) is errors.Error:
        return int(Code.UNKNOWN_TASK)
    return int(Code.INVALID_REQUEST)
