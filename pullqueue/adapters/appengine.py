"""The `appengine://` backend: a legacy pull queue through the App Engine bundled taskqueue API.

It is for a migration or a worker running inside App Engine with bundled services, where each
call maps one to one onto `google.appengine.api.taskqueue` (lease_tasks, lease_tasks_by_tag,
modify_task_lease, delete_tasks_by_name, add, purge, fetch_statistics).
"""

from __future__ import annotations

import datetime as dt
import functools
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import SplitResult

from google.appengine.api import apiproxy_stub_map, taskqueue
from google.appengine.api.taskqueue import taskqueue_service_bytes_pb2
from google.appengine.runtime import apiproxy_errors

from pullqueue import errors
from pullqueue.errors import (
    ConfigurationError,
    DeadlineExceededError,
    Error,
    InternalError,
    TaskLeaseExpiredError,
    TaskTooLargeError,
    TransientError,
)
from pullqueue.task import USEC, QueueStats, Task, to_usec

T = TypeVar("T")

_ErrorCode = taskqueue_service_bytes_pb2.TaskQueueServiceError.ErrorCode

_ADD_RESULTS: dict[str, type[Error]] = {
    "TASK_ALREADY_EXISTS": errors.TaskAlreadyExistsError,
    "TOMBSTONED_TASK": errors.TombstonedTaskError,
    "TASK_TOO_LARGE": errors.TaskTooLargeError,
    "INVALID_ETA": errors.InvalidEtaError,
    "INVALID_TASK_NAME": errors.InvalidTaskNameError,
    "INVALID_TAG": errors.InvalidTagError,
    "UNKNOWN_QUEUE": errors.UnknownQueueError,
    "TOMBSTONED_QUEUE": errors.UnknownQueueError,
    "INVALID_QUEUE_MODE": errors.InvalidQueueModeError,
    "PERMISSION_DENIED": errors.PermissionDeniedError,
    "TRANSIENT_ERROR": errors.TransientError,
    "INTERNAL_ERROR": errors.InternalError,
}
"""Per-task BulkAdd results, by their legacy code names."""

_ADVICE: dict[type[Error], str] = {
    errors.UnknownQueueError: "declare it in queue.yaml with `mode: pull` and deploy queue.yaml",
    errors.InvalidQueueModeError: "the queue is a push queue; pull operations need `mode: pull`",
    errors.TransientError: "back off and retry",
    errors.DeadlineExceededError: "back off and retry",
    errors.InternalError: "retry later; if it persists, check the App Engine status page",
    errors.TaskLeaseExpiredError: "the lease ended or another worker holds the task; lease again",
    errors.TaskAlreadyExistsError: "a task with this name is in the queue; choose another name",
    errors.TombstonedTaskError: "the name belonged to a deleted task; choose another name",
    errors.PermissionDeniedError: "the app may not use this queue (check the queue's acl)",
}

_NOT_AVAILABLE = (
    "appengine:// uses the App Engine bundled taskqueue API, which this process cannot reach:"
    " run inside App Engine standard with `app_engine_apis: true` in app.yaml and the WSGI app"
    " wrapped by google.appengine.api.wrap_wsgi_app, or in tests activate a testbed with"
    " init_taskqueue_stub(); outside App Engine use cloudtasks://PROJECT/LOCATION"
)


def _error(cls: type[Error], detail: str, queue: str, task: str | None = None) -> Error:
    advice = _ADVICE.get(cls)
    text = "; ".join(part for part in (detail, advice) if part)
    return cls(text, queue=queue, task=task)


