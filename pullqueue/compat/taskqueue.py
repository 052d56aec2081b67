"""A drop-in for `google.appengine.api.taskqueue` pull queues, running on any pullqueue backend.

A worker changes one import line (`from pullqueue.compat import taskqueue`) and keeps its names,
signatures, exceptions and constants; every call goes through `pullqueue.Queue`, so the legacy
limits are checked once and the configured backend (memory, Pub/Sub, legacy queue) does the rest.
"""

from __future__ import annotations

import datetime as dt
import sys
import time
import typing as _typing
import urllib.parse
import weakref
from collections.abc import Iterable as _Iterable

from pullqueue import limits
from pullqueue.compat import apiproxy_errors
from pullqueue.compat import cloud_ndb as _cloud_ndb
from pullqueue.compat import transactional as _transactional
from pullqueue.errors import (
    BadTaskStateError,
    BadTransactionStateError,
    DatastoreError,
    DuplicateTaskNameError,
    Error,
    InternalError,
    InvalidDeadlineError,
    InvalidEtaError,
    InvalidLeaseTimeError,
    InvalidMaxTasksError,
    InvalidQueueError,
    InvalidQueueModeError,
    InvalidQueueNameError,
    InvalidTagError,
    InvalidTaskError,
    InvalidTaskNameError,
    InvalidTaskRetryOptionsError,
    InvalidUrlError,
    PermissionDeniedError,
    QueuePausedError,
    TaskAlreadyExistsError,
    TaskLeaseExpiredError,
    TaskTooLargeError,
    TombstonedTaskError,
    TooManyTasksError,
    TransientError,
    UnknownQueueError,
)
from pullqueue.errors import DeadlineExceededError as _CoreDeadlineExceededError
from pullqueue.outbox import layout as _outbox
from pullqueue.queue import Queue as _CoreQueue
from pullqueue.queue import validate_deadline as _validate_deadline
from pullqueue.queue import validate_queue_name as _validate_queue_name
from pullqueue.queue import validate_task_name as _validate_task_name
from pullqueue.task import USEC as _USEC
from pullqueue.task import Task as _CoreTask

if _typing.TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any

    from pullqueue.adapters.base import Backend


class TransactionalRequestTooLargeError(TaskTooLargeError):
    """The tasks of one transactional add are too large together (legacy name only)."""


class InvalidDispatchDeadlineError(Error):
    """A push task's dispatch deadline is invalid (legacy name only: push tasks are not served)."""


BadTransactionState = BadTransactionStateError

MAX_QUEUE_NAME_LENGTH = limits.MAX_QUEUE_NAME_LENGTH
MAX_PULL_TASK_SIZE_BYTES = limits.MAX_PULL_TASK_SIZE_BYTES
MAX_PUSH_TASK_SIZE_BYTES = 100 * 2**10
MAX_TASK_NAME_LENGTH = limits.MAX_TASK_NAME_LENGTH
MAX_TASK_SIZE_BYTES = MAX_PUSH_TASK_SIZE_BYTES
MAX_TASKS_PER_ADD = limits.MAX_TASKS_PER_ADD
MAX_TRANSACTIONAL_REQUEST_SIZE_BYTES = 2**20
MAX_URL_LENGTH = 2083
MAX_TASKS_PER_LEASE = limits.MAX_TASKS_PER_LEASE
MAX_TAG_LENGTH = limits.MAX_TAG_LENGTH
MAX_LEASE_SECONDS = limits.MAX_LEASE_SECONDS
MAX_DISPATCH_DEADLINE = dt.timedelta(hours=24)
MIN_DISPATCH_DEADLINE = dt.timedelta(seconds=15)

_DEFAULT_QUEUE = "default"
_PUSH_METHODS = frozenset(["GET", "POST", "HEAD", "PUT", "DELETE"])
# What the legacy Task.size adds to a pull task's payload: len("PULL") plus the one header the
# SDK always sets, "X-AppEngine-Current-Namespace: " with an empty namespace and its separator.
_LEGACY_SIZE_OVERHEAD = len("PULL") + len("X-AppEngine-Current-Namespace") + len(": \r\n")


class _AppVersion:
    def __init__(self, text: str) -> None:
        self._text = text

    def __repr__(self) -> str:
        return self._text


DEFAULT_APP_VERSION = _AppVersion("<DefaultApplicationVersion>")


class _LegacyRpcErrors:
    """Raises a backend's DeadlineExceededError as `apiproxy_errors.DeadlineExceededError`.

    The App Engine API raised that error from its RPC layer, not as a taskqueue error, and
    workers catch it by that name (`except (taskqueue.TransientError,
    apiproxy_errors.DeadlineExceededError)`), so every call to a backend goes through this.
    """

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _: Any) -> None:
        if isinstance(exc, _CoreDeadlineExceededError):
            raise apiproxy_errors.DeadlineExceededError(str(exc)) from exc


_legacy_rpc = _LegacyRpcErrors()


