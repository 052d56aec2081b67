"""Publishing staged tasks: one add per queue, a task already there counted as published.

The staged task's name is its identity, so a repeated publish (a sweeper racing the post-commit
publish, or a retry after a crash) is refused by the queue as a duplicate and changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from pullqueue.adapters.base import Backend
from pullqueue.errors import Error, TaskAlreadyExistsError, TombstonedTaskError
from pullqueue.outbox.layout import StagedTask

logger = logging.getLogger(__name__)


@dataclass
class Published:
    """What one publish did: tasks published now, tasks found already there, and failures."""

    published: list[StagedTask] = field(default_factory=list)
    already: list[StagedTask] = field(default_factory=list)
    failed: list[tuple[StagedTask, Exception]] = field(default_factory=list)
    live: list[StagedTask] = field(default_factory=list)
    """Of `already`, those refused as existing (not tombstoned): with a name registry, the name
    may be claimed by a publisher killed before Pub/Sub took the message."""

    @property
    def settled(self) -> list[StagedTask]:
        """Tasks that are in their queue (or were, and were deleted): their staging can go."""
        return self.published + self.already


def publish(backend: Backend, staged: Sequence[StagedTask]) -> Published:
    """Add each staged task to its queue on backend, named as staged; never raises for a task.

    A task the queue refuses as existing or tombstoned was published before (by this outbox:
    its name is random and staged nowhere else). A queue's failure leaves its tasks staged for
    the sweeper.
    """
    result = Published()
    # On Pub/Sub without a registry a named add is refused; the staged names are random, so
    # the tasks go unnamed there (their name is chosen at the publish: docs/semantics.md).
    unnamed = getattr(backend, "names", False) is None and not getattr(
        backend, "accept_duplicate_names", True
    )
    by_queue: dict[str, list[StagedTask]] = {}
    for item in staged:
        by_queue.setdefault(item.queue, []).append(item)
    for queue, items in by_queue.items():
        try:
            outcomes: Sequence[Error | None] = backend.add(
                queue, [item.task(named=not unnamed) for item in items]
            )
        except Exception as exc:
            result.failed.extend((item, exc) for item in items)
            continue
        for item, outcome in zip(items, outcomes, strict=True):
            if outcome is None:
                result.published.append(item)
            elif isinstance(outcome, TaskAlreadyExistsError | TombstonedTaskError):
                result.already.append(item)
                if isinstance(outcome, TaskAlreadyExistsError):
                    result.live.append(item)
            else:
                result.failed.append((item, outcome))
    return result


def publish_committed(backend: Backend, staged: Sequence[StagedTask]) -> set[str]:
    """Publish a committed transaction's tasks (`publish`), log each failure as left to the
    sweeper, and answer the names settled: their staging can be deleted.

    With a name registry (Pub/Sub), a name found held live is not settled: a sweeper claimed
    it (this publish came after the grace period), and may have been killed between its claim
    and its publish; its staging stays for the sweeper, which publishes such a task again
    (sweep.py). Seen as committed tasks lost when a slow post-commit publish met a sweeper
    killed mid-publish (tests/outbox/test_crash.py). Where an add is atomic (memory://, the
    legacy queue) an existing name is a published task."""
    result = publish(backend, staged)
    for item, exc in result.failed:
        logger.warning(
            "queue %r, task %r: committed, publish failed (%s); the sweeper publishes it",
            item.queue,
            item.name,
            exc,
        )
    settled = result.settled
    if getattr(backend, "names", None) is not None and result.live:
        for item in result.live:
            logger.info(
                "queue %r, task %r: committed, its name already claimed (a sweeper publishes"
                " it); left staged for the sweeper",
                item.queue,
                item.name,
            )
        settled = [item for item in settled if item not in result.live]
    return {item.name for item in settled}
