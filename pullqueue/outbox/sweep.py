"""The sweeper: one pass publishes the tasks a crash left staged, then deletes their staging.

A task is swept once it has been staged longer than the grace period (its transaction's own
post-commit publish normally settles it within milliseconds). A staged task's transaction has
committed: an uncommitted transaction's writes are invisible, so nothing of a rollback is swept.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pullqueue.adapters.base import Backend
from pullqueue.outbox.layout import StagedTask
from pullqueue.outbox.publish import publish

DEFAULT_GRACE_SECONDS = 60.0
"""How long a staged task is left to its own post-commit publish before a sweep publishes it."""
DEFAULT_PERIOD_SECONDS = 300.0
"""The period of `pullqueue work` and `pullqueue bridge`'s own sweeps."""
BATCH = 100
"""Staged tasks published and deleted per round of a pass."""
LOCK_SECONDS = 60.0
"""How long a sweeper's lock on a staged task keeps other sweepers off it."""


class OutboxStore(Protocol):
    """The datastore a sweeper reads: staged tasks older than a time, and their deletion."""

    url: str

    def staged(self, before_usec: int, limit: int) -> list[tuple[Any, StagedTask]]:
        """Up to `limit` staged tasks staged before `before_usec` (POSIX microseconds), each with
        its key (as the store's API names it), across every namespace."""
        ...

    def remove(self, keys: Sequence[Any]) -> None:
        """Delete staging entities (outside any transaction); a missing one is no error."""
        ...

    def lock(self, key: Any, until_usec: int, now_usec: int) -> bool:
        """In one transaction: set the entity's sweep_until_usec to until_usec unless another
        sweeper's lock runs past now_usec; False then, or when the entity is gone."""
        ...


@dataclass
class SweepReport:
    """What one pass did: tasks found staged past the grace period, published now (republished:
    of those, names a registry held live), found already published or deleted (tombstoned),
    failed (left staged), skipped (another sweeper held them, or they were settled meanwhile)."""

    found: int = 0
    published: int = 0
    already: int = 0
    failed: int = 0
    skipped: int = 0
    republished: int = 0
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values (`pullqueue sweep --json`)."""
        return {
            "found": self.found,
            "published": self.published,
            "already_published": self.already,
            "failed": self.failed,
            "skipped": self.skipped,
            "republished": self.republished,
            "errors": self.errors[:20],
            "seconds": round(self.seconds, 3),
        }


def sweep(
    store: OutboxStore,
    backend: Backend,
    *,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    max_tasks: int = 10_000,
    lock_seconds: float = LOCK_SECONDS,
    clock: Callable[[], float] = time.time,
) -> SweepReport:
    """One pass: publish every task staged more than grace_seconds ago (up to max_tasks), delete
    the staging of those settled. A failed publish leaves its task staged for the next pass.

    Each task is locked for lock_seconds first (longer than a pass takes to publish it): a
    sweeper killed holding it delays its task by that much."""
    started = time.monotonic()
    report = SweepReport()
    before = round((clock() - grace_seconds) * 1_000_000)
    found = store.staged(before, max_tasks)
    report.found = len(found)
    registry = getattr(backend, "names", None)
    for start in range(0, len(found), BATCH):
        now = round(clock() * 1_000_000)
        until = now + round(lock_seconds * 1_000_000)
        chunk = [(key, item) for key, item in found[start : start + BATCH]]
        chunk = [(key, item) for key, item in chunk if store.lock(key, until, now)]
        report.skipped += len(found[start : start + BATCH]) - len(chunk)
        keys = {item.name: key for key, item in chunk}
        outcome = publish(backend, [item for _, item in chunk])
        if registry is not None and outcome.already:
            # A live name is all a registry knows of a publisher killed after its claim: the
            # message may be missing, so it is published again (docs/semantics.md, duplicates).
            claimed = [item for item in outcome.already if _live(registry, item)]
            for item in claimed:
                registry.release(item.queue, [item.name])
            again = publish(backend, claimed)
            outcome.already = [item for item in outcome.already if item not in claimed]
            outcome.already += again.already
            outcome.published += again.published
            outcome.failed += again.failed
            report.republished += len(again.published)
        report.published += len(outcome.published)
        report.already += len(outcome.already)
        report.failed += len(outcome.failed)
        report.errors.extend(f"{item.queue}/{item.name}: {exc}" for item, exc in outcome.failed)
        settled = [keys[item.name] for item in outcome.settled]
        if settled:
            store.remove(settled)
    report.seconds = time.monotonic() - started
    return report


def _live(registry: Any, item: StagedTask) -> bool:
    """Whether the registry holds the name live (not tombstoned: a deleted task was delivered)."""
    return item.name not in registry.tombstoned(item.queue, [item.name])
