"""The staging entity's kind and properties: the outbox's wire format in the app's datastore.

Stable and documented (docs/semantics.md, "The staging entity") so that a sweeper in any language
can read what a transactional add staged: one entity per task, keyed by the task's name.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pullqueue.task import Task

KIND = "_PullQueuePendingTask"
"""The staging kind. Its key name is the task's name; its parent is the root of the entity group
the transaction wrote (none when the transaction touched no entity)."""

LAYOUT = 1
"""The `layout` property's value for this layout; a reader skips an entity of a later one."""

QUEUE, PAYLOAD, TAG, ETA_USEC, STAGED_USEC, LAYOUT_PROPERTY, SWEEP_UNTIL_USEC = (
    "queue",
    "payload",
    "tag",
    "eta_usec",
    "staged_usec",
    "layout",
    "sweep_until_usec",
)
"""Property names. Only `staged_usec` is indexed (the sweeper's filter); `sweep_until_usec` is
written by a sweeper that publishes the task (its lock, so that two sweepers publish it once)."""

MAX_ENTITY_BYTES = 1_048_572
"""Cloud Datastore's limit on one entity: a staged task must fit in it."""
_ENTITY_OVERHEAD = 1024
"""Bytes kept for the key (its entity-group path included) and the other properties."""
MAX_STAGED_BYTES = MAX_ENTITY_BYTES - _ENTITY_OVERHEAD
"""The largest payload plus tag a transactional task may carry (just under the legacy 1 MiB)."""

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def new_task_name() -> str:
    """A name for a transactional task (they arrive unnamed; the service chose their names)."""
    return "tx-" + uuid.uuid4().hex


@dataclass(frozen=True)
class StagedTask:
    """One task as staged: its queue, name (the staging key's name), payload, tag and ETA."""

    queue: str
    name: str
    payload: bytes
    tag: str | None
    eta_usec: int | None
    staged_usec: int

    def properties(self) -> dict[str, Any]:
        """The entity's properties (absent tag or ETA: not written)."""
        values: dict[str, Any] = {
            QUEUE: self.queue,
            PAYLOAD: self.payload,
            STAGED_USEC: self.staged_usec,
            LAYOUT_PROPERTY: LAYOUT,
        }
        if self.tag is not None:
            values[TAG] = self.tag
        if self.eta_usec is not None:
            values[ETA_USEC] = self.eta_usec
        return values

    @classmethod
    def from_properties(cls, name: str, values: Mapping[str, Any]) -> StagedTask | None:
        """The task an entity named `name` stages, or None for an entity of a later layout."""
        if int(values.get(LAYOUT_PROPERTY, LAYOUT)) != LAYOUT:
            return None
        tag = values.get(TAG)
        eta = values.get(ETA_USEC)
        payload = values.get(PAYLOAD) or b""
        return cls(
            queue=str(values[QUEUE]),
            name=name,
            payload=payload.encode("utf-8") if isinstance(payload, str) else bytes(payload),
            tag=None if tag is None else str(tag),
            eta_usec=None if eta is None else int(eta),
            staged_usec=int(values[STAGED_USEC]),
        )

    def task(self, *, named: bool = True) -> Task:
        """The pullqueue Task to publish (named, so a second publish is a no-op with a registry)."""
        eta = None
        if self.eta_usec is not None:
            eta = _EPOCH + dt.timedelta(microseconds=self.eta_usec)
        return Task(self.payload, name=self.name if named else None, tag=self.tag, eta=eta)
