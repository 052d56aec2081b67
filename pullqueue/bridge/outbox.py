"""Transactional adds through the bridge: tasks staged in the app's datastore transaction upstream.

A BulkAdd/Add carrying a transaction is answered at once (tasks named, as the service did) and
kept by its transaction handle; the bridge watches the app's datastore_v3 calls it forwards to
`--upstream`, learns the transaction's entity group from the calls carrying the handle, and just
before forwarding that handle's Commit sends a Put of the staging entities (pullqueue.outbox) with
the same transaction. When the upstream answers the Commit with success the tasks are published
and their staging deleted; a failed Commit or a Rollback forgets them. Needs the App Engine SDK's
datastore messages: pip install 'pullqueue[bridge,appengine]'.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import DecodeError

from pullqueue.adapters.base import Backend
from pullqueue.bridge.codes import OK, SKIPPED, Code, code_of
from pullqueue.bridge.proto import taskqueue_service_pb2 as pb
from pullqueue.bridge.proto.remote_api_pb2 import Request, Response
from pullqueue.bridge.wire import ApplicationFailure
from pullqueue.errors import Error
from pullqueue.outbox.layout import StagedTask, new_task_name
from pullqueue.outbox.publish import publish_committed
from pullqueue.queue import Queue
from pullqueue.task import USEC

logger = logging.getLogger("pullqueue.bridge")

MAX_TASKS_PER_TRANSACTION = 5
MAX_TRANSACTIONAL_REQUEST_BYTES = 2**20
_LEGACY_SIZE_OVERHEAD = 37
"""What the SDK's Task.size adds to a pull task's payload (see pullqueue.compat.taskqueue)."""
_FORGET_SECONDS = 600.0
"""A transaction neither committed nor rolled back this long after its add is forgotten (a
datastore transaction expires long before)."""
_CONCURRENT_TRANSACTION = 2
"""datastore_v3's Error.CONCURRENT_TRANSACTION: the SDKs run the transaction again."""
_MAX_BEGUN = 100_000
"""Transactions begun that are remembered (one ends, or expires upstream, long before)."""
_ANSWER_MARGIN = 0.25
"""Seconds before the call's deadline a Commit is answered while its publish goes on."""
_KEYED = frozenset(("Get", "Put", "Delete", "RunQuery"))
_BAD_REQUEST = 1
"""datastore_v3's Error.BAD_REQUEST: added to DATASTORE_ERROR, the stub's answer past 5 tasks."""

Post = Callable[[bytes], Awaitable[bytes]]
"""Sends a remote_api Request body upstream and returns the Response body."""


@dataclass
class _Pending:
    """One transaction's staged tasks and what the bridge learned of its entity group."""

    tasks: list[StagedTask] = field(default_factory=list)
    since: float = field(default_factory=time.monotonic)