def _push_not_served(method: str) -> InvalidQueueModeError:
    return InvalidQueueModeError(
        f"method={method!r} makes a push task; pullqueue.compat.taskqueue serves pull queues only"
        " (method='PULL'). Keep push tasks on google.appengine.api.taskqueue, or create them with"
        " Cloud Tasks (google-cloud-tasks: CloudTasksClient.create_task with an App Engine or"
        " HTTP target)."
    )


class TaskRetryOptions:
    """Retry options, validated as in the legacy API; for pull tasks they have no effect there."""

    _KWARGS = frozenset(
        (
            "min_backoff_seconds",
            "max_backoff_seconds",
            "task_age_limit",
            "max_doublings",
            "task_retry_limit",
        )
    )

    def __init__(self, **kwargs: float | None) -> None:
        unknown = set(kwargs) - self._KWARGS
        if unknown:
            raise TypeError(f"Invalid arguments: {', '.join(sorted(unknown))}")
        for key in sorted(self._KWARGS):
            value = kwargs.get(key)
            if limits.bad_number(value):
                raise InvalidTaskRetryOptionsError(f"{key} must be a finite number, got {value}")
            if value is not None and value < 0:
                raise InvalidTaskRetryOptionsError(f"{key} must not be negative, got {value}")
        low, high = kwargs.get("min_backoff_seconds"), kwargs.get("max_backoff_seconds")
        if low is not None and high is not None and high < low:
            raise InvalidTaskRetryOptionsError(
                "max_backoff_seconds must not be less than min_backoff_seconds"
            )
        limit = kwargs.get("task_retry_limit")
        if limit is not None and not isinstance(limit, int):
            raise InvalidTaskRetryOptionsError("task_retry_limit must be a whole number")
        self.min_backoff_seconds = kwargs.get("min_backoff_seconds")
        self.max_backoff_seconds = kwargs.get("max_backoff_seconds")
        self.max_doublings = kwargs.get("max_doublings")
        self.task_retry_limit: int | None = limit
        age = kwargs.get("task_age_limit")
        self.task_age_limit = None if age is None else int(-(-age // 1))

    def __repr__(self) -> str:
        fields = ", ".join(f"{key}={getattr(self, key)!r}" for key in sorted(self._KWARGS))
        return f"TaskRetryOptions({fields})"


class Task(_CoreTask):
    """A pull task, shaped like the legacy `taskqueue.Task` (method 'PULL' only).

    Fields as in the legacy API: name, payload, tag, eta, eta_posix, retry_count, queue_name,
    was_enqueued, was_deleted, size, method, retry_options. As in the SDK the ETA is set here
    (now + countdown) and an ETA more than 30 days ahead is refused here; a task with neither eta
    nor countdown is due the moment it is added (see _place_on_backend_clock).

    `Task(name='job-42')`, without a payload nor a method, is a handle on a task by its name, as
    legacy code builds one to delete or lease-check a task (the SDK's push task): delete_tasks and
    modify_task_lease accept it, and add refuses it with InvalidQueueModeError, as a pull queue
    refused the SDK's. `Task(method='PULL')` without a payload is InvalidTaskError, as in the SDK.
    """

    __slots__ = ()

    def __init__(
        self,
        payload: bytes | str | None = None,
        method: str | None = None,
        name: str | None = None,
        tag: str | bytes | None = None,
        eta: dt.datetime | None = None,
        countdown: float | None = None,
        **kwargs: Any,
    ) -> None:
        if kwargs:
            payload = _legacy_keywords(payload, name, kwargs)
        if method is None:
            handle = payload is None  # the SDK's Task(name=...): a push task, here a handle
            method = "PULL"
        else:
            handle = False
        if method != "PULL":
            method = method.upper() if isinstance(method, str) else method
            if method in _PUSH_METHODS:
                raise _push_not_served(method)
            if method != "PULL":
                raise InvalidTaskError(f"Invalid method: {method}")
        if name:
            if not isinstance(name, str):
                raise InvalidTaskNameError(f"the task name must be a string, not {name!r}")
            _validate_task_name(name)
        if payload is None:
            # As the SDK: a pull task needs a payload. Without a method, Task(name=...) is the
            # SDK's push task, which legacy code builds to name a task; here it is a name
            # handle, a _NameOnlyTask (same slots, so the class can change here rather than in
            # a __new__, which every Task would pay for).
            if not handle or type(self) is not Task or (kwargs and kwargs.get("params")):
                raise InvalidTaskError("payload must be specified for pull task", task=name)
            self.__class__ = _NameOnlyTask
            payload = b""
        if not isinstance(payload, str | bytes):
            raise InvalidTaskError(f"Task payloads must be strings; invalid payload: {payload!r}")
        if eta is not None or countdown is not None:
            if eta is not None and countdown is not None:
                raise InvalidTaskError("Cannot use a countdown and ETA together", task=name)
            if eta is not None and not isinstance(eta, dt.datetime):
                raise InvalidTaskError("ETA must be a datetime.datetime instance", task=name)
            if countdown is not None:
                try:
                    countdown = float(countdown) if not isinstance(countdown, bool) else countdown
                except (TypeError, ValueError) as exc:
                    raise InvalidTaskError("Countdown must be a number", task=name) from exc
                except OverflowError as exc:
                    raise InvalidTaskError("Countdown out of range", task=name) from exc
        super().__init__(payload, name=name or None, tag=tag, eta=eta, countdown=countdown)
        # As the SDK: the ETA is fixed now, from this process's clock (now + countdown), and
        # checked against the 30-day limit here; see _place_on_backend_clock for other clocks.
        now = time.time()
        if eta is None:
            self.eta_posix = now + countdown if countdown else now
        eta_posix = self.eta_posix
        if eta_posix is not None and eta_posix - now > limits.MAX_COUNTDOWN_SECONDS:
            raise InvalidEtaError("ETA too far in the future", task=name)
        if kwargs:
            self._legacy_options = kwargs.get("retry_options")
        if kwargs.get("_size_check", True):
            if len(self.payload) + _LEGACY_SIZE_OVERHEAD > MAX_PULL_TASK_SIZE_BYTES:
                raise TaskTooLargeError(
                    f"Task size must be less than {MAX_PULL_TASK_SIZE_BYTES}; found {self.size}",
                    task=self.name,
                )
            if self.tag and len(self.tag) * 4 > MAX_TAG_LENGTH:
                tag_bytes = len(self.tag.encode("utf-8"))
                if tag_bytes > MAX_TAG_LENGTH:
                    raise InvalidTagError(
                        f"Tag must be <= {MAX_TAG_LENGTH} bytes. Got a {tag_bytes} byte tag.",
                        task=self.name,
                    )

    @property
    def method(self) -> str:
        """Always 'PULL'."""
        return "PULL"

    @property
    def was_enqueued(self) -> bool:
        """True once the task has been added to a queue (or was leased from one)."""
        return self.was_added

    @property
    def size(self) -> int:
        """Bytes counted against MAX_PULL_TASK_SIZE_BYTES, computed as the legacy SDK does."""
        return len(self.payload) + _LEGACY_SIZE_OVERHEAD

    @property
    def retry_options(self) -> TaskRetryOptions | None:
        """The TaskRetryOptions given to the constructor (None for a leased task), as the SDK.

        Like the SDK, pullqueue does not send a pull task's retry options to the queue: only
        the queue's retry_parameters (queue.yaml) limit a pull task's leases.
        """
        options: TaskRetryOptions | None = getattr(self, "_legacy_options", None)
        return options

    @property
    def headers(self) -> dict[str, str]:
        """Pull tasks carry no headers."""
        return {}

    @property
    def url(self) -> str:
        """Pull tasks have no URL."""
        return ""

    @property
    def on_queue_url(self) -> bool:
        """Legacy push-task property; True for pull tasks as in the SDK."""
        return True

    @property
    def target(self) -> None:
        """Pull tasks have no target."""
        return None

    @property
    def dispatch_deadline_usec(self) -> None:
        """Pull tasks have no dispatch deadline."""
        return None

    def extract_params(self) -> dict[bytes, bytes | list[bytes]]:
        """The payload decoded as application/x-www-form-urlencoded, as the Python 3 SDK does.

        Keys and values are bytes (the payload is bytes, and the SDK parses it as bytes); a name
        given more than once maps to the list of its values. A payload that is not form data
        raises ValueError, as in the SDK (percent-escapes of non-ASCII bytes included).
        """
        if not self.payload:
            return {}
        params: dict[bytes, list[bytes]] = {}
        for key, value in urllib.parse.parse_qsl(
            self.payload, keep_blank_values=True, strict_parsing=True
        ):
            params.setdefault(key, []).append(value)
        return {key: values[0] if len(values) == 1 else values for key, values in params.items()}

    def add(self, queue_name: str = _DEFAULT_QUEUE, transactional: bool = False) -> Task:
        """Add this task to the named queue on the process-wide backend."""
        return Queue(queue_name).add(self, transactional)

    def add_async(
        self,
        queue_name: str = _DEFAULT_QUEUE,
        transactional: bool = False,
        rpc: RPC[Any] | None = None,
    ) -> RPC[Task]:
        """Add this task; the result (or the error) is delivered by rpc.get_result()."""
        return Queue(queue_name).add_async(self, transactional, rpc)

    def __repr__(self) -> str:
        fields = {
            "eta": self.eta,
            "method": "PULL",
            "name": self.name,
            "payload": self.payload,
            "queue_name": self.queue_name,
            "retry_options": self.retry_options,
            "size": self.size,
            "tag": self.tag,
            "was_deleted": self.was_deleted,
            "was_enqueued": self.was_enqueued,
        }
        return "Task<" + ", ".join(f"{key}={value!r}" for key, value in fields.items()) + ">"


class _NameOnlyTask(Task):
    """A Task built without a payload: it names a task to delete or check, and cannot be added."""

    __slots__ = ()


_LEGACY_KEYWORDS = frozenset(
    ["headers", "params", "retry_options", "target", "url", "dispatch_deadline_usec", "_size_check"]
)


def _legacy_keywords(payload: Any, name: str | None, kwargs: dict[str, Any]) -> Any:
    """Check the legacy Task keywords a pull task may carry; returns the payload to use."""
    unknown = set(kwargs) - _LEGACY_KEYWORDS
    if unknown:
        raise TypeError(f"Invalid arguments: {', '.join(sorted(unknown))}")
    for field in ("url", "headers", "target", "dispatch_deadline_usec"):
        if kwargs.get(field):
            raise InvalidTaskError(f"{field} must not be specified for pull tasks", task=name)
    retry_options = kwargs.get("retry_options")
    if retry_options is not None and not isinstance(retry_options, TaskRetryOptions):
        raise InvalidTaskRetryOptionsError("retry_options must be a TaskRetryOptions")
    params = kwargs.get("params")
    if params:
        if payload:
            raise InvalidTaskError(
                "Message body and parameters both present for PULL method; only one of these"
                " can be supplied",
                task=name,
            )
        return _encode_params(params)
    return payload


def _encode_params(params: dict[Any, Any]) -> str:
    pairs: list[tuple[str, str]] = []
    for key, value in params.items():
        if isinstance(value, str | bytes) or not isinstance(value, _Iterable):
            pairs.append((_text(key), _text(value)))
        else:
            pairs.extend((_text(key), _text(item)) for item in value)
    return urllib.parse.urlencode(pairs)


def _text(value: object) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _as_legacy(task: _CoreTask) -> Task:
    """The legacy-shaped view of a task a backend returned (same object, same fields)."""
    if type(task) is _CoreTask:
        # Task adds no slots, so the object is re-labelled in place instead of copied.
        task.__class__ = Task
    return task  # type: ignore[return-value]


_T = _typing.TypeVar("_T")


class RPC(_typing.Generic[_T]):
    """A finished call, as `create_rpc()` returns in the legacy API: get_result() returns or raises.

    pullqueue calls complete before the *_async method returns; the object keeps the legacy
    shape (service, state, deadline, callback, wait, check_success, get_result) so asynchronous
    code runs as is. Where the SDK's ndb is loaded the object is also an ndb Future, so an ndb
    tasklet can `yield` it (as it yields the SDK's UserRPC) and receives the call's result.
    """

    service = "taskqueue"
    IDLE, RUNNING, FINISHING = 0, 1, 2
    """The states of the SDK's apiproxy_rpc.RPC; a pullqueue call is FINISHING once made."""

    def __new__(cls, *args: Any, **kwargs: Any) -> RPC[_T]:
        if cls is RPC:
            tasklet_rpc = _tasklet_rpc_class()
            if tasklet_rpc is not None:
                return object.__new__(tasklet_rpc)
        return object.__new__(cls)

    def __init__(
        self, deadline: float | None = None, callback: Callable[[], None] | None = None
    ) -> None:
        if deadline is not None:
            _validate_deadline(deadline)
        self.deadline = deadline
        self.callback = callback
        self.method: str | None = None
        self._result: _T | None = None
        self._exception: BaseException | None = None
        self._traceback: _typing.Any = None
        self._done = False

    @property
    def state(self) -> int:
        """FINISHING once a call was made with this RPC, IDLE before."""
        return self.FINISHING if self._done else self.IDLE

    def _finish(self, method: str, call: Callable[[], _T]) -> RPC[_T]:
        if self._done:
            raise BadTaskStateError("this RPC was already used for a call; create a new one")
        self.method = method
        try:
            result = call()
        except (Error, apiproxy_errors.Error) as exc:
            self._set_exception(exc, exc.__traceback__)
        else:
            self._set_result(result)
        return self

    def _set_result(self, result: _T) -> None:
        self._result = result
        self._done = True

    def _set_exception(self, exc: BaseException, tb: _typing.Any) -> None:
        self._exception = exc
        self._traceback = tb
        self._done = True

    def wait(self) -> None:
        """Return once the call is done (it always is), running the callback once."""
        if self.callback is not None:
            callback, self.callback = self.callback, None
            callback()

    def check_success(self) -> None:
        """Raise the call's error, if it failed."""
        self.wait()
        if self._exception is not None:
            raise self._exception

    def get_result(self) -> _T:
        """The call's result, or its error raised."""
        self.check_success()
        if not self._done:
            raise BadTaskStateError("this RPC was never used for a call")
        return self._result  # type: ignore[return-value]


_tasklet_rpc: list[type[RPC[_typing.Any]]] = []


def _tasklet_rpc_class() -> type[RPC[_typing.Any]] | None:
    """RPC made an ndb Future too, once the SDK's ndb is imported (else None: nothing to join).

    ndb tasklets yield UserRPCs and Futures only; a Future already done hands its result (or
    its exception) to the tasklet on the next turn of ndb's event loop.
    """
    if _tasklet_rpc:
        return _tasklet_rpc[0]
    tasklets = sys.modules.get("google.appengine.ext.ndb.tasklets")
    if tasklets is None:
        return None
    future: _typing.Any = tasklets.Future

    class TaskletRPC(RPC, future):  # type: ignore[misc, type-arg]
        """An RPC that is also an ndb Future (completed when the call is made)."""

        def __init__(
            self, deadline: float | None = None, callback: Callable[[], None] | None = None
        ) -> None:
            future.__init__(self, "pullqueue.compat.taskqueue RPC")
            RPC.__init__(self, deadline, callback)

        def _set_result(self, result: _typing.Any) -> None:
            future.set_result(self, result)

        def _set_exception(self, exc: BaseException, tb: _typing.Any) -> None:
            future.set_exception(self, exc, tb)

    TaskletRPC.__name__ = TaskletRPC.__qualname__ = "RPC"
    _tasklet_rpc.append(TaskletRPC)
    return TaskletRPC


def create_rpc(
    deadline: float | None = None, callback: Callable[[], None] | None = None
) -> RPC[Any]:
    """An RPC object for the *_async methods (legacy signature)."""
    return RPC(deadline, callback)


class QueueStatistics:
    """The state of a queue, shaped like the legacy `taskqueue.QueueStatistics`.

    `tasks` and `oldest_eta_usec` (None when the queue is empty) are what the backend reports;
    `executed_last_minute` counts tasks leased in the last minute where the backend knows it;
    `in_flight` is the number of tasks under lease; `enforced_rate` is None (pull queues).
    """

    _ATTRS = (
        "queue",
        "tasks",
        "oldest_eta_usec",
        "executed_last_minute",
        "in_flight",
        "enforced_rate",
    )

    def __init__(
        self,
        queue: Queue,
        tasks: int,
        oldest_eta_usec: int | None = None,
        executed_last_minute: int | None = None,
        in_flight: int | None = None,
        enforced_rate: float | None = None,
    ) -> None:
        self.queue = queue
        self.tasks = tasks
        self.oldest_eta_usec = oldest_eta_usec
        self.executed_last_minute = executed_last_minute
        self.in_flight = in_flight
        self.enforced_rate = enforced_rate

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, QueueStatistics):
            return NotImplemented
        return all(getattr(self, a) == getattr(other, a) for a in self._ATTRS)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            "QueueStatistics(" + ", ".join(f"{a}={getattr(self, a)!r}" for a in self._ATTRS) + ")"
        )

    @classmethod
    def fetch(
        cls, queue_or_queues: Queue | str | Iterable[Queue | str], deadline: float = 10
    ) -> QueueStatistics | list[QueueStatistics]:
        """Statistics of one queue (a Queue or a name) or a list of them, in the order asked."""
        _validate_deadline(deadline)
        if not queue_or_queues:
            return []
        return cls.fetch_async(queue_or_queues, create_rpc(deadline)).get_result()

    @classmethod
    def fetch_async(
        cls, queue_or_queues: Queue | str | Iterable[Queue | str], rpc: RPC[Any] | None = None
    ) -> RPC[QueueStatistics | list[QueueStatistics]]:
        """As fetch(), the result delivered by rpc.get_result()."""
        if isinstance(queue_or_queues, str | Queue):
            wants_list, items = False, [queue_or_queues]
        else:
            wants_list, items = True, list(queue_or_queues)
        if any(isinstance(q, str) for q in items) and any(isinstance(q, Queue) for q in items):
            raise TypeError(
                "queue_or_queues must contain either strings or queue instances, not both."
            )
        queues = [q if isinstance(q, Queue) else Queue(q) for q in items]

        def fetch() -> QueueStatistics | list[QueueStatistics]:
            stats = [q._statistics() for q in queues]
            return stats if wants_list else stats[0]

        return (rpc or RPC())._finish("FetchQueueStats", fetch)