def translate(exc: BaseException, queue: str, task: str | None = None, action: str = "") -> Error:
    """The pullqueue error for an exception the bundled API raised (same names as the legacy)."""
    if isinstance(exc, apiproxy_errors.DeadlineExceededError):
        return _error(DeadlineExceededError, f"{type(exc).__name__}: {exc}", queue, task)
    if isinstance(exc, apiproxy_errors.OverQuotaError):
        return _error(TransientError, f"{type(exc).__name__}: {exc}", queue, task)
    if isinstance(exc, apiproxy_errors.CapabilityDisabledError):
        return _error(TransientError, f"the taskqueue service is disabled now ({exc})", queue, task)
    if isinstance(exc, apiproxy_errors.RequestTooLargeError):
        return _error(TaskTooLargeError, f"the request is too large ({exc})", queue, task)
    if isinstance(exc, AssertionError) and "No api proxy found" in str(exc):
        return ConfigurationError(_NOT_AVAILABLE, queue=queue, task=task)
    cls = getattr(errors, type(exc).__name__, None)
    if not (isinstance(cls, type) and issubclass(cls, Error)):
        cls = InternalError if isinstance(exc, apiproxy_errors.Error) else Error
    doing = f"{action} failed" if action else "the taskqueue call failed"
    detail = f"{doing}: {exc}" if str(exc) else f"{doing} ({type(exc).__name__})"
    return _error(cls, detail, queue, task)


_FAILURES: tuple[type[BaseException], ...] = (
    taskqueue.Error,
    apiproxy_errors.Error,
    AssertionError,
)


def _utc(usec: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=usec)


