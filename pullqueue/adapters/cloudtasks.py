"""The `cloudtasks://PROJECT/LOCATION` backend: a legacy pull queue through Cloud Tasks v2beta2.

The migration reads the queue being left through it and, during a cutover, workers lease from it
through pullqueue; each call maps onto one v2beta2 RPC, lease calls stay under the service's 10
requests per queue per second, and quota or availability refusals back off before they surface.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar
from urllib.parse import SplitResult

import google.auth
from google.api_core import exceptions as api_exceptions
from google.api_core.client_options import ClientOptions
from google.auth import credentials as auth_credentials
from google.auth import exceptions as auth_exceptions
from google.cloud import tasks_v2beta2
from google.protobuf import duration_pb2, field_mask_pb2, json_format, timestamp_pb2

from pullqueue.adapters.cloudtasks_errors import legacy_code_of, status_of, translate
from pullqueue.config import Settings
from pullqueue.errors import (
    ConfigurationError,
    DeadlineExceededError,
    Error,
    InvalidTaskError,
    TaskAlreadyExistsError,
    TaskLeaseExpiredError,
    TombstonedTaskError,
)
from pullqueue.ratelimit import shared_limiter
from pullqueue.task import USEC, QueueStats, Task, to_usec

T = TypeVar("T")

SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
TRANSPORTS = ("grpc", "rest")
FAILURES: tuple[type[BaseException], ...] = (
    api_exceptions.GoogleAPICallError,
    json_format.ParseError,
    auth_exceptions.GoogleAuthError,
    OSError,
)
"""What a call to the service may raise: API errors, unreadable replies, auth and I/O failures."""

_RETRY_WHEN_UNAVAILABLE = frozenset(
    {"GetQueue", "GetTask", "ListTasks", "ListQueues", "DeleteTask", "LeaseTasks"}
)
"""RPCs replayed on UNAVAILABLE: Google's own client retries the first four, and a replayed lease at
worst holds tasks until their lease ends. Every RPC is replayed on RESOURCE_EXHAUSTED."""

ROLES = {
    "CreateTask": "roles/cloudtasks.enqueuer",
    "LeaseTasks": "roles/cloudtasks.taskRunner and cloudtasks.tasks.fullView (payloads)",
    "AcknowledgeTask": "roles/cloudtasks.taskRunner",
    "RenewLease": "roles/cloudtasks.taskRunner",
    "CancelLease": "roles/cloudtasks.taskRunner",
    "DeleteTask": "roles/cloudtasks.taskDeleter",
    "GetTask": "roles/cloudtasks.viewer",
    "GetQueue": "roles/cloudtasks.viewer",
    "ListTasks": "roles/cloudtasks.viewer and cloudtasks.tasks.fullView (payloads)",
    "ListQueues": "roles/cloudtasks.viewer",
    "PurgeQueue": "roles/cloudtasks.queueAdmin",
}
"""The predefined role that carries each RPC's permission, named in PermissionDeniedError."""

_ACTIONS = {
    "CreateTask": "add the task",
    "LeaseTasks": "lease tasks",
    "AcknowledgeTask": "acknowledge the task",
    "RenewLease": "renew the lease",
    "CancelLease": "cancel the lease",
    "DeleteTask": "delete the task",
    "GetTask": "read the task",
    "GetQueue": "read the queue",
    "ListTasks": "list the tasks",
    "ListQueues": "list the queues",
    "PurgeQueue": "purge the queue",
}

_OPTIONS = frozenset(
    {
        "credentials",
        "transport",
        "endpoint",
        "clock",
        "sleep",
        "lease_requests_per_second",
        "max_attempts",
        "backoff_initial",
        "backoff_max",
        "timeout",
    }
)
_IGNORED_OPTIONS = frozenset({"settings", "auto_create"})

_FULL = tasks_v2beta2.Task.View.FULL
_BASIC = tasks_v2beta2.Task.View.BASIC


def default_credentials() -> auth_credentials.Credentials:
    """Application Default Credentials, or a ConfigurationError saying how to provide them."""
    try:
        credentials, _ = google.auth.default(scopes=list(SCOPES))
    except auth_exceptions.DefaultCredentialsError as exc:
        raise ConfigurationError(
            "cloudtasks:// found no Google credentials; provide Application Default Credentials"
            " with `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS"
            f" to a service-account key file, or run on GCP with a service account ({exc})"
        ) from exc
    result: auth_credentials.Credentials = credentials
    return result


