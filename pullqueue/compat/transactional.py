"""Transactional adds of the compat layer: tasks staged in the app's ndb or db transaction.

The tasks are written as outbox staging entities (pullqueue.outbox) in the transaction's own
entity group just before its Commit, published when the Commit succeeds, and swept if a crash
comes between; so a task exists exactly when its transaction committed (docs/semantics.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.abc
import importlib.machinery
import logging
import sys
import time
from typing import Any

from pullqueue.adapters.base import Backend
from pullqueue.errors import BadTransactionStateError
from pullqueue.outbox.appengine import entity_pbs, root_of
from pullqueue.outbox.layout import StagedTask
from pullqueue.outbox.publish import publish_committed

logger = logging.getLogger("pullqueue.outbox")

_KEYED = frozenset(("Get", "Put", "Delete", "RunQuery"))
"""datastore_v3 calls whose keys say which entity group a transaction is in."""


def transaction_connection() -> Any:
    """The open transaction's datastore connection (ndb's or db's), or None outside one.

    ndb makes its transaction's connection the datastore API's current one, so one lookup
    serves both APIs of the bundled SDK.
    """
    datastore = sys.modules.get("google.appengine.api.datastore")
    if datastore is None or not datastore.IsInTransaction():
        return None
    install()
    connection = datastore._GetConnection()
    from google.appengine.datastore import datastore_rpc

    if connection._api_version != datastore_rpc._DATASTORE_V3:
        raise BadTransactionStateError(
            "transactional adds join App Engine datastore (datastore_v3) transactions; this one"
            " goes to the Cloud Datastore API: add the tasks after it commits"
        )
    return connection


def stage(connection: Any, backend: Backend, tasks: list[StagedTask]) -> None:
    """Keep tasks to stage in connection's transaction at its commit, and publish after it."""
    outbox: list[tuple[Backend, StagedTask]] | None = connection.__dict__.get("_pullqueue_outbox")
    if outbox is None:
        outbox = connection.__dict__["_pullqueue_outbox"] = []
        callbacks = connection.__dict__.setdefault("_on_commit_callbacks", [])
        callbacks.append(lambda: _publish_after_commit(connection))
    outbox.extend((backend, task) for task in tasks)


_SDK_MODULE = "google.appengine.datastore.datastore_rpc"


class _InstallOnImport(importlib.abc.MetaPathFinder):
    """Runs install() as soon as the SDK's datastore_rpc is imported, so that every transaction
    of the process has its entity group noted (and a process without the SDK never loads it)."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != _SDK_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        loader = None if spec is None else spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        execute = loader.exec_module

        def exec_then_install(module: Any) -> None:
            execute(module)
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(self)
            install()

        loader.exec_module = exec_then_install  # type: ignore[method-assign]
        return spec


def install_when_sdk_loads() -> None:
    """install() now if the SDK datastore is loaded, else once it is (pullqueue.compat calls it)."""
    if _SDK_MODULE in sys.modules:
        install()
    elif not any(isinstance(finder, _InstallOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _InstallOnImport())


def install() -> None:
    """Teach the SDK's TransactionalConnection to note its entity group and stage at commit.

    Done once a process, when pullqueue.compat.taskqueue is imported after the SDK or at the
    first transactional add; a connection's outbox is staged only where a task was added.
    """
    from google.appengine.datastore import datastore_rpc

    cls = datastore_rpc.TransactionalConnection
    if cls.__dict__.get("_pullqueue_installed"):
        return
    make_rpc_call = cls._make_rpc_call
    async_commit = cls.async_commit

    def noting_rpc_call(
        self: Any, config: Any, method: str, request: Any, *args: Any, **kw: Any
    ) -> Any:
        rpc = make_rpc_call(self, config, method, request, *args, **kw)
        if method in _KEYED and "_pullqueue_first" not in self.__dict__:
            response = args[0] if args else kw.get("response")
            if _keys_of(method, request):
                self.__dict__["_pullqueue_first"] = (method, request, response)
        return rpc

    def staging_commit(self: Any, config: Any) -> Any:
        outbox = self.__dict__.get("_pullqueue_outbox")
        if outbox:
            _stage_now(self, outbox)
        return async_commit(self, config)

    cls._make_rpc_call = noting_rpc_call
    cls.async_commit = staging_commit
    cls._pullqueue_installed = True


def _keys_of(method: str, request: Any) -> list[Any]:
    if method == "Put":
        return [entity.key for entity in request.entity]
    if method == "RunQuery":
        return [request.ancestor] if request.HasField("ancestor") else []
    return list(request.key)


def _group(connection: Any) -> Any | None:
    """The root Reference of the entity group the transaction touched first, or None."""
    first = connection.__dict__.get("_pullqueue_first")
    if first is None:
        return None
    method, request, response = first
    key = _keys_of(method, request)[0]
    if len(key.path.element) == 1 and not (key.path.element[0].id or key.path.element[0].name):
        key = response.key[0]  # a new root entity: its id came with the Put's answer
    return root_of(key)


def _stage_now(connection: Any, outbox: list[tuple[Backend, StagedTask]]) -> None:
    """Put the outbox's staging entities in the transaction, in its own entity group."""
    from google.appengine.datastore import datastore_pb

    connection.wait_for_all_pending_rpcs()
    root = _group(connection)
    app = connection.transaction.app
    now = round(time.time() * 1_000_000)
    request = datastore_pb.PutRequest()
    for i, (backend, staged) in enumerate(outbox):
        outbox[i] = (backend, dataclasses.replace(staged, staged_usec=now))
    for entity in entity_pbs([staged for _, staged in outbox], app, root):
        request.entity.add().CopyFrom(entity)
    connection._set_request_transaction(request)
    rpc = connection._make_rpc_call(None, "Put", request, datastore_pb.PutResponse())
    connection.check_rpc_success(rpc)
    connection.__dict__["_pullqueue_keys"] = [entity.key for entity in request.entity]


def _publish_after_commit(connection: Any) -> None:
    """Publish the committed transaction's tasks and delete their staging; a failure leaves them
    staged for the sweeper (logged, never raised: the transaction has committed)."""
    from google.appengine.datastore import datastore_rpc

    outbox: list[tuple[Backend, StagedTask]] = connection.__dict__["_pullqueue_outbox"]
    by_backend: dict[int, tuple[Backend, list[StagedTask]]] = {}
    for backend, staged in outbox:
        by_backend.setdefault(id(backend), (backend, []))[1].append(staged)
    settled: set[str] = set()
    for backend, items in by_backend.values():
        settled |= publish_committed(backend, items)
    keys = connection.__dict__.get("_pullqueue_keys", [])
    done = [key for key in keys if key.path.element[-1].name in settled]
    if not done:
        return
    try:
        datastore_rpc.Connection().delete(done)
    except Exception as exc:
        logger.warning("published, staging not deleted (%s); the sweeper deletes it", exc)