class AppEngineBackend:
    """The app's own pull queues, through the bundled taskqueue API (in App Engine, or a testbed).

    `clock` resolves the ETAs of added tasks; it should be the clock the service runs on (in
    tests, the testbed stub's `gettime`). A task's `retry_limit` is not sent: the bundled API has
    no per-task limit for pull tasks, the queue's `task_retry_limit` in queue.yaml applies. There
    is no `list_tasks`: the bundled API cannot list tasks, so future-ETA tasks show only in stats.
    """

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        if apiproxy_stub_map.apiproxy.GetStub("taskqueue") is None:
            raise ConfigurationError(_NOT_AVAILABLE)
        self.url = "appengine://"
        self._clock = clock

    def __repr__(self) -> str:
        return "AppEngineBackend('appengine://')"

    def now(self) -> float:
        return float(self._clock())

    @staticmethod
    def _call(call: Callable[[], T], action: str, queue: str, task: str | None = None) -> T:
        try:
            return call()
        except _FAILURES as exc:
            raise translate(exc, queue, task, action) from exc

    def add(self, queue: str, tasks: Sequence[Task]) -> list[Error | None]:
        now = self.now()
        legacy: list[Any] = []
        for task in tasks:
            options: dict[str, Any] = {
                "payload": task.payload,
                "method": "PULL",
                "eta": _utc(to_usec(task.resolve_eta(now))),
            }
            if task.name is not None:
                options["name"] = task.name
            if task.tag is not None:
                options["tag"] = task.tag
            legacy.append(
                self._call(functools.partial(taskqueue.Task, **options), "add", queue, task.name)
            )
        rpc = self._call(lambda: taskqueue.Queue(queue).add_async(legacy), "add", queue)
        try:
            rpc.get_result()
        except _FAILURES as exc:
            failure = translate(exc, queue, action="add")
            results = getattr(rpc.response, "taskresult", [])
            if len(results) != len(tasks):
                return [failure] * len(tasks)
            return [
                self._outcome(queue, task, sent, result.result, failure)
                for task, sent, result in zip(tasks, legacy, results, strict=True)
            ]
        return [
            self._outcome(queue, task, sent, _ErrorCode.OK, None)
            for task, sent in zip(tasks, legacy, strict=True)
        ]

    @staticmethod
    def _outcome(
        queue: str, task: Task, sent: Any, code: int, failure: Error | None
    ) -> Error | None:
        """One task's BulkAdd result: None when added, else the legacy error for that task."""
        if sent.was_enqueued:
            task.name = sent.name
            task.eta_posix = to_usec(sent.eta_posix) / USEC
            return None
        cls = _ADD_RESULTS.get(_ErrorCode.Name(code)) if code != _ErrorCode.SKIPPED else None
        if cls is None:
            return failure or Error("the task was not added", queue=queue, task=task.name)
        return _error(cls, "the task was not added", queue, task.name)

    def lease(
        self,
        queue: str,
        lease_seconds: float,
        max_tasks: int,
        *,
        tag: str | None = None,
        group_by_tag: bool = False,
        deadline: float = 10.0,
    ) -> list[Task]:
        target = taskqueue.Queue(queue)
        if group_by_tag or tag is not None:
            leased = self._call(
                lambda: target.lease_tasks_by_tag(lease_seconds, max_tasks, tag, deadline),
                "lease_tasks_by_tag",
                queue,
            )
        else:
            leased = self._call(
                lambda: target.lease_tasks(lease_seconds, max_tasks, deadline), "lease_tasks", queue
            )
        return [
            Task.restore(
                payload=item.payload or b"",
                name=item.name,
                tag=item.tag,
                eta_posix=to_usec(item.eta_posix) / USEC,
                retry_count=item.retry_count,
                lease_token=str(to_usec(item.eta_posix)),
                queue_name=queue,
            )
            for item in leased
        ]

    def modify_lease(self, queue: str, task: Task, lease_seconds: float) -> None:
        assert task.name is not None
        token = task.lease_token
        if token is None and task.eta_posix is not None:
            token = str(to_usec(task.eta_posix))
        if token is None or not token.isdigit():
            raise TaskLeaseExpiredError(
                "the task carries no lease from this queue; lease it here first",
                queue=queue,
                task=task.name,
            )
        name = task.name
        held = self._call(
            lambda: taskqueue.Task(payload=b"", method="PULL", name=name, eta=_utc(int(token))),
            "modify_task_lease",
            queue,
            name,
        )
        try:
            taskqueue.Queue(queue).modify_task_lease(held, lease_seconds)
        except _FAILURES as exc:
            if type(exc) is taskqueue.Error:
                raise _error(
                    TaskLeaseExpiredError, "no such task in the queue", queue, name
                ) from exc
            raise translate(exc, queue, name, "modify_task_lease") from exc
        task.eta_posix = to_usec(held.eta_posix) / USEC
        task.lease_token = str(to_usec(held.eta_posix))

    def delete(self, queue: str, tasks: Sequence[Task]) -> list[bool]:
        names = [task.name for task in tasks]
        target = taskqueue.Queue(queue)
        deleted = self._call(lambda: target.delete_tasks_by_name(names), "delete_tasks", queue)
        return [bool(item.was_deleted) for item in deleted]

    def purge(self, queue: str) -> None:
        self._call(lambda: taskqueue.Queue(queue).purge(), "purge", queue)

    def stats(self, queue: str) -> QueueStats:
        found = self._call(
            lambda: taskqueue.Queue(queue).fetch_statistics(), "fetch_statistics", queue
        )
        oldest = found.oldest_eta_usec
        return QueueStats(
            queue=queue,
            tasks=int(found.tasks),
            oldest_eta=oldest / USEC if oldest is not None else None,
            executed_last_minute=found.executed_last_minute,
            approximate=True,
        )

    def close(self) -> None:
        """Nothing to release: the bundled API holds no connection for this backend."""


def from_url(url: SplitResult, options: dict[str, Any]) -> AppEngineBackend:
    """Build an AppEngineBackend for `appengine://` (option: clock)."""
    if url.netloc or url.path not in ("", "/") or url.query or url.fragment:
        raise ConfigurationError(
            f"appengine:// names no host or path (the app's own queues), got {url.geturl()!r}"
        )
    unknown = set(options) - {"clock", "settings", "auto_create"}
    if unknown:
        raise ConfigurationError(
            f"unknown appengine:// option(s) {', '.join(sorted(unknown))}; known: clock"
        )
    return AppEngineBackend(clock=options.get("clock", time.time))