class Queue:
    """A pull queue, shaped like the legacy `taskqueue.Queue`, on a pullqueue backend.

    With no backend it uses the process-wide one (`PULLQUEUE_URL`, default memory://).
    """

    def __init__(self, name: str = _DEFAULT_QUEUE, backend: Backend | None = None) -> None:
        # Workers build a Queue per request: only the name is checked here (as the SDK does);
        # the backend, when not given, is looked up on the first call that needs it.
        self._name = _validate_queue_name(name)
        self._backend = backend
        self._core: _CoreQueue | None = None

    @property
    def _queue(self) -> _CoreQueue:
        core = self._core
        if core is None:
            core = self._core = _CoreQueue(self._name, self._backend)
        return core

    @property
    def name(self) -> str:
        """The queue's name."""
        return self._name

    @property
    def backend(self) -> Backend:
        """The backend the queue lives on."""
        return self._queue.backend

    def __repr__(self) -> str:
        return f"Queue<name={self.name!r}>"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Queue):
            return NotImplemented
        return self.name == other.name and self.backend is other.backend

    def __hash__(self) -> int:
        return hash(self.name)

    # add

    @_typing.overload
    def add(self, task: _CoreTask, transactional: bool = False) -> Task: ...

    @_typing.overload
    def add(self, task: Iterable[_CoreTask], transactional: bool = False) -> list[Task]: ...

    def add(
        self, task: _CoreTask | Iterable[_CoreTask], transactional: bool = False
    ) -> Task | list[Task]:
        """Add a task or a list of up to 100; returns what was given, names filled in.

        Per-task failures (TaskAlreadyExistsError, TombstonedTaskError) are raised after the
        other tasks were added; check `was_enqueued` to see which were.

        transactional=True inside an ndb, db or google-cloud-ndb transaction stages the tasks in
        it (the outbox: pullqueue.outbox), publishes them once it commits, and not at all if it
        rolls back (the legacy guarantee); outside one it raises BadTransactionStateError, as the
        SDK does.
        """
        single = isinstance(task, _CoreTask)
        tasks: list[_CoreTask] = [task] if isinstance(task, _CoreTask) else list(task)
        if not tasks:
            return []
        derived = _check_add_order(tasks)
        if transactional:
            return self._add_on_commit(tasks, single, derived)
        return self._add_now(tasks, single, derived)

    def _add_now(
        self, tasks: list[_CoreTask], single: bool, derived: list[Task]
    ) -> Task | list[Task]:
        built = [item.eta_posix for item in derived]
        try:
            with _legacy_rpc:
                if derived:
                    _place_on_backend_clock(derived, self._queue.backend)
                if single:
                    return self._queue.add(tasks[0])  # type: ignore[return-value]
                return self._queue.add(tasks)  # type: ignore[return-value]
        except BaseException:
            # A task the add did not take keeps the ETA it was built with.
            for item, eta_posix in zip(derived, built, strict=True):
                if item.eta_posix is None:
                    item.eta_posix = eta_posix
            raise

    def _add_on_commit(
        self, tasks: list[_CoreTask], single: bool, derived: list[Task]
    ) -> Task | list[Task]:
        connection = _transactional.transaction_connection()
        cloud = None if connection is not None else _cloud_ndb.transaction_context()
        if connection is None and cloud is None:
            raise BadTransactionStateError(
                "Transactional adds are not allowed outside of transactions: call add inside an"
                " ndb, db or google-cloud-ndb transaction (the tasks are added when it commits), or"
                " without"
                " transactional=True",
                queue=self.name,
            )
        for item in tasks:
            if item.name:
                raise InvalidTaskNameError(
                    "A task bound to a transaction cannot be named.",
                    queue=self.name,
                    task=item.name,
                )
        size = sum(len(item.payload) + _LEGACY_SIZE_OVERHEAD for item in tasks)
        if size > MAX_TRANSACTIONAL_REQUEST_SIZE_BYTES:
            raise TransactionalRequestTooLargeError(
                f"Transactional request size must be less than"
                f" {MAX_TRANSACTIONAL_REQUEST_SIZE_BYTES}; found {size}",
                queue=self.name,
            )
        if cloud is not None:
            added = _cloud_ndb.tasks_so_far(cloud) + len(tasks)
        else:
            added = _transactional_tasks.get(connection, 0) + len(tasks)
        if added > _MAX_TRANSACTIONAL_TASKS:
            raise DatastoreError(
                f"Too many messages, maximum allowed {_MAX_TRANSACTIONAL_TASKS}: a transaction"
                f" adds at most {_MAX_TRANSACTIONAL_TASKS} tasks, as on the legacy service; add"
                " the others without transactional=True after it commits",
                queue=self.name,
            )
        # Every limit is checked now, so the staged tasks publish unless the backend fails.
        self._queue._check_add(tasks)
        staged = [_outbox_task(self.name, item) for item in tasks]
        if cloud is not None:
            _cloud_ndb.stage(cloud, self._queue.backend, staged)
        else:
            _transactional.stage(connection, self._queue.backend, staged)
            _transactional_tasks[connection] = added
        # As the SDK, the call answers the tasks named and marked enqueued in this queue; they
        # are not updated if the transaction rolls back.
        for item, record in zip(tasks, staged, strict=True):
            item.name, item.was_added, item.queue_name = record.name, True, self.name
        return tasks[0] if single else tasks  # type: ignore[return-value]

    def add_async(
        self,
        task: _CoreTask | Iterable[_CoreTask],
        transactional: bool = False,
        rpc: RPC[Any] | None = None,
    ) -> RPC[Any]:
        """As add(), the result delivered by rpc.get_result()."""
        return (rpc or RPC())._finish("BulkAdd", lambda: self.add(task, transactional))

    # lease

    def lease_tasks(self, lease_seconds: float, max_tasks: int, deadline: float = 10) -> list[Task]:
        """Lease up to max_tasks available tasks (ETA passed), oldest ETA first."""
        _validate_deadline(deadline, self.name)
        with _legacy_rpc:
            tasks = self._queue.lease(lease_seconds, max_tasks, deadline=deadline)
        for task in tasks:
            _as_legacy(task)
        return tasks  # type: ignore[return-value]

    def lease_tasks_async(
        self, lease_seconds: float, max_tasks: int, rpc: RPC[Any] | None = None
    ) -> RPC[list[Task]]:
        """As lease_tasks(), the result delivered by rpc.get_result()."""
        deadline = (rpc.deadline if rpc is not None else None) or 10
        return (rpc or RPC())._finish(
            "QueryAndOwnTasks", lambda: self.lease_tasks(lease_seconds, max_tasks, deadline)
        )

    def lease_tasks_by_tag(
        self,
        lease_seconds: float,
        max_tasks: int,
        tag: str | bytes | None = None,
        deadline: float = 10,
    ) -> list[Task]:
        """Lease up to max_tasks available tasks of `tag`, or of the oldest task's tag if None.

        When the oldest available task is untagged, the untagged tasks among the max_tasks
        oldest are leased (the legacy rule).
        """
        _validate_deadline(deadline, self.name)
        if isinstance(tag, bytes):
            tag = tag.decode("utf-8")
        with _legacy_rpc:
            tasks = self._queue.lease(
                lease_seconds, max_tasks, tag=tag or None, group_by_tag=True, deadline=deadline
            )
        for task in tasks:
            _as_legacy(task)
        return tasks  # type: ignore[return-value]

    def lease_tasks_by_tag_async(
        self,
        lease_seconds: float,
        max_tasks: int,
        tag: str | bytes | None = None,
        rpc: RPC[Any] | None = None,
    ) -> RPC[list[Task]]:
        """As lease_tasks_by_tag(), the result delivered by rpc.get_result()."""
        deadline = (rpc.deadline if rpc is not None else None) or 10
        return (rpc or RPC())._finish(
            "QueryAndOwnTasks",
            lambda: self.lease_tasks_by_tag(lease_seconds, max_tasks, tag, deadline),
        )

    def modify_task_lease(self, task: _CoreTask, lease_seconds: float) -> None:
        """Make the task's lease end lease_seconds from now (0: available again at once).

        Raises TaskLeaseExpiredError when the lease has run out or the task was leased again.
        """
        with _legacy_rpc:
            self._queue.modify_lease(task, lease_seconds)

    # delete

    @_typing.overload
    def delete_tasks(self, task: _CoreTask) -> Task: ...

    @_typing.overload
    def delete_tasks(self, task: Iterable[_CoreTask]) -> list[Task]: ...

    def delete_tasks(self, task: _CoreTask | Iterable[_CoreTask]) -> Task | list[Task]:
        """Delete tasks by name; each gets was_deleted True, or False when it was already gone."""
        with _legacy_rpc:
            if isinstance(task, _CoreTask):
                self._queue.delete(task)
                return task  # type: ignore[return-value]
            return self._queue.delete(task)  # type: ignore[return-value]

    def delete_tasks_async(
        self, task: _CoreTask | Iterable[_CoreTask], rpc: RPC[Any] | None = None
    ) -> RPC[Any]:
        """As delete_tasks(), the result delivered by rpc.get_result()."""
        return (rpc or RPC())._finish("Delete", lambda: self.delete_tasks(task))

    @_typing.overload
    def delete_tasks_by_name(self, task_name: str) -> Task: ...  # type: ignore[overload-overlap]

    @_typing.overload
    def delete_tasks_by_name(self, task_name: Iterable[str]) -> list[Task]: ...

    def delete_tasks_by_name(self, task_name: str | Iterable[str]) -> Task | list[Task]:
        """Delete tasks given by name; returns Task objects with was_deleted set."""
        if isinstance(task_name, str):
            return self.delete_tasks(_named(task_name))
        return self.delete_tasks([_named(name) for name in task_name])

    def delete_tasks_by_name_async(
        self, task_name: str | Iterable[str], rpc: RPC[Any] | None = None
    ) -> RPC[Any]:
        """As delete_tasks_by_name(), the result delivered by rpc.get_result()."""
        return (rpc or RPC())._finish("Delete", lambda: self.delete_tasks_by_name(task_name))

    def purge(self) -> None:
        """Remove every task from the queue; their names stay tombstoned."""
        with _legacy_rpc:
            self._queue.purge()

    # statistics

    def fetch_statistics(self, deadline: float = 10) -> QueueStatistics:
        """The queue's QueueStatistics."""
        _validate_deadline(deadline, self.name)
        return self._statistics()

    def fetch_statistics_async(self, rpc: RPC[Any] | None = None) -> RPC[Any]:
        """As fetch_statistics(), the result delivered by rpc.get_result()."""
        return QueueStatistics.fetch_async(self, rpc)

    def _statistics(self) -> QueueStatistics:
        with _legacy_rpc:
            stats = self._queue.stats()
        oldest = None if stats.oldest_eta is None else round(stats.oldest_eta * _USEC)
        return QueueStatistics(
            self,
            stats.tasks,
            oldest_eta_usec=oldest,
            executed_last_minute=stats.executed_last_minute,
            in_flight=stats.leased,
        )


