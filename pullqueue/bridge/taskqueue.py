"""The bridge's taskqueue service: each pull-queue call of the SDKs, served by `pullqueue.Queue`.

Requests are decoded into the same `Queue` calls `pullqueue.compat.taskqueue` makes, so the
legacy limits, names, tags, leases and errors are the library's; answers carry the legacy codes.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from typing import Any

from google.protobuf.message import DecodeError

from pullqueue import metrics
from pullqueue.adapters.base import Backend, TombstoneBackend
from pullqueue.bridge.codes import OK, SKIPPED, Code, code_of
from pullqueue.bridge.outbox import TransactionalAdds
from pullqueue.bridge.proto import taskqueue_service_pb2 as pb
from pullqueue.bridge.proto.remote_api_pb2 import RpcError
from pullqueue.bridge.wire import ApplicationFailure, RpcFailure
from pullqueue.config import Settings
from pullqueue.errors import DeadlineExceededError, Error, TooManyTasksError
from pullqueue.limits import MAX_TASKS_PER_ADD
from pullqueue.queue import Queue
from pullqueue.task import USEC, Task

SERVED = (
    "Add",
    "BulkAdd",
    "QueryAndOwnTasks",
    "ModifyTaskLease",
    "Delete",
    "FetchQueueStats",
    "PurgeQueue",
)
"""The taskqueue methods the bridge serves: every call the SDKs make for pull queues."""

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
STAMP_USEC = 500_000
"""Microseconds before an add arrives within which a task's ETA is the SDK's stamp of an
immediate task (see _task), not an ETA the app chose."""


class TaskQueueService:
    """Serves taskqueue calls on one backend; safe to call from many threads at once."""

    def __init__(
        self, backend: Backend, *, upstream: str | None = None, sweep_period: float = 0.0
    ) -> None:
        self.backend = backend
        settings = Settings()
        self.outbox = TransactionalAdds(
            backend,
            upstream=upstream,
            sweep_period=sweep_period,
            sweep_grace=settings.sweep_grace_seconds,
            sweep_lock=settings.sweep_lock_seconds,
        )
        self._queues: dict[str, Queue] = {}
        self._methods: dict[str, Callable[[bytes, float], bytes]] = {
            "Add": self._add,
            "BulkAdd": self._bulk_add,
            "QueryAndOwnTasks": self._lease,
            "ModifyTaskLease": self._modify_lease,
            "Delete": self._delete,
            "FetchQueueStats": self._stats,
            "PurgeQueue": self._purge,
        }

    def call(self, method: str, request: bytes, deadline: float) -> bytes:
        """Serve one call before `deadline` (a time.monotonic() instant); returns the response
        bytes, or raises ApplicationFailure (a taskqueue code) or RpcFailure."""
        serve = self._methods.get(method)
        if serve is None:
            raise RpcFailure(
                RpcError.CALL_NOT_FOUND,
                f"taskqueue.{method} is not served by pullqueue bridge, which serves the"
                f" pull-queue calls only ({', '.join(SERVED)})",
            )
        if deadline <= time.monotonic():
            raise _deadline_exceeded(method)
        try:
            return serve(request, deadline)
        except DeadlineExceededError as exc:
            raise _deadline_exceeded(method, str(exc)) from None
        except Error as exc:
            raise ApplicationFailure(code_of(exc), str(exc)) from None

    def queue(self, name: bytes) -> Queue:
        """The Queue of a name as the wire carries it (bytes); the legacy error if it is bad."""
        try:
            text = name.decode("utf-8")
        except UnicodeDecodeError:
            raise ApplicationFailure(
                Code.INVALID_QUEUE_NAME, "the queue name is not UTF-8"
            ) from None
        queue = self._queues.get(text)
        if queue is None:
            queue = Queue(text, self.backend)
            if len(self._queues) < 10_000:
                self._queues[text] = queue
        return queue

    # add

    def _add(self, request: bytes, deadline: float) -> bytes:
        add = _parse(pb.TaskQueueAddRequest, request)
        bulk = pb.TaskQueueBulkAddRequest()
        bulk.add_request.append(add)
        result = pb.TaskQueueBulkAddResponse.FromString(self._bulk_add_message(bulk))
        outcome = result.taskresult[0]
        if outcome.result != OK:
            raise ApplicationFailure(outcome.result, _ADD_DETAIL.get(outcome.result, ""))
        answer = pb.TaskQueueAddResponse()
        if outcome.HasField("chosen_task_name"):
            answer.chosen_task_name = outcome.chosen_task_name
        return bytes(answer.SerializeToString())

    def _bulk_add(self, request: bytes, deadline: float) -> bytes:
        return self._bulk_add_message(_parse(pb.TaskQueueBulkAddRequest, request))

    def _bulk_add_message(self, request: Any) -> bytes:
        adds = list(request.add_request)
        if not adds:
            raise ApplicationFailure(Code.INVALID_REQUEST, "BulkAdd carries no task")
        if len(adds) > MAX_TASKS_PER_ADD:
            raise TooManyTasksError(
                f"{len(adds)} tasks in one add; the limit is {MAX_TASKS_PER_ADD}"
            )
        for add in adds:
            if add.mode != pb.TaskQueueMode.PULL:
                raise ApplicationFailure(
                    Code.INVALID_QUEUE_MODE,
                    "a push task was added: the bridge serves pull queues only (a pull task has"
                    " method PULL); keep push tasks on App Engine or move them to Cloud Tasks",
                )
        queue = self.queue(adds[0].queue_name)
        if any(
            add.HasField("transaction") or add.HasField("datastore_transaction") for add in adds
        ):
            return self.outbox.add(queue, adds)
        codes: list[int] = []
        tasks: list[Task | None] = []
        arrived = round(queue.backend.now() * USEC)
        for add in adds:
            try:
                if add.queue_name != adds[0].queue_name:
                    raise ApplicationFailure(
                        Code.INVALID_REQUEST, "the tasks of one add are for different queues"
                    )
                candidate = _task(add, arrived)
                queue._check_add([candidate])
            except Error as exc:
                codes.append(code_of(exc))
                tasks.append(None)
            except ApplicationFailure as failure:
                codes.append(failure.code)
                tasks.append(None)
            else:
                codes.append(SKIPPED)
                tasks.append(candidate)
        response = pb.TaskQueueBulkAddResponse()
        if any(code != SKIPPED for code in codes):
            # As the service: an invalid task stops the whole add, the valid ones are SKIPPED.
            for code in codes:
                response.taskresult.add().result = code
            return bytes(response.SerializeToString())
        seen: set[str] = set()
        to_add: list[Task] = []
        for i, maybe in enumerate(tasks):
            assert maybe is not None
            if maybe.name is not None and maybe.name in seen:
                codes[i] = Code.TASK_ALREADY_EXISTS
                continue
            if maybe.name is not None:
                seen.add(maybe.name)
            to_add.append(maybe)
        outcomes = iter(queue.backend.add(queue.name, to_add))
        added = 0
        for i, (add, added_task) in enumerate(zip(adds, tasks, strict=True)):
            result = response.taskresult.add()
            if codes[i] != SKIPPED:
                result.result = codes[i]
                continue
            outcome = next(outcomes)
            if outcome is not None:
                result.result = code_of(outcome)
                continue
            added += 1
            result.result = OK
            if not add.task_name and added_task is not None and added_task.name is not None:
                result.chosen_task_name = added_task.name.encode("utf-8")
        if added:
            metrics.sent.add(added, metrics.queue_attributes(queue.backend.url, queue.name))
        return bytes(response.SerializeToString())

    # lease

    def _lease(self, request: bytes, deadline: float) -> bytes:
        ask = _parse(pb.TaskQueueQueryAndOwnTasksRequest, request)
        queue = self.queue(ask.queue_name)
        if ask.HasField("tag") and not ask.group_by_tag:
            raise ApplicationFailure(
                Code.INVALID_REQUEST, "Tag specified, but group_by_tag was not."
            )
        tag = _text(ask.tag, Code.INVALID_TAG, "tag") or None
        leased = queue.lease(
            ask.lease_seconds,
            ask.max_tasks,
            tag=tag,
            group_by_tag=ask.group_by_tag,
            deadline=_remaining(deadline),
        )
        response = pb.TaskQueueQueryAndOwnTasksResponse()
        add = response.task.add  # one call per task, not one per field (a third of the time)
        for task in leased:
            if task.tag:
                add(
                    task_name=(task.name or "").encode("utf-8"),
                    eta_usec=round((task.eta_posix or 0.0) * USEC),
                    retry_count=task.retry_count,
                    body=task.payload,
                    tag=task.tag.encode("utf-8"),
                )
            else:
                add(
                    task_name=(task.name or "").encode("utf-8"),
                    eta_usec=round((task.eta_posix or 0.0) * USEC),
                    retry_count=task.retry_count,
                    body=task.payload,
                )
        return bytes(response.SerializeToString())

    def _modify_lease(self, request: bytes, deadline: float) -> bytes:
        ask = _parse(pb.TaskQueueModifyTaskLeaseRequest, request)
        queue = self.queue(ask.queue_name)
        name = _text(ask.task_name, Code.UNKNOWN_TASK, "task name")
        task = Task(b"", name=name)
        # The legacy lease token is the task's ETA, which the SDK sends back.
        task.eta_posix = ask.eta_usec / USEC
        queue.modify_lease(task, ask.lease_seconds)
        response = pb.TaskQueueModifyTaskLeaseResponse()
        response.updated_eta_usec = round((task.eta_posix or 0.0) * USEC)
        return bytes(response.SerializeToString())

    # delete, purge, statistics

    def _delete(self, request: bytes, deadline: float) -> bytes:
        ask = _parse(pb.TaskQueueDeleteRequest, request)
        queue = self.queue(ask.queue_name)
        raws = list(ask.task_name)
        results: list[int] = [Code.UNKNOWN_TASK] * len(raws)
        first: dict[str, int] = {}
        tasks: list[Task] = []
        try:
            # The common case (every name UTF-8, non-empty and given once) in one pass.
            names = [raw.decode("utf-8") for raw in raws]
            if len(set(names)) == len(names) and "" not in names:
                first = {name: i for i, name in enumerate(names)}
                tasks = [Task(b"", name=name) for name in names]
                raws = []
        except (UnicodeDecodeError, Error):
            first, tasks = {}, []  # name by name below: a bad name is only that task's UNKNOWN
        for i, raw in enumerate(raws):
            try:
                name = raw.decode("utf-8")
                if name in first:
                    continue
                first[name] = i
                tasks.append(Task(b"", name=name))
            except (UnicodeDecodeError, Error):
                continue
        if tasks:
            queue.delete(tasks)
        gone: list[str] = []
        for task in tasks:
            if task.name is None:
                continue
            if task.was_deleted:
                results[first[task.name]] = OK
            else:
                gone.append(task.name)
        if gone and isinstance(self.backend, TombstoneBackend):
            # As the service: a task deleted (or purged) before is TOMBSTONED_TASK, where the
            # backend keeps names; a name never used stays UNKNOWN_TASK.
            for name in self.backend.tombstoned(queue.name, gone) or ():
                results[first[name]] = Code.TOMBSTONED_TASK
        response = pb.TaskQueueDeleteResponse()
        response.result.extend(results)
        return bytes(response.SerializeToString())

    def _purge(self, request: bytes, deadline: float) -> bytes:
        ask = _parse(pb.TaskQueuePurgeQueueRequest, request)
        self.queue(ask.queue_name).purge()
        return bytes(pb.TaskQueuePurgeQueueResponse().SerializeToString())

    def _stats(self, request: bytes, deadline: float) -> bytes:
        ask = _parse(pb.TaskQueueFetchQueueStatsRequest, request)
        response = pb.TaskQueueFetchQueueStatsResponse()
        for name in ask.queue_name:
            stats = self.queue(name).stats()
            item = response.queuestats.add()
            item.num_tasks = stats.tasks
            item.oldest_eta_usec = (
                -1 if stats.oldest_eta is None else round(stats.oldest_eta * USEC)
            )
            if stats.executed_last_minute is not None:
                info = item.scanner_info
                info.executed_last_minute = stats.executed_last_minute
                # A required field: -1 (the protocol's "none", as oldest_eta_usec) where the
                # backend counts the last minute only (Cloud Tasks, the bundled API).
                hour = stats.executed_last_hour
                info.executed_last_hour = -1 if hour is None else hour
                info.sampling_duration_seconds = 60.0
                if stats.leased is not None:
                    info.requests_in_flight = stats.leased
        return bytes(response.SerializeToString())


_ADD_DETAIL = {
    Code.TASK_ALREADY_EXISTS: "a task with this name is in the queue",
    Code.TOMBSTONED_TASK: "a task with this name was in the queue (deleted or purged since)",
}


def _transactional(add: Any) -> bool:
    return bool(add.HasField("transaction") or add.HasField("datastore_transaction"))


def _parse(kind: Any, request: bytes) -> Any:
    try:
        return kind.FromString(request)
    except (DecodeError, ValueError) as exc:
        raise RpcFailure(
            RpcError.PARSE_ERROR, f"the request is not a {kind.DESCRIPTOR.name} ({exc})"
        ) from None


def _task(add: Any, arrived: int | None = None) -> Task:
    """The pullqueue Task an add request describes (its checks raise the legacy errors).

    The SDKs send an ETA with every task, an immediate one stamped with the time it was built
    (Python) or added (Go): an ETA up to STAMP_USEC before the add `arrived` (microseconds on
    the backend's clock) is that stamp, and the task is added as compat adds an immediate task,
    due at the add, without an ETA. Kept, the stamps would order every task apart, where the
    tasks of one compat add share their add's moment: on Pub/Sub each lease by the oldest tag
    then drained a shard of its own (docs/bridge.md).
    """
    name = _text(add.task_name, Code.INVALID_TASK_NAME, "task name") or None
    tag = _text(add.tag, Code.INVALID_TAG, "tag") or None if add.HasField("tag") else None
    if add.eta_usec < 0:
        raise ApplicationFailure(Code.INVALID_ETA, "the ETA is before 1970-01-01")
    limit = None
    if add.HasField("retry_parameters") and add.retry_parameters.HasField("retry_limit"):
        limit = add.retry_parameters.retry_limit
    if arrived is not None and arrived - STAMP_USEC < add.eta_usec <= arrived:
        return Task(add.body, name=name, tag=tag, retry_limit=limit)
    try:
        eta = _EPOCH + dt.timedelta(microseconds=add.eta_usec)
    except OverflowError:
        raise ApplicationFailure(Code.INVALID_ETA, "the ETA is out of range") from None
    return Task(add.body, name=name, tag=tag, eta=eta, retry_limit=limit)


def _text(raw: bytes, code: int, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ApplicationFailure(code, f"the {what} is not UTF-8") from None


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise DeadlineExceededError("the call's deadline passed before it was served")
    return left


def _deadline_exceeded(method: str, detail: str = "") -> RpcFailure:
    return RpcFailure(
        RpcError.DEADLINE_EXCEEDED,
        detail or f"taskqueue.{method}: the call's deadline passed before it was served",
    )