class TransactionalAdds:
    """Staged tasks by transaction, and the datastore_v3 calls that carry them to a commit."""

    def __init__(
        self,
        backend: Backend,
        *,
        upstream: str | None,
        sweep_period: float = 0.0,
        sweep_grace: float = 60.0,
        sweep_lock: float = 60.0,
    ) -> None:
        self.backend = backend
        self.upstream = upstream
        self.enabled = upstream is not None
        self.sweep_period, self.sweep_grace, self.sweep_lock = sweep_period, sweep_grace, sweep_lock
        self.sweeper: Any = None
        """The PeriodicSweeper of the first app seen adding transactionally (with a period)."""
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, int], _Pending] = {}
        self._groups: dict[tuple[str, int], tuple[str, Any, Any]] = {}
        self._begun: dict[int, float] = {}
        """Handles of the transactions begun through this bridge (BeginTransaction answered),
        oldest first: a Commit of another handle may have lost its adds with an earlier bridge."""
        self._settling: set[asyncio.Future[None]] = set()
        """Publishes that outlasted their Commit's deadline, still running."""
        """First keyed call seen per transaction (method, request, response): its group."""

    # the taskqueue side

    def add(self, queue: Queue, adds: list[Any]) -> bytes:
        """Answer a transactional BulkAdd: check, name and keep the tasks; nothing published."""
        if not self.enabled:
            raise ApplicationFailure(
                Code.INVALID_REQUEST,
                "a transactional add is staged in the app's datastore transaction, which the"
                " bridge reaches only through the App Engine API: start it with --upstream"
                " HOST:PORT (and pip install 'pullqueue[appengine]'), or add the tasks after"
                " the transaction commits",
            )
        datastore_pb = _datastore_pb()
        if any(add.HasField("datastore_transaction") for add in adds):
            raise ApplicationFailure(
                Code.INVALID_REQUEST,
                "a Cloud Datastore (v1) transaction cannot be joined by the bridge: add the tasks"
                " after it commits",
            )
        transaction = datastore_pb.Transaction.FromString(adds[0].transaction)
        handle = (transaction.app, transaction.handle)
        if any(add.transaction != adds[0].transaction for add in adds):
            raise ApplicationFailure(
                Code.INVALID_REQUEST, "the tasks of one add are for different transactions"
            )
        from pullqueue.bridge.taskqueue import _task

        size = sum(len(add.body) + _LEGACY_SIZE_OVERHEAD for add in adds)
        if size > MAX_TRANSACTIONAL_REQUEST_BYTES:
            raise ApplicationFailure(
                Code.TRANSACTIONAL_REQUEST_TOO_LARGE,
                f"Transactional request size must be less than {MAX_TRANSACTIONAL_REQUEST_BYTES};"
                f" found {size}",
            )
        codes: list[int] = []
        staged: list[StagedTask] = []
        for add in adds:
            try:
                if add.task_name:
                    raise ApplicationFailure(
                        Code.INVALID_TASK_NAME, "A task bound to a transaction cannot be named."
                    )
                task = _task(add)
                queue._check_add([task])
            except Error as exc:
                codes.append(code_of(exc))
                continue
            except ApplicationFailure as failure:
                codes.append(failure.code)
                continue
            codes.append(SKIPPED)
            eta = None if not add.eta_usec else int(add.eta_usec)
            if eta is not None and eta <= round(time.time() * USEC):
                eta = None
            staged.append(StagedTask(queue.name, new_task_name(), task.payload, task.tag, eta, 0))
        response = pb.TaskQueueBulkAddResponse()
        if any(code != SKIPPED for code in codes):
            for code in codes:
                response.taskresult.add().result = code
            return bytes(response.SerializeToString())
        with self._lock:
            self._prune()
            pending = self._pending.setdefault(handle, _Pending())
            if len(pending.tasks) + len(staged) > MAX_TASKS_PER_TRANSACTION:
                raise ApplicationFailure(
                    Code.DATASTORE_ERROR + _BAD_REQUEST,
                    f"Too many messages, maximum allowed {MAX_TASKS_PER_TRANSACTION}",
                )
            pending.tasks.extend(staged)
            if self.sweeper is None and self.sweep_period > 0:
                self.sweeper = self._start_sweeper(transaction.app)
        for item in staged:
            result = response.taskresult.add()
            result.result = OK
            result.chosen_task_name = item.name.encode("utf-8")
        return bytes(response.SerializeToString())

    def _start_sweeper(self, app: str) -> Any:
        """Sweep the app's outbox through the upstream every sweep_period (the app's id, with
        its partition, comes from its first transactional add)."""
        from pullqueue.outbox.appengine import AppEngineStore
        from pullqueue.outbox.periodic import PeriodicSweeper

        store = AppEngineStore(f"appengine://{self.upstream}?app={app}")
        logger.info(
            "sweeping the outbox of %s through %s every %g s", app, self.upstream, self.sweep_period
        )
        return PeriodicSweeper(
            store,
            self.backend,
            period=self.sweep_period,
            grace=self.sweep_grace,
            lock=self.sweep_lock,
        ).start()

    def close(self) -> None:
        """Stop sweeping."""
        if self.sweeper is not None:
            self.sweeper.stop()

    def _prune(self) -> None:
        old = time.monotonic() - _FORGET_SECONDS
        for key in [key for key, item in self._pending.items() if item.since < old]:
            del self._pending[key]
            self._groups.pop(key, None)
        if len(self._groups) > 10_000:
            self._groups.clear()

    # the datastore side

    async def forward(
        self,
        method: str,
        ticket: str,
        body: bytes,
        request: bytes,
        post: Post,
        deadline: float | None = None,
    ) -> bytes:
        """Forward one datastore_v3 call upstream (post), staging and publishing around a Commit
        of a transaction with tasks; returns the Response body for the app. `deadline` (on the
        monotonic clock) is the call's: a publish still running then is left to finish on its
        own (or to the sweeper) and the Commit answered, since it has committed."""
        if method == "BeginTransaction":
            answer = await post(body)
            handle = _begun_handle(answer)
            if handle is not None:
                with self._lock:
                    self._begun[handle] = time.monotonic()
                    while len(self._begun) > _MAX_BEGUN:
                        del self._begun[next(iter(self._begun))]
            return answer
        if method == "Commit" or method == "Rollback":
            try:
                transaction = _datastore_pb().Transaction.FromString(request)
            except (ApplicationFailure, DecodeError):
                return await post(body)  # no SDK messages (so no transactional add), or garbage
            key = (transaction.app, transaction.handle)
            with self._lock:
                pending = self._pending.pop(key, None)
                group = self._groups.pop(key, None)
                begun_here = self._begun.pop(transaction.handle, None) is not None
            if method == "Commit" and not begun_here:
                # Begun before this bridge started (a restart, or another bridge): its
                # transactional adds, if any, were kept by a bridge that is gone. Committing
                # would write the entities without their tasks, so the transaction is rolled
                # back and the app told to run it again, as on contention.
                with contextlib.suppress(Exception):
                    await post(_request("Rollback", transaction, ticket))
                raise ApplicationFailure(
                    _CONCURRENT_TRANSACTION,
                    "the transaction began before this bridge started (it restarted): the tasks"
                    " it added may be lost, so it is rolled back; run it again",
                )
            if pending is None or method == "Rollback":
                return await post(body)
            return await self._commit(transaction, pending, group, ticket, body, post, deadline)
        if method not in _KEYED:
            return await post(body)
        parsed = _parse_keyed(method, request)
        answer = await post(body)
        if parsed is not None:
            key, message = parsed
            with self._lock:
                if len(self._groups) > 10_000:
                    self._groups.clear()  # transactions that never ended (their app died)
                if key not in self._groups and _keys_of(method, message):
                    self._groups[key] = (method, message, _response_of(method, answer))
        return answer

    async def _commit(
        self,
        transaction: Any,
        pending: _Pending,
        group: tuple[str, Any, Any] | None,
        ticket: str,
        body: bytes,
        post: Post,
        deadline: float | None,
    ) -> bytes:
        from pullqueue.outbox.appengine import entity_pbs, root_of

        datastore_pb = _datastore_pb()
        root = None
        if group is not None:
            method, message, response = group
            first = _keys_of(method, message)[0]
            element = first.path.element
            if len(element) == 1 and not (element[0].id or element[0].name) and response:
                first = response.key[0]
            root = root_of(first)
        now = round(time.time() * USEC)
        tasks = [_restaged(item, now) for item in pending.tasks]
        put = datastore_pb.PutRequest()
        put.transaction.CopyFrom(transaction)
        for entity in entity_pbs(tasks, transaction.app, root):
            put.entity.add().CopyFrom(entity)
        staged = Response.FromString(await post(_request("Put", put, ticket)))
        if staged.HasField("application_error") or staged.HasField("rpc_error"):
            # Nothing is committed: the app sees its Commit fail (and retries, as on contention).
            return bytes(staged.SerializeToString())
        committed = await post(body)
        answer = Response.FromString(committed)
        if answer.HasField("application_error") or answer.HasField("rpc_error"):
            return committed
        keys = [entity.key for entity in put.entity]
        settling = asyncio.ensure_future(self._settle(tasks, keys, ticket, post))
        if deadline is None:
            await settling
            return committed
        # The app's call has a deadline and its Commit is done: a publish that outlasts it (a
        # slow Pub/Sub or registry) goes on here, and the staging stays for the sweeper if it
        # fails, rather than the app seeing a committed transaction's Commit fail.
        left = deadline - time.monotonic() - _ANSWER_MARGIN
        try:
            await asyncio.wait_for(asyncio.shield(settling), max(left, 0.0))
        except asyncio.TimeoutError:
            self._settling.add(settling)
            settling.add_done_callback(self._settling.discard)
            logger.warning(
                "%d task(s) committed, their publish outlasts the Commit's deadline: answered"
                " the Commit, the publish goes on (else the sweeper publishes them)",
                len(tasks),
            )
        return committed

    async def _settle(
        self, tasks: list[StagedTask], keys: list[Any], ticket: str, post: Post
    ) -> None:
        """Publish a committed transaction's tasks, then delete the staging of those published."""
        datastore_pb = _datastore_pb()
        settled = await asyncio.get_running_loop().run_in_executor(
            None, publish_committed, self.backend, tasks
        )
        done = [key for key in keys if key.path.element[-1].name in settled]
        if not done:
            return
        delete = datastore_pb.DeleteRequest()
        for key in done:
            delete.key.add().CopyFrom(key)
        try:
            gone = Response.FromString(await post(_request("Delete", delete, ticket)))
        except Exception as exc:
            logger.warning("published, staging not deleted (%s); the sweeper deletes it", exc)
            return
        if gone.HasField("application_error") or gone.HasField("rpc_error"):
            logger.warning("published, staging not deleted; the sweeper deletes it")