def _check_add_order(tasks: list[_CoreTask]) -> list[Task]:
    """The SDK's checks of an add, in its order; returns the tasks whose ETA came from the clock.

    Too many tasks first, then task by task a repeated name and a task already added, then a
    task without a payload (the SDK's push task, which the pull queue refuses).
    """
    if len(tasks) > MAX_TASKS_PER_ADD:
        raise TooManyTasksError(
            f"No more than {MAX_TASKS_PER_ADD} tasks can be added in a single call"
        )
    names: set[str] = set()
    derived: list[Task] = []
    handle: _CoreTask | None = None
    for task in tasks:
        name = task.name
        if name:
            if name in names:
                raise DuplicateTaskNameError(
                    f"The task name {name!r} is used more than once in the request", task=name
                )
            names.add(name)
        if task.was_added:
            raise BadTaskStateError("The task has already been enqueued.", task=name)
        if task._eta is None and task.eta_posix is not None:
            derived.append(task)  # type: ignore[arg-type]
        if handle is None and type(task) is _NameOnlyTask:
            handle = task
    if handle is not None:
        # The SDK's Task(name=...) is a push task (method POST): the queue, not the SDK,
        # refuses it, so this comes after the checks above.
        raise InvalidQueueModeError(
            "a Task without a payload only names a task (to delete it); a pull task needs"
            " a payload: Task(payload=..., method='PULL')",
            task=handle.name,
        )
    return derived