def lease_filter(tag: str | None, group_by_tag: bool) -> str:
    """The LeaseTasks filter: `tag="..."`, `tag_function=oldest_tag()` or none."""
    if tag is not None:
        quoted = tag.replace("\\", "\\\\").replace('"', '\\"')
        return f'tag="{quoted}"'
    return "tag_function=oldest_tag()" if group_by_tag else ""


def _timestamp(usec: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=usec // USEC, nanos=(usec % USEC) * 1000)


def _posix(stamp: timestamp_pb2.Timestamp) -> float:
    usec: int = stamp.seconds * USEC + stamp.nanos // 1000
    return usec / USEC


def _token(stamp: timestamp_pb2.Timestamp) -> str:
    return f"{stamp.seconds}.{stamp.nanos:09d}"


class CloudTasksBackend:
    """The pull queues of one project and location, through the Cloud Tasks v2beta2 API.

    Options: `credentials` (default: Application Default Credentials), `transport` ("grpc" or
    "rest"), `endpoint`, `clock` (resolves ETAs of added tasks), `sleep` (between retries),
    `lease_requests_per_second` (client-side cap per queue), `max_attempts`, `backoff_initial`,
    `backoff_max` and `timeout` (seconds per RPC other than a lease, which has its deadline).
    """

    def __init__(
        self,
        project: str,
        location: str,
        *,
        credentials: auth_credentials.Credentials | None = None,
        transport: str = "grpc",
        endpoint: str | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], object] = time.sleep,
        lease_requests_per_second: float = 10.0,
        max_attempts: int = 5,
        backoff_initial: float = 0.25,
        backoff_max: float = 8.0,
        timeout: float = 20.0,
    ) -> None:
        if transport not in TRANSPORTS:
            raise ConfigurationError(
                f"cloudtasks transport must be one of {', '.join(TRANSPORTS)}, got {transport!r}"
                " (option transport=, env PULLQUEUE_CLOUDTASKS_TRANSPORT)"
            )
        if lease_requests_per_second <= 0 or max_attempts < 1 or backoff_initial <= 0:
            raise ConfigurationError(
                "lease_requests_per_second and backoff_initial must be above zero and"
                " max_attempts at least 1"
            )
        self.project = project
        self.location = location
        self.url = f"cloudtasks://{project}/{location}"
        self.transport = transport
        self.lease_requests_per_second = float(lease_requests_per_second)
        self._clock = clock
        self._sleep = sleep
        self._max_attempts = max_attempts
        self._backoff_initial = backoff_initial
        self._backoff_max = max(backoff_max, backoff_initial)
        self._timeout = timeout
        options = ClientOptions(api_endpoint=endpoint) if endpoint else None
        self._client = tasks_v2beta2.CloudTasksClient(
            credentials=credentials if credentials is not None else default_credentials(),
            transport=transport,
            client_options=options,
        )

    def __repr__(self) -> str:
        return f"CloudTasksBackend({self.url!r}, transport={self.transport!r})"

    def now(self) -> float:
        return float(self._clock())

    def queue_path(self, queue: str) -> str:
        """The queue's resource name: projects/P/locations/L/queues/Q."""
        return f"projects/{self.project}/locations/{self.location}/queues/{queue}"

    def queue_identity(self, queue: str) -> str:
        """The queue's resource name, as the service knows it."""
        return f"cloudtasks://{self.queue_path(queue)}"

    def task_path(self, queue: str, task: str) -> str:
        """The task's resource name: projects/P/locations/L/queues/Q/tasks/T."""
        return f"{self.queue_path(queue)}/tasks/{task}"

    # -- calling the service -------------------------------------------------------------------

    def _attempt(self, rpc: str, call: Callable[[], T], *, timeout: float | None = None) -> T:
        """Run call, replaying it with backoff when the service refused it for now."""
        give_up_at = time.monotonic() + (timeout if timeout is not None else self._timeout)
        attempt = 0
        while True:
            try:
                return call()
            except FAILURES as exc:
                status = status_of(exc)
                retryable = status == "RESOURCE_EXHAUSTED" or (
                    rpc in _RETRY_WHEN_UNAVAILABLE
                    and status in ("UNAVAILABLE", "DEADLINE_EXCEEDED")
                )
                attempt += 1
                if not retryable or attempt >= self._max_attempts:
                    raise
                ceiling = min(self._backoff_max, self._backoff_initial * 2 ** (attempt - 1))
                delay = random.uniform(ceiling / 2, ceiling)
                if time.monotonic() + delay > give_up_at:
                    raise
                self._sleep(delay)

    def _call(
        self,
        rpc: str,
        call: Callable[[], T],
        *,
        queue: str,
        task: str | None = None,
        timeout: float | None = None,
    ) -> T:
        try:
            return self._attempt(rpc, call, timeout=timeout)
        except FAILURES as exc:
            raise self._error(exc, rpc, queue, task) from exc

    @staticmethod
    def _error(
        exc: BaseException, rpc: str, queue: str, task: str | None, *, on_lease: bool = False
    ) -> Error:
        return translate(
            exc, queue=queue, task=task, action=_ACTIONS[rpc], role=ROLES[rpc], on_lease=on_lease
        )

    def _queue_exists(self, queue: str) -> bool:
        try:
            self._attempt("GetQueue", lambda: self._get_queue(queue, stats=False))
        except FAILURES as exc:
            if status_of(exc) == "NOT_FOUND":
                return False
            raise self._error(exc, "GetQueue", queue, None) from exc
        return True

    def _get_queue(self, queue: str, *, stats: bool) -> tasks_v2beta2.Queue:
        request = tasks_v2beta2.GetQueueRequest(
            name=self.queue_path(queue),
            read_mask=field_mask_pb2.FieldMask(paths=["stats"]) if stats else None,
        )
        return self._client.get_queue(request=request, retry=None, timeout=self._timeout)

    def _as_task(self, queue: str, message: tasks_v2beta2.Task, *, leased: bool) -> Task:
        raw = tasks_v2beta2.Task.pb(message)
        stamp = raw.schedule_time
        return Task.restore(
            payload=raw.pull_message.payload,
            name=raw.name.rsplit("/", 1)[-1],
            tag=raw.pull_message.tag or None,
            eta_posix=_posix(stamp),
            retry_count=raw.status.attempt_dispatch_count,
            lease_token=_token(stamp) if leased else None,
            queue_name=queue,
        )

    # -- the Backend protocol ------------------------------------------------------------------

    def add(self, queue: str, tasks: Sequence[Task]) -> list[Error | None]:
        parent = self.queue_path(queue)
        now = self.now()
        outcomes: list[Error | None] = []
        for index, task in enumerate(tasks):
            message = tasks_v2beta2.Task(
                pull_message=tasks_v2beta2.PullMessage(payload=task.payload, tag=task.tag or ""),
                schedule_time=_timestamp(to_usec(task.resolve_eta(now))),
            )
            if task.name is not None:
                message.name = self.task_path(queue, task.name)
            request = tasks_v2beta2.CreateTaskRequest(
                parent=parent, task=message, response_view=_BASIC
            )
            try:
                created = self._attempt(
                    "CreateTask",
                    lambda request=request: self._client.create_task(  # type: ignore[misc]
                        request=request, retry=None, timeout=self._timeout
                    ),
                )
            except FAILURES as exc:
                error = self._add_error(exc, queue, task.name)
                if isinstance(error, InvalidTaskError):
                    outcomes.append(error)
                    continue
                outcomes.extend([error] * (len(tasks) - index))
                break
            raw = tasks_v2beta2.Task.pb(created)
            task.name = raw.name.rsplit("/", 1)[-1]
            task.eta_posix = _posix(raw.schedule_time)
            outcomes.append(None)
        return outcomes

    def _add_error(self, exc: BaseException, queue: str, name: str | None) -> Error:
        """ALREADY_EXISTS covers live and tombstoned names; without the legacy code, ask."""
        if status_of(exc) == "ALREADY_EXISTS" and legacy_code_of(exc) is None and name:
            try:
                self._attempt(
                    "GetTask",
                    lambda: self._client.get_task(
                        name=self.task_path(queue, name), retry=None, timeout=self._timeout
                    ),
                )
            except FAILURES as lookup:
                if status_of(lookup) == "NOT_FOUND":
                    return TombstonedTaskError(
                        "this name was used by a deleted task; choose another",
                        queue=queue,
                        task=name,
                    )
            return TaskAlreadyExistsError(
                "a task with this name is in the queue; choose another name", queue=queue, task=name
            )
        return self._error(exc, "CreateTask", queue, name)

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
        request = tasks_v2beta2.LeaseTasksRequest(
            parent=self.queue_path(queue),
            max_tasks=max_tasks,
            lease_duration=duration_pb2.Duration(seconds=math.ceil(lease_seconds)),
            response_view=_FULL,
            filter=lease_filter(tag, group_by_tag),
        )
        give_up_at = time.monotonic() + deadline

        def lease_once() -> tasks_v2beta2.LeaseTasksResponse:
            self._pace(queue, deadline, give_up_at)
            remaining = max(0.001, give_up_at - time.monotonic())
            return self._client.lease_tasks(request=request, retry=None, timeout=remaining)

        response = self._call("LeaseTasks", lease_once, queue=queue, timeout=deadline)
        return [self._as_task(queue, message, leased=True) for message in response.tasks]

    def _pace(self, queue: str, deadline: float, give_up_at: float) -> None:
        """Wait for this queue's next lease slot (DeadlineExceededError if past the deadline)."""
        rate = self.lease_requests_per_second
        limiter = shared_limiter(f"cloudtasks-lease|{self.url}|{queue}", rate)
        while (delay := limiter.try_acquire()) > 0:
            if time.monotonic() + delay > give_up_at:
                raise DeadlineExceededError(
                    f"lease requests are held to {rate:g}/s per queue (the service answers more"
                    f" with RESOURCE_EXHAUSTED); the next slot is {delay:.2f}s away, past the"
                    f" {deadline:g}s deadline; back off and retry",
                    queue=queue,
                )
            time.sleep(delay)

    def _lease_stamp(self, queue: str, task: Task) -> timestamp_pb2.Timestamp:
        """The schedule_time that proves the lease: the task's lease token (or its ETA)."""
        token = task.lease_token
        if token is not None:
            seconds, dot, nanos = token.partition(".")
            if dot and seconds.isdigit() and nanos.isdigit() and len(nanos) == 9:
                return timestamp_pb2.Timestamp(seconds=int(seconds), nanos=int(nanos))
        elif task.eta_posix is not None:
            return _timestamp(to_usec(task.eta_posix))
        raise TaskLeaseExpiredError(
            "the task carries no lease from this Cloud Tasks queue; lease it here first",
            queue=queue,
            task=task.name,
        )

    def modify_lease(self, queue: str, task: Task, lease_seconds: float) -> None:
        assert task.name is not None
        name = self.task_path(queue, task.name)
        stamp = self._lease_stamp(queue, task)
        call: Callable[[], tasks_v2beta2.Task]
        if lease_seconds == 0:
            rpc = "CancelLease"
            cancel = tasks_v2beta2.CancelLeaseRequest(
                name=name, schedule_time=stamp, response_view=_BASIC
            )

            def call() -> tasks_v2beta2.Task:
                return self._client.cancel_lease(request=cancel, retry=None, timeout=self._timeout)

        else:
            rpc = "RenewLease"
            renew = tasks_v2beta2.RenewLeaseRequest(
                name=name,
                schedule_time=stamp,
                lease_duration=duration_pb2.Duration(seconds=math.ceil(lease_seconds)),
                response_view=_BASIC,
            )

            def call() -> tasks_v2beta2.Task:
                return self._client.renew_lease(request=renew, retry=None, timeout=self._timeout)

        try:
            updated = self._attempt(rpc, call)
        except FAILURES as exc:
            raise self._lease_error(exc, rpc, queue, task.name) from exc
        raw = tasks_v2beta2.Task.pb(updated)
        task.eta_posix = _posix(raw.schedule_time)
        task.lease_token = _token(raw.schedule_time)

    def _lease_error(self, exc: BaseException, rpc: str, queue: str, task: str) -> Error:
        """A NOT_FOUND without the legacy code may be the queue's: say which it is."""
        if (
            status_of(exc) == "NOT_FOUND"
            and legacy_code_of(exc) is None
            and not self._queue_exists(queue)
        ):
            return self._error(exc, rpc, queue, task)
        return self._error(exc, rpc, queue, task, on_lease=True)

    def delete(self, queue: str, tasks: Sequence[Task]) -> list[bool]:
        results: list[bool] = []
        for task in tasks:
            assert task.name is not None
            name = self.task_path(queue, task.name)
            if task.lease_token is not None and self._acknowledge(queue, task, name):
                results.append(True)
                continue
            try:
                self._attempt(
                    "DeleteTask",
                    lambda name=name: self._client.delete_task(  # type: ignore[misc]
                        name=name, retry=None, timeout=self._timeout
                    ),
                )
            except FAILURES as exc:
                if status_of(exc) != "NOT_FOUND":
                    raise self._error(exc, "DeleteTask", queue, task.name) from exc
                code = legacy_code_of(exc)
                if code in ("UNKNOWN_QUEUE", "TOMBSTONED_QUEUE") or (
                    code is None and not results and not self._queue_exists(queue)
                ):
                    raise self._error(exc, "DeleteTask", queue, task.name) from exc
                results.append(False)
            else:
                results.append(True)
        return results

    def _acknowledge(self, queue: str, task: Task, name: str) -> bool:
        """Acknowledge a leased task; False when the lease is over (delete by name then)."""
        try:
            stamp = self._lease_stamp(queue, task)
        except TaskLeaseExpiredError:
            return False
        request = tasks_v2beta2.AcknowledgeTaskRequest(name=name, schedule_time=stamp)
        try:
            self._attempt(
                "AcknowledgeTask",
                lambda: self._client.acknowledge_task(
                    request=request, retry=None, timeout=self._timeout
                ),
            )
        except FAILURES as exc:
            lease_over = status_of(exc) in ("FAILED_PRECONDITION", "NOT_FOUND") or (
                legacy_code_of(exc) in ("TASK_LEASE_EXPIRED", "UNKNOWN_TASK", "TOMBSTONED_TASK")
            )
            if lease_over:
                return False
            raise self._error(exc, "AcknowledgeTask", queue, task.name) from exc
        return True

    def purge(self, queue: str) -> None:
        request = tasks_v2beta2.PurgeQueueRequest(name=self.queue_path(queue))
        self._call(
            "PurgeQueue",
            lambda: self._client.purge_queue(request=request, retry=None, timeout=self._timeout),
            queue=queue,
        )

    def stats(self, queue: str) -> QueueStats:
        found = self._call("GetQueue", lambda: self._get_queue(queue, stats=True), queue=queue)
        stats = tasks_v2beta2.Queue.pb(found).stats
        oldest = stats.oldest_estimated_arrival_time
        return QueueStats(
            queue=queue,
            tasks=int(stats.tasks_count),
            oldest_eta=_posix(oldest) if stats.HasField("oldest_estimated_arrival_time") else None,
            executed_last_minute=int(stats.executed_last_minute_count),
            approximate=True,
        )

    def list_tasks(self, queue: str) -> Iterator[Task]:
        """Every task, leased or not, future ETAs included, in the order the service pages them."""
        page_token = ""
        while True:
            request = tasks_v2beta2.ListTasksRequest(
                parent=self.queue_path(queue),
                response_view=_FULL,
                page_size=1000,
                page_token=page_token,
            )
            page = self._call(
                "ListTasks",
                lambda request=request: self._client.list_tasks(  # type: ignore[misc]
                    request=request, retry=None, timeout=self._timeout
                ),
                queue=queue,
            )
            for message in page.tasks:
                yield self._as_task(queue, message, leased=False)
            page_token = page.next_page_token
            if not page_token:
                return

    def list_queues(self) -> list[str]:
        """The pull queues of the project and location (push queues left out), sorted."""
        parent = f"projects/{self.project}/locations/{self.location}"
        found: list[str] = []
        page_token = ""
        while True:
            request = tasks_v2beta2.ListQueuesRequest(
                parent=parent, page_size=1000, page_token=page_token
            )
            page = self._call(
                "ListQueues",
                lambda request=request: self._client.list_queues(  # type: ignore[misc]
                    request=request, retry=None, timeout=self._timeout
                ),
                queue="*",
            )
            for message in page.queues:
                if type(message).pb(message).HasField("pull_target"):
                    found.append(message.name.rsplit("/", 1)[-1])
            page_token = page.next_page_token
            if not page_token:
                return sorted(found)

    def close(self) -> None:
        """Close the client's channel; leases held stay until they end, as on the legacy queue."""
        self._client.transport.close()  # type: ignore[no-untyped-call]


def from_url(url: SplitResult, options: dict[str, Any]) -> CloudTasksBackend:
    """Build a CloudTasksBackend for `cloudtasks://PROJECT/LOCATION`."""
    project = url.netloc
    location = url.path.strip("/")
    if not project or not location or "/" in location or url.query or url.fragment:
        raise ConfigurationError(
            "a Cloud Tasks URL names a project and a location, cloudtasks://PROJECT/LOCATION"
            f" (e.g. cloudtasks://my-app/us-central1), got {url.geturl()!r}"
        )
    unknown = set(options) - _OPTIONS - _IGNORED_OPTIONS
    if unknown:
        raise ConfigurationError(
            f"unknown cloudtasks:// option(s) {', '.join(sorted(unknown))}; known: "
            + ", ".join(sorted(_OPTIONS))
        )
    settings = options.get("settings") or Settings()
    kwargs = {key: value for key, value in options.items() if key in _OPTIONS}
    kwargs.setdefault("transport", settings.cloudtasks_transport)
    kwargs.setdefault("lease_requests_per_second", settings.lease_requests_per_second)
    return CloudTasksBackend(project, location, **kwargs)
