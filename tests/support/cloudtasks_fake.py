"""A stand-in for the Cloud Tasks v2beta2 REST API whose queues live in Google's own taskqueue stub.

The real google-cloud-tasks client reaches it over its REST transport through `responses`, so a
test drives the adapter's wire format end to end against the legacy semantics (the SDK stub is the
oracle), and can seed tasks (future ETAs included), inject failures and inspect every task held.

    with cloudtasks_service() as service:
        service.create_queue("pulls")
        service.seed("pulls", b"payload", name="t1", countdown=3600)
        backend = service.backend()          # pullqueue's cloudtasks:// adapter, REST transport
        ...
        assert [t.name for t in service.tasks("pulls")] == ["t1"]
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import requests
import responses
from google.appengine.api.taskqueue import taskqueue_service_bytes_pb2 as tq
from google.appengine.api.taskqueue import taskqueue_stub
from google.appengine.runtime import apiproxy_errors
from google.auth.credentials import AnonymousCredentials
from google.protobuf import duration_pb2, timestamp_pb2

from pullqueue import connect
from pullqueue.adapters.cloudtasks import CloudTasksBackend
from tests.support.appengine_testbed import ManualClock, ModelTask, stored_tasks

HOST = "https://cloudtasks.googleapis.com"
RPCS = (
    "CreateTask",
    "LeaseTasks",
    "AcknowledgeTask",
    "RenewLease",
    "CancelLease",
    "DeleteTask",
    "GetTask",
    "ListTasks",
    "GetQueue",
    "ListQueues",
    "PurgeQueue",
)
MAX_LEASE_SECONDS = 7 * 24 * 3600
_ErrorCode = tq.TaskQueueServiceError.ErrorCode
_BASIC, _FULL = 1, 2
_TASK_ID = re.compile(r"^[A-Za-z0-9_-]{1,500}$")
_TAG_FILTER = re.compile(r'^tag="((?:[^"\\]|\\.)*)"$')
_QUEUE_PATH = re.compile(
    r"^/v2beta2/projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)/queues/(?P<queue>[^/:]+)"
    r"(?::(?P<verb>purge))?$"
)
_QUEUES_PATH = re.compile(
    r"^/v2beta2/projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)/queues"
    r"(?P<queue>)(?P<verb>)$"
)
_TASKS_PATH = re.compile(
    r"^/v2beta2/projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)/queues/(?P<queue>[^/]+)"
    r"/tasks(?::(?P<verb>lease))?$"
)
_TASK_PATH = re.compile(
    r"^/v2beta2/projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)/queues/(?P<queue>[^/]+)"
    r"/tasks/(?P<task>[^/:]+)(?::(?P<verb>acknowledge|renewLease|cancelLease))?$"
)

_STUB_ERRORS: dict[str, tuple[int, str, str]] = {
    "UNKNOWN_QUEUE": (404, "NOT_FOUND", "Requested entity was not found."),
    "TOMBSTONED_QUEUE": (404, "NOT_FOUND", "The queue was deleted."),
    "UNKNOWN_TASK": (404, "NOT_FOUND", "Requested entity was not found."),
    "TOMBSTONED_TASK": (404, "NOT_FOUND", "The task no longer exists."),
    "TASK_ALREADY_EXISTS": (409, "ALREADY_EXISTS", "Requested entity already exists"),
    "TASK_LEASE_EXPIRED": (
        400,
        "FAILED_PRECONDITION",
        "The lease has expired or schedule_time does not match the task's current lease.",
    ),
    "INVALID_QUEUE_MODE": (400, "FAILED_PRECONDITION", "The queue is not a pull queue."),
    "QUEUE_PAUSED": (400, "FAILED_PRECONDITION", "The queue is paused."),
    "TASK_TOO_LARGE": (400, "INVALID_ARGUMENT", "Task size is too large."),
    "INVALID_ETA": (400, "INVALID_ARGUMENT", "schedule_time is too far in the future."),
    "INVALID_REQUEST": (400, "INVALID_ARGUMENT", "Request contains an invalid argument."),
    "INVALID_TASK_NAME": (400, "INVALID_ARGUMENT", "Task name is invalid."),
    "PERMISSION_DENIED": (403, "PERMISSION_DENIED", "The caller does not have permission"),
    "TRANSIENT_ERROR": (503, "UNAVAILABLE", "The service is currently unavailable."),
    "INTERNAL_ERROR": (500, "INTERNAL", "Internal error encountered."),
}
_HTTP_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
_HTTP_MESSAGE = {
    403: "The caller does not have permission",
    404: "Requested entity was not found.",
    429: "Resource has been exhausted (e.g. check quota).",
    500: "Internal error encountered.",
    503: "The service is currently unavailable.",
    504: "Deadline expired before operation could complete.",
}


@dataclass
class Fault:
    """A failure the fake answers an RPC with, `times` times; `after` runs the RPC first.

    `status` is an HTTP status, or 0 for a connection dropped before any reply.
    """

    rpc: str
    status: int
    times: int = 1
    after: bool = False
    body: str | None = None


class _Reply(Exception):
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(status)
        self.status = status
        self.body = body


def _usec_to_rfc3339(usec: int) -> str:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromMicroseconds(usec)
    return str(stamp.ToJsonString())


def _rfc3339_to_nanos(text: Any) -> int:
    stamp = timestamp_pb2.Timestamp()
    try:
        stamp.FromJsonString(str(text))
    except ValueError as exc:
        raise _Reply(*_error_body(400, "INVALID_ARGUMENT", f"Invalid timestamp {text!r}")) from exc
    return int(stamp.seconds) * 10**9 + int(stamp.nanos)


def _duration_seconds(text: Any) -> int:
    """A JSON Duration, truncated to whole seconds as the service documents."""
    duration = duration_pb2.Duration()
    try:
        duration.FromJsonString(str(text))
    except ValueError as exc:
        raise _Reply(*_error_body(400, "INVALID_ARGUMENT", f"Invalid duration {text!r}")) from exc
    return int(duration.seconds)


def _error_body(status: int, name: str, message: str) -> tuple[int, dict[str, Any]]:
    return status, {"error": {"code": status, "message": message, "status": name}}


def _view(value: Any) -> int:
    if value in (2, "2", "FULL"):
        return _FULL
    if value in (None, 0, 1, "0", "1", "BASIC", "VIEW_UNSPECIFIED"):
        return _BASIC
    raise _Reply(*_error_body(400, "INVALID_ARGUMENT", f"Invalid response_view {value!r}"))


class CloudTasksModel:
    """The queues of one project and location, held by the SDK's taskqueue stub, served as REST.

    `clock` is the service's clock (ETAs, leases); the lease-request quota counts real seconds,
    as the service's does. With `legacy_codes` error messages carry the legacy executor error
    (`apphosting::ExecutorServiceError::TASK_LEASE_EXPIRED`); without, only the status tells.
    """

    def __init__(
        self,
        *,
        project: str = "test-project",
        location: str = "us-central1",
        clock: Callable[[], float] | None = None,
        lease_quota_per_second: float | None = 10.0,
        legacy_codes: bool = True,
    ) -> None:
        self.project = project
        self.location = location
        self.clock: Callable[[], float] = clock or ManualClock()
        self.lease_quota_per_second = lease_quota_per_second
        self.legacy_codes = legacy_codes
        self.calls: list[tuple[str, str]] = []
        """Every RPC served, as (rpc, queue)."""
        self.refused_leases = 0
        """LeaseTasks calls refused with RESOURCE_EXHAUSTED by the per-queue quota."""
        self._queues: dict[str, str] = {}
        self._faults: list[Fault] = []
        self._buckets: dict[str, tuple[float, float]] = {}
        self._acks: dict[str, deque[float]] = {}
        self._lock = threading.RLock()
        self.stub = taskqueue_stub.TaskQueueServiceStub(gettime=self.clock, _all_queues_valid=True)
        """The oracle. Its queues are declared with the UpdateQueue RPC, not a queue.yaml it would
        re-read on every call; the REST layer answers NOT_FOUND for undeclared queues itself."""

    @property
    def url(self) -> str:
        return f"cloudtasks://{self.project}/{self.location}"

    # -- helpers for tests ---------------------------------------------------------------------

    def backend(self, **options: Any) -> CloudTasksBackend:
        """pullqueue's cloudtasks:// adapter on this service (REST transport, anonymous creds)."""
        options.setdefault("transport", "rest")
        options.setdefault("credentials", AnonymousCredentials())
        options.setdefault("clock", self.clock)
        backend = connect(self.url, **options)
        assert isinstance(backend, CloudTasksBackend)
        return backend

    def create_queue(self, name: str, *, mode: str = "pull") -> None:
        """Declare a queue (as queue.yaml would): `pull`, or `push` to test mode errors."""
        request = tq.TaskQueueUpdateQueueRequest(
            queue_name=name.encode(),
            bucket_refill_per_second=5.0,
            bucket_capacity=5,
            mode=tq.TaskQueueMode.PULL if mode == "pull" else tq.TaskQueueMode.PUSH,
        )
        with self._lock:
            self._rpc("UpdateQueue", request, tq.TaskQueueUpdateQueueResponse())
            self._queues[name] = mode

    def seed(
        self,
        queue: str,
        payload: bytes = b"",
        *,
        name: str | None = None,
        tag: str | None = None,
        eta: float | dt.datetime | None = None,
        countdown: float | None = None,
    ) -> str:
        """Put a task in the queue as a legacy producer would; return its name."""
        self._declared(queue)
        if isinstance(eta, dt.datetime):
            eta = eta.timestamp()
        if eta is None:
            eta = self.clock() + (countdown or 0.0)
        request = tq.TaskQueueBulkAddRequest()
        add = request.add_request.add()
        add.queue_name = queue.encode()
        add.task_name = (name or "").encode()
        add.eta_usec = round(eta * 1_000_000)
        add.mode = tq.TaskQueueMode.PULL
        add.body = payload
        if tag:
            add.tag = tag.encode()
        response = tq.TaskQueueBulkAddResponse()
        with self._lock:
            self.stub.MakeSyncCall("taskqueue", "BulkAdd", request, response)
        result = response.taskresult[0]
        if result.result != _ErrorCode.OK:
            raise ValueError(f"seeding {queue}/{name}: {_ErrorCode.Name(result.result)}")
        return (result.chosen_task_name or add.task_name).decode()

    def tasks(self, queue: str) -> list[ModelTask]:
        """Every task the service holds in the queue, leased or not, oldest ETA first."""
        self._declared(queue)
        with self._lock:
            return stored_tasks(self._rpc, queue)

    def _declared(self, queue: str) -> None:
        if queue not in self._queues:
            raise ValueError(f"queue {queue!r} is not declared; call create_queue({queue!r}) first")

    def fail(
        self,
        rpc: str,
        status: int,
        *,
        times: int = 1,
        after: bool = False,
        body: str | None = None,
    ) -> Fault:
        """Answer the next `times` calls of rpc with HTTP status (a Google error body, or `body`).

        Status 0 drops the connection instead. With `after` the RPC runs first and only its reply
        is replaced: the service acted, and the client cannot know it.
        """
        if rpc not in RPCS:
            raise ValueError(f"unknown RPC {rpc!r}; one of {', '.join(RPCS)}")
        fault = Fault(rpc, status, times, after, body)
        with self._lock:
            self._faults.append(fault)
        return fault

    def rpc_count(self, rpc: str, queue: str | None = None) -> int:
        """How many times rpc was served (for queue, if given)."""
        return sum(1 for name, q in self.calls if name == rpc and queue in (None, q))

    # -- the stub ------------------------------------------------------------------------------

    def _rpc(self, call: str, request: Any, response: Any) -> None:
        try:
            self.stub.MakeSyncCall("taskqueue", call, request, response)
        except apiproxy_errors.ApplicationError as exc:
            raise self._stub_error(_ErrorCode.Name(exc.application_error)) from exc

    def _stub_error(self, code: str, *, creating: bool = False) -> _Reply:
        if creating and code == "TOMBSTONED_TASK":
            status, name, message = (
                409,
                "ALREADY_EXISTS",
                "The task cannot be created because a task with this name existed too recently.",
            )
        else:
            status, name, message = _STUB_ERRORS.get(code, (500, "INTERNAL", "Internal error."))
        if self.legacy_codes:
            message = f"{message} apphosting::ExecutorServiceError::{code}"
        return _Reply(*_error_body(status, name, message))

    def _stored(self, queue: str, task: str) -> Any:
        request = tq.TaskQueueFetchTaskRequest(queue_name=queue.encode(), task_name=task.encode())
        response = tq.TaskQueueFetchTaskResponse()
        self._rpc("FetchTask", request, response)
        return response.task.task[0]

    def _page(self, queue: str, start: str, size: int) -> list[Any]:
        """Up to size + 1 tasks in name order from `start` (the extra one starts the next page)."""
        request = tq.TaskQueueQueryTasksRequest(
            queue_name=queue.encode(), start_task_name=start.encode(), max_rows=size + 1
        )
        response = tq.TaskQueueQueryTasksResponse()
        self._rpc("QueryTasks", request, response)
        return list(response.task)

    # -- REST ----------------------------------------------------------------------------------

    def handle(self, request: Any) -> tuple[int, dict[str, str], str]:
        """The `responses` callback: route, apply faults and quota, answer as the service does."""
        parts = urlsplit(request.url)
        path = unquote(parts.path)
        query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
        body = json.loads(request.body) if request.body else {}
        rpc, queue, task = self._route(request.method, path)
        with self._lock:
            self.calls.append((rpc, queue))
            fault = next((f for f in self._faults if f.rpc == rpc and f.times > 0), None)
            try:
                if fault is not None and not fault.after:
                    fault.times -= 1
                    return self._fault_reply(fault)
                if rpc == "LeaseTasks":
                    self._charge_lease_quota(queue)
                status, reply = 200, getattr(self, f"_{rpc}")(queue, task, body, query)
            except _Reply as answer:
                status, reply = answer.status, answer.body
            if fault is not None and fault.after:
                fault.times -= 1
                return self._fault_reply(fault)
        return status, {"Content-Type": "application/json"}, json.dumps(reply)

    def _route(self, method: str, path: str) -> tuple[str, str, str]:
        for pattern, table in (
            (_QUEUE_PATH, {("GET", None): "GetQueue", ("POST", "purge"): "PurgeQueue"}),
            (_QUEUES_PATH, {("GET", ""): "ListQueues"}),
            (_TASKS_PATH, {("POST", None): "CreateTask", ("POST", "lease"): "LeaseTasks"}),
            (_TASKS_PATH, {("GET", None): "ListTasks"}),
            (
                _TASK_PATH,
                {
                    ("GET", None): "GetTask",
                    ("DELETE", None): "DeleteTask",
                    ("POST", "acknowledge"): "AcknowledgeTask",
                    ("POST", "renewLease"): "RenewLease",
                    ("POST", "cancelLease"): "CancelLease",
                },
            ),
        ):
            match = pattern.match(path)
            if match and (method, match.group("verb")) in table:
                if (match.group("project"), match.group("location")) != (
                    self.project,
                    self.location,
                ):
                    raise AssertionError(f"request for another project or location: {path}")
                groups = match.groupdict()
                return table[(method, groups["verb"])], groups["queue"], groups.get("task") or ""
        raise AssertionError(f"the fake Cloud Tasks service has no {method} {path}")

    def _fault_reply(self, fault: Fault) -> tuple[int, dict[str, str], str]:
        if fault.status == 0:
            raise requests.ConnectionError("Connection reset by peer")
        if fault.body is not None:
            return fault.status, {"Content-Type": "application/json"}, fault.body
        name = _HTTP_STATUS.get(fault.status, "UNKNOWN")
        status, body = _error_body(fault.status, name, _HTTP_MESSAGE.get(fault.status, name))
        return status, {"Content-Type": "application/json"}, json.dumps(body)

    def _charge_lease_quota(self, queue: str) -> None:
        """A token bucket per queue: bursts of `quota`, refilled at `quota` per real second."""
        quota = self.lease_quota_per_second
        if quota is None:
            return
        now = time.monotonic()
        tokens, last = self._buckets.get(queue, (quota, now))
        tokens = min(quota, tokens + (now - last) * quota)
        if tokens < 1:
            self._buckets[queue] = (tokens, now)
            self.refused_leases += 1
            raise _Reply(
                *_error_body(
                    429,
                    "RESOURCE_EXHAUSTED",
                    "Resource has been exhausted (e.g. check quota): more than"
                    f" {quota:g} LeaseTasks requests per second on queue {queue}.",
                )
            )
        self._buckets[queue] = (tokens - 1, now)

    def _require_queue(self, queue: str, *, pull: bool = True) -> None:
        mode = self._queues.get(queue)
        if mode is None:
            raise self._stub_error("UNKNOWN_QUEUE")
        if pull and mode != "pull":
            raise self._stub_error("INVALID_QUEUE_MODE")

    def _task_json(self, queue: str, stored: Any, view: int) -> dict[str, Any]:
        name = stored.task_name.decode()
        pull: dict[str, Any] = {}
        if view == _FULL and stored.body:
            pull["payload"] = base64.b64encode(stored.body).decode()
        if stored.HasField("tag") and stored.tag:
            pull["tag"] = stored.tag.decode()
        task: dict[str, Any] = {
            "name": f"{self._queue_name(queue)}/tasks/{name}",
            "pullMessage": pull,
            "scheduleTime": _usec_to_rfc3339(stored.eta_usec),
            "view": view,
        }
        if stored.HasField("creation_time_usec"):
            task["createTime"] = _usec_to_rfc3339(stored.creation_time_usec)
        if stored.retry_count:
            task["status"] = {"attemptDispatchCount": stored.retry_count}
        return task

    def _queue_name(self, queue: str) -> str:
        return f"projects/{self.project}/locations/{self.location}/queues/{queue}"

    def _lease_usec(self, body: dict[str, Any]) -> int:
        """The schedule_time a lease call presents, in microseconds (-1 if finer than that)."""
        nanos = _rfc3339_to_nanos(body.get("scheduleTime"))
        return nanos // 1000 if nanos % 1000 == 0 else -1

    def _CreateTask(self, queue: str, _: str, body: dict[str, Any], __: dict[str, str]) -> Any:
        self._require_queue(queue)
        task = body.get("task") or {}
        if "appEngineHttpRequest" in task or "pullMessage" not in task:
            raise _Reply(*_error_body(400, "INVALID_ARGUMENT", "A pull queue takes pull tasks."))
        task_id = ""
        if task.get("name"):
            prefix = f"{self._queue_name(queue)}/tasks/"
            task_id = str(task["name"])[len(prefix) :]
            if not str(task["name"]).startswith(prefix) or not _TASK_ID.match(task_id):
                raise self._stub_error("INVALID_TASK_NAME")
        pull = task.get("pullMessage") or {}
        if "scheduleTime" in task:
            eta_usec = _rfc3339_to_nanos(task["scheduleTime"]) // 1000
        else:
            eta_usec = round(self.clock() * 1_000_000)
        request = tq.TaskQueueBulkAddRequest()
        add = request.add_request.add()
        add.queue_name = queue.encode()
        add.task_name = task_id.encode()
        add.eta_usec = eta_usec
        add.mode = tq.TaskQueueMode.PULL
        add.body = base64.b64decode(pull.get("payload", ""))
        if pull.get("tag"):
            add.tag = str(pull["tag"]).encode()
        response = tq.TaskQueueBulkAddResponse()
        self._rpc("BulkAdd", request, response)
        result = response.taskresult[0]
        if result.result != _ErrorCode.OK:
            raise self._stub_error(_ErrorCode.Name(result.result), creating=True)
        name = (result.chosen_task_name or add.task_name).decode()
        return self._task_json(queue, self._stored(queue, name), _view(body.get("responseView")))

    def _LeaseTasks(self, queue: str, _: str, body: dict[str, Any], __: dict[str, str]) -> Any:
        self._require_queue(queue)
        max_tasks = int(body.get("maxTasks", 0))
        if not 0 < max_tasks <= 1000:
            raise _Reply(*_error_body(400, "INVALID_ARGUMENT", "max_tasks must be 1 to 1000."))
        if "leaseDuration" not in body:
            raise _Reply(*_error_body(400, "INVALID_ARGUMENT", "lease_duration is required."))
        seconds = _duration_seconds(body["leaseDuration"])
        if not 0 <= seconds <= MAX_LEASE_SECONDS:
            raise _Reply(*_error_body(400, "INVALID_ARGUMENT", "lease_duration is out of range."))
        request = tq.TaskQueueQueryAndOwnTasksRequest(
            queue_name=queue.encode(), lease_seconds=float(seconds), max_tasks=max_tasks
        )
        text = str(body.get("filter", ""))
        tagged = _TAG_FILTER.match(text)
        if tagged:
            request.group_by_tag = True
            request.tag = re.sub(r"\\(.)", r"\1", tagged.group(1)).encode()
        elif text == "tag_function=oldest_tag()":
            request.group_by_tag = True
        elif text:
            raise _Reply(*_error_body(400, "INVALID_ARGUMENT", f"Invalid filter {text!r}."))
        response = tq.TaskQueueQueryAndOwnTasksResponse()
        self._rpc("QueryAndOwnTasks", request, response)
        view = _view(body.get("responseView"))
        leased = [
            self._task_json(queue, self._stored(queue, task.task_name.decode()), view)
            for task in response.task
        ]
        return {"tasks": leased} if leased else {}

    def _modify_lease(self, queue: str, task: str, body: dict[str, Any], seconds: int) -> Any:
        self._require_queue(queue)
        eta_usec = self._lease_usec(body)
        if eta_usec < 0:
            raise self._stub_error("TASK_LEASE_EXPIRED")
        request = tq.TaskQueueModifyTaskLeaseRequest(
            queue_name=queue.encode(),
            task_name=task.encode(),
            eta_usec=eta_usec,
            lease_seconds=float(seconds),
        )
        self._rpc("ModifyTaskLease", request, tq.TaskQueueModifyTaskLeaseResponse())
        return self._task_json(queue, self._stored(queue, task), _view(body.get("responseView")))

    def _RenewLease(self, queue: str, task: str, body: dict[str, Any], _: dict[str, str]) -> Any:
        seconds = _duration_seconds(body.get("leaseDuration", "0s"))
        if not 0 <= seconds <= MAX_LEASE_SECONDS:
            raise _Reply(*_error_body(400, "INVALID_ARGUMENT", "lease_duration is out of range."))
        return self._modify_lease(queue, task, body, seconds)

    def _CancelLease(self, queue: str, task: str, body: dict[str, Any], _: dict[str, str]) -> Any:
        return self._modify_lease(queue, task, body, 0)

    def _AcknowledgeTask(
        self, queue: str, task: str, body: dict[str, Any], _: dict[str, str]
    ) -> Any:
        self._require_queue(queue)
        stored = self._stored(queue, task)
        now_usec = round(self.clock() * 1_000_000)
        if stored.eta_usec != self._lease_usec(body) or stored.eta_usec < now_usec:
            raise self._stub_error("TASK_LEASE_EXPIRED")
        self._delete(queue, task)
        self._acks.setdefault(queue, deque()).append(self.clock())
        return {}

    def _DeleteTask(self, queue: str, task: str, _: dict[str, Any], __: dict[str, str]) -> Any:
        self._require_queue(queue, pull=False)
        self._delete(queue, task)
        return {}

    def _delete(self, queue: str, task: str) -> None:
        request = tq.TaskQueueDeleteRequest(queue_name=queue.encode(), task_name=[task.encode()])
        response = tq.TaskQueueDeleteResponse()
        self._rpc("Delete", request, response)
        if response.result[0] != _ErrorCode.OK:
            raise self._stub_error(_ErrorCode.Name(response.result[0]))

    def _GetTask(self, queue: str, task: str, _: dict[str, Any], query: dict[str, str]) -> Any:
        self._require_queue(queue, pull=False)
        return self._task_json(queue, self._stored(queue, task), _view(query.get("responseView")))

    def _ListTasks(self, queue: str, _: str, __: dict[str, Any], query: dict[str, str]) -> Any:
        self._require_queue(queue, pull=False)
        size = int(query.get("pageSize", "1000") or 1000)
        if not 0 < size <= 1000:
            raise _Reply(*_error_body(400, "INVALID_ARGUMENT", "page_size must be 1 to 1000."))
        token = query.get("pageToken", "")
        try:
            start = base64.urlsafe_b64decode(token.encode()).decode() if token else ""
        except ValueError as exc:
            raise _Reply(*_error_body(400, "INVALID_ARGUMENT", "Invalid page_token.")) from exc
        page = self._page(queue, start, size)
        view = _view(query.get("responseView"))
        reply: dict[str, Any] = {}
        if page:
            reply["tasks"] = [self._task_json(queue, stored, view) for stored in page[:size]]
        if len(page) > size:
            reply["nextPageToken"] = base64.urlsafe_b64encode(page[size].task_name).decode()
        return reply

    def _GetQueue(self, queue: str, _: str, __: dict[str, Any], query: dict[str, str]) -> Any:
        self._require_queue(queue, pull=False)
        reply: dict[str, Any] = {"name": self._queue_name(queue), "state": 1}
        if self._queues[queue] == "pull":
            reply["pullTarget"] = {}
        else:
            reply["appEngineHttpTarget"] = {}
        if "stats" in query.get("readMask", "").split(","):
            reply["stats"] = self._stats(queue)
        return reply

    def _ListQueues(self, _: str, __: str, ___: dict[str, Any], query: dict[str, str]) -> Any:
        """Every declared queue, push ones too, by name, paged as ListTasks pages."""
        size = int(query.get("pageSize", "1000") or 1000)
        if not 0 < size <= 1000:
            raise _Reply(*_error_body(400, "INVALID_ARGUMENT", "page_size must be 1 to 1000."))
        start = query.get("pageToken", "")
        names = sorted(name for name in self._queues if name > start)
        reply: dict[str, Any] = {}
        if names:
            reply["queues"] = [self._GetQueue(name, "", {}, {}) for name in names[:size]]
        if len(names) > size:
            reply["nextPageToken"] = names[size - 1]
        return reply

    def _stats(self, queue: str) -> dict[str, Any]:
        request = tq.TaskQueueFetchQueueStatsRequest(queue_name=[queue.encode()])
        response = tq.TaskQueueFetchQueueStatsResponse()
        self._rpc("FetchQueueStats", request, response)
        found = response.queuestats[0]
        acks = self._acks.setdefault(queue, deque())
        while acks and acks[0] < self.clock() - 60:
            acks.popleft()
        stats: dict[str, Any] = {}
        if found.num_tasks:
            stats["tasksCount"] = str(found.num_tasks)
            stats["oldestEstimatedArrivalTime"] = _usec_to_rfc3339(found.oldest_eta_usec)
        if acks:
            stats["executedLastMinuteCount"] = str(len(acks))
        return stats

    def _PurgeQueue(self, queue: str, _: str, __: dict[str, Any], ___: dict[str, str]) -> Any:
        self._require_queue(queue, pull=False)
        self._rpc(
            "PurgeQueue",
            tq.TaskQueuePurgeQueueRequest(queue_name=queue.encode()),
            tq.TaskQueuePurgeQueueResponse(),
        )
        return self._GetQueue(queue, "", {}, {})


@contextmanager
def cloudtasks_service(
    *,
    project: str = "test-project",
    location: str = "us-central1",
    clock: Callable[[], float] | None = None,
    queues: Sequence[str] = (),
    lease_quota_per_second: float | None = 10.0,
    legacy_codes: bool = True,
) -> Iterator[CloudTasksModel]:
    """Serve a fake Cloud Tasks v2beta2 API (with `queues` declared as pull queues) while open.

    Requests to any other host pass through, so other clients in the process are unaffected.
    """
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        model = CloudTasksModel(
            project=project,
            location=location,
            clock=clock,
            lease_quota_per_second=lease_quota_per_second,
            legacy_codes=legacy_codes,
        )
        for name in queues:
            model.create_queue(name)
        for method in ("GET", "POST", "DELETE"):
            mock.add_callback(method, re.compile(re.escape(HOST) + r"/v2beta2/.*"), model.handle)
        mock.add_passthru(re.compile(r"^(?!" + re.escape(HOST) + r"/)"))
        yield model


__all__ = [
    "HOST",
    "RPCS",
    "CloudTasksModel",
    "Fault",
    "ManualClock",
    "ModelTask",
    "cloudtasks_service",
]