def _place_on_backend_clock(tasks: list[Task], backend: Backend) -> None:
    """Put tasks whose ETA was now + countdown at construction on the backend's clock.

    A task without eta or countdown is due the moment it is added, on every backend (on Pub/Sub
    it stays a message without an `eta` attribute, as the wire format has it). A countdown keeps
    the ETA set at construction on this process's clock (every production backend), as in the
    SDK; a backend on another clock (an injected test clock) counts it from its own now.
    """
    other_clock: bool | None = None
    now = 0.0
    for task in tasks:
        if not task._countdown:
            task.eta_posix = None
            continue
        if other_clock is None:
            before = time.time()
            now = backend.now()
            other_clock = not before <= now <= time.time()
        if other_clock:
            task.eta_posix = now + task._countdown


_MAX_TRANSACTIONAL_TASKS = 5
"""The legacy limit of transactional tasks per datastore transaction (the SDK's stub keeps it)."""

_transactional_tasks: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
"""Tasks added so far by each transaction's connection (forgotten with the connection)."""


def _outbox_task(queue: str, task: _CoreTask) -> _outbox.StagedTask:
    """The staging record of a transactional task (named now; staged_usec set at the commit)."""
    if len(task.payload) + len((task.tag or "").encode("utf-8")) > _outbox.MAX_STAGED_BYTES:
        raise TaskTooLargeError(
            f"a transactional task is staged as one datastore entity: its payload and tag must"
            f" be at most {_outbox.MAX_STAGED_BYTES} bytes",
            queue=queue,
        )
    eta = None
    if task._eta is not None or getattr(task, "_countdown", None):
        eta = None if task.eta_posix is None else round(task.eta_posix * _USEC)
    return _outbox.StagedTask(queue, _outbox.new_task_name(), task.payload, task.tag, eta, 0)


