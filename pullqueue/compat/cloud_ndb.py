"""Transactional adds in google-cloud-ndb transactions (Cloud Datastore, Firestore Datastore mode).

The tasks are put in the transaction as outbox staging entities (pullqueue.outbox.layout): Cloud
Datastore transactions are not limited to one entity group, so they are staged at the add, as root
entities keyed by the task's name. They are published when the commit succeeds (ndb's
call_on_commit) and their staging deleted; the sweeper (`datastore://` store) takes what a crash
left.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any

from pullqueue.adapters.base import Backend
from pullqueue.outbox import layout
from pullqueue.outbox.layout import StagedTask
from pullqueue.outbox.publish import publish_committed

logger = logging.getLogger("pullqueue.outbox")

_counts: dict[bytes, int] = {}
"""Tasks added so far per open transaction (by its id), for the 5-task limit."""
_lock = threading.Lock()
_model: Any = None
_clients: dict[tuple[str, str | None], Any] = {}


def transaction_context() -> Any:
    """The google-cloud-ndb context of the open transaction, or None (not loaded, or outside)."""
    if "google.cloud.ndb" not in sys.modules:
        return None
    from google.cloud.ndb import context as context_module

    context = context_module.get_context(False)
    if context is None or context.transaction is None:
        return None
    return context


def tasks_so_far(context: Any) -> int:
    """Tasks this transaction has added so far."""
    with _lock:
        return _counts.get(context.transaction, 0)


def stage(context: Any, backend: Backend, tasks: list[StagedTask]) -> None:
    """Put the tasks in the transaction and publish them once it commits."""
    from google.cloud import ndb

    model = _staging_model()
    now = round(time.time() * 1_000_000)
    entities = []
    for item in tasks:
        entity = model(id=item.name, queue=item.queue, payload=item.payload, staged_usec=now)
        entity.layout = layout.LAYOUT
        if item.tag is not None:
            entity.tag = item.tag
        if item.eta_usec is not None:
            entity.eta_usec = item.eta_usec
        entities.append(entity)
    keys = ndb.put_multi(entities)
    transaction = context.transaction
    with _lock:
        if len(_counts) > 10_000:
            _counts.clear()
        _counts[transaction] = _counts.get(transaction, 0) + len(tasks)
    staged = [StagedTask(i.queue, i.name, i.payload, i.tag, i.eta_usec, now) for i in tasks]
    context.call_on_commit(lambda: _publish_after_commit(context, backend, staged, keys))


def _publish_after_commit(
    context: Any, backend: Backend, staged: list[StagedTask], keys: list[Any]
) -> None:
    """Publish a committed transaction's tasks and delete their staging (a failure is logged and
    left to the sweeper, never raised: the transaction has committed)."""
    with _lock:
        _counts.pop(context.transaction, None)
    settled = publish_committed(backend, staged)
    done = [key for key in keys if key.id() in settled]
    if not done:
        return
    try:
        client = _datastore_client(
            context.client.project, getattr(context.client, "database", None)
        )
        client.delete_multi(
            [client.key(layout.KIND, key.id(), namespace=key.namespace() or None) for key in done]
        )
    except Exception as exc:
        logger.warning("published, staging not deleted (%s); the sweeper deletes it", exc)


def _datastore_client(project: str, database: str | None) -> Any:
    from google.cloud import datastore

    client = _clients.get((project, database))
    if client is None:
        options = {"database": database} if database else {}
        client = datastore.Client(project=project, **options)  # type: ignore[no-untyped-call]
        _clients[(project, database)] = client
    return client


def _staging_model() -> Any:
    """The google-cloud-ndb model of the staging kind (made once, when first needed)."""
    global _model
    if _model is None:
        from google.cloud import ndb

        class PendingTask(ndb.Model):  # type: ignore[misc]
            queue = ndb.TextProperty()
            payload = ndb.BlobProperty()
            tag = ndb.TextProperty()
            eta_usec = ndb.IntegerProperty(indexed=False)
            staged_usec = ndb.IntegerProperty()
            layout = ndb.IntegerProperty(indexed=False)

            @classmethod
            def _get_kind(cls) -> str:
                return layout.KIND

        _model = PendingTask
    return _model