def _begun_handle(answer: bytes) -> int | None:
    """The handle of the transaction a BeginTransaction's answer carries, if it succeeded."""
    try:
        response = Response.FromString(answer)
        if not response.HasField("response"):
            return None
        return int(_datastore_pb().Transaction.FromString(response.response).handle)
    except Exception:
        return None


def _restaged(item: StagedTask, now: int) -> StagedTask:
    return StagedTask(item.queue, item.name, item.payload, item.tag, item.eta_usec, now)


def _request(method: str, message: Any, ticket: str) -> bytes:
    return bytes(
        Request(
            service_name="datastore_v3",
            method=method,
            request=message.SerializeToString(),
            request_id=ticket,
        ).SerializeToString()
    )


def _datastore_pb() -> Any:
    try:
        from google.appengine.datastore import datastore_pb
    except ImportError as exc:
        raise ApplicationFailure(
            Code.INVALID_REQUEST,
            "transactional adds through the bridge need the App Engine SDK's datastore messages:"
            f" pip install 'pullqueue[bridge,appengine]' ({exc})",
        ) from None
    return datastore_pb


_REQUESTS = {
    "Get": "GetRequest",
    "Put": "PutRequest",
    "Delete": "DeleteRequest",
    "RunQuery": "Query",
}


def _parse_keyed(method: str, request: bytes) -> tuple[tuple[str, int], Any] | None:
    """(transaction key, parsed request) of a call inside a transaction, else None (also when
    the SDK's messages are not installed: then no transactional add was accepted either)."""
    try:
        datastore_pb = _datastore_pb()
    except ApplicationFailure:
        return None
    try:
        message = getattr(datastore_pb, _REQUESTS[method]).FromString(request)
    except Exception:
        return None
    if not message.HasField("transaction"):
        return None
    return (message.transaction.app, message.transaction.handle), message


def _keys_of(method: str, message: Any) -> list[Any]:
    if method == "Put":
        return [entity.key for entity in message.entity]
    if method == "RunQuery":
        return [message.ancestor] if message.HasField("ancestor") else []
    return list(message.key)


def _response_of(method: str, answer: bytes) -> Any:
    if method != "Put":
        return None
    try:
        response = Response.FromString(answer)
        if not response.HasField("response"):
            return None
        return _datastore_pb().PutResponse.FromString(response.response)
    except Exception:
        return None