def _named(name: str) -> Task:
    if not isinstance(name, str):
        raise InvalidTaskNameError(f"a task name must be a string, not {name!r}")
    task = Task.__new__(Task)
    _CoreTask.__init__(task, b"", name=_validate_task_name(name))
    return task


_transactional.install_when_sdk_loads()


def add(*args: Any, **kwargs: Any) -> Task:
    """Create a task from the arguments and add it to `queue_name` (default 'default')."""
    transactional = kwargs.pop("transactional", False)
    queue_name = kwargs.pop("queue_name", _DEFAULT_QUEUE)
    return Task(*args, **kwargs).add(queue_name=queue_name, transactional=transactional)


__all__ = [
    "DEFAULT_APP_VERSION",
    "MAX_DISPATCH_DEADLINE",
    "MAX_LEASE_SECONDS",
    "MAX_PULL_TASK_SIZE_BYTES",
    "MAX_PUSH_TASK_SIZE_BYTES",
    "MAX_QUEUE_NAME_LENGTH",
    "MAX_TAG_LENGTH",
    "MAX_TASKS_PER_ADD",
    "MAX_TASKS_PER_LEASE",
    "MAX_TASK_NAME_LENGTH",
    "MAX_TASK_SIZE_BYTES",
    "MAX_TRANSACTIONAL_REQUEST_SIZE_BYTES",
    "MAX_URL_LENGTH",
    "MIN_DISPATCH_DEADLINE",
    "RPC",
    "BadTaskStateError",
    "BadTransactionState",
    "BadTransactionStateError",
    "DatastoreError",
    "DuplicateTaskNameError",
    "Error",
    "InternalError",
    "InvalidDeadlineError",
    "InvalidDispatchDeadlineError",
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
    "PermissionDeniedError",
    "Queue",
    "QueuePausedError",
    "QueueStatistics",
    "Task",
    "TaskAlreadyExistsError",
    "TaskLeaseExpiredError",
    "TaskRetryOptions",
    "TaskTooLargeError",
    "TombstonedTaskError",
    "TooManyTasksError",
    "TransactionalRequestTooLargeError",
    "TransientError",
    "UnknownQueueError",
    "add",
    "create_rpc",
]
