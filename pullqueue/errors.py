"""Typed errors raised by every pullqueue backend, named and nested as the legacy taskqueue's.

A worker that catches `taskqueue.TransientError` or `taskqueue.TaskLeaseExpiredError` keeps
working unchanged; each error carries the queue and task it is about and says what to do next.
"""

from __future__ import annotations


class Error(Exception):
    """Base of every pullqueue error (legacy name: `taskqueue.Error`)."""

    def __init__(self, message: str = "", *, queue: str | None = None, task: str | None = None):
        self.queue = queue
        self.task = task
        where = []
        if queue is not None:
            where.append(f"queue {queue!r}")
        if task is not None:
            where.append(f"task {task!r}")
        text = f"{', '.join(where)}: {message}" if where and message else message
        super().__init__(text)
        self.message = message


PullQueueError = Error


class UnknownQueueError(Error):
    """The queue does not exist on the backend (or is not provisioned there)."""


class TransientError(Error):
    """A temporary failure: back off and retry (UNAVAILABLE, DEADLINE_EXCEEDED, quota)."""


class DeadlineExceededError(TransientError):
    """The call did not finish within its deadline (the service or the network was too slow).

    It is a TransientError, so pullqueue callers back off and retry as for any other; the
    legacy-shaped layer raises it as `apiproxy_errors.DeadlineExceededError`, where the App
    Engine API raised it.
    """


class InternalError(Error):
    """The backend failed in a way that is neither the caller's fault nor temporary."""


class InvalidTaskError(Error):
    """The task's arguments are invalid."""


class InvalidTaskNameError(InvalidTaskError):
    """The task name does not match `^[a-zA-Z0-9_-]{1,500}$`."""


class TaskTooLargeError(InvalidTaskError):
    """The task payload is larger than the pull-task limit (1 MiB)."""


class TaskAlreadyExistsError(InvalidTaskError):
    """A task with this name is already in the queue."""


class TombstonedTaskError(InvalidTaskError):
    """A task with this name was deleted and its name is still tombstoned."""


class InvalidUrlError(InvalidTaskError):
    """A URL is malformed (legacy push-task error, kept for name compatibility)."""


class InvalidEtaError(InvalidTaskError):
    """The ETA is invalid or too far in the future (more than 30 days)."""


class BadTaskStateError(Error):
    """The task is in a state that does not allow the operation (not added, already deleted)."""


class InvalidQueueError(Error):
    """The queue's arguments are invalid."""


class InvalidQueueNameError(InvalidQueueError):
    """The queue name does not match `^[a-zA-Z0-9-]{1,100}$`."""


class PermissionDeniedError(Error):
    """The credentials in use may not perform the operation on this resource."""


class DuplicateTaskNameError(Error):
    """The same task name appears more than once in one request."""


class TooManyTasksError(Error):
    """More than 100 tasks in one add call."""


class DatastoreError(Error):
    """Legacy transactional-add failure (kept for name compatibility)."""


class BadTransactionStateError(Error):
    """Legacy transactional-add misuse (kept for name compatibility)."""


class InvalidTaskRetryOptionsError(Error):
    """Legacy retry-options error (kept for name compatibility)."""


class InvalidLeaseTimeError(Error):
    """The lease time is negative or longer than one week (604800 seconds)."""


class InvalidMaxTasksError(Error):
    """max_tasks is zero, negative or larger than 1000."""


class InvalidDeadlineError(Error):
    """The RPC deadline is zero or negative."""


class InvalidQueueModeError(Error):
    """The operation is for pull queues and the queue is not one (kept for compatibility)."""


class TaskLeaseExpiredError(Error):
    """The caller's lease on the task has expired, or another holder has leased it since."""


class QueuePausedError(Error):
    """The queue is paused (legacy error, kept for name compatibility)."""


class InvalidTagError(Error):
    """The tag is longer than 500 bytes."""


class ConfigurationError(Error):
    """pullqueue is configured wrongly: unknown URL scheme, malformed URL, missing extra."""


class NotProvisionedError(UnknownQueueError):
    """A topic or subscription the backend needs does not exist and auto_create is off."""


__all__ = [
    "BadTaskStateError",
    "BadTransactionStateError",
    "ConfigurationError",
    "DatastoreError",
    "DeadlineExceededError",
    "DuplicateTaskNameError",
    "Error",
    "InternalError",
    "InvalidDeadlineError",
    "InvalidEtaError",
    "InvalidLeaseTimeError",
    "InvalidMaxTasksError",
    "InvalidQueueError",
    "InvalidQueueModeError",
    "InvalidQueueNameError",
    "InvalidTagError",
    "InvalidTaskError",
    "InvalidTaskNameError",
    "InvalidTaskRetryOptionsError",
    "InvalidUrlError",
    "NotProvisionedError",
    "PermissionDeniedError",
    "PullQueueError",
    "QueuePausedError",
    "TaskAlreadyExistsError",
    "TaskLeaseExpiredError",
    "TaskTooLargeError",
    "TombstonedTaskError",
    "TooManyTasksError",
    "TransientError",
    "UnknownQueueError",
]
