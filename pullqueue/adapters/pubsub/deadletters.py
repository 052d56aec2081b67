"""A queue's dead letters on Pub/Sub: list them with why they died, put them back, or purge them.

Redrive publishes a copy of each dead letter to the queue topic, then acknowledges the dead
letter. Pub/Sub cannot do both at once, so while a redrive runs, a subscription of its own on the
queue topic (`<queue>-redrive`, filter `attributes:redrive_of`) keeps every copy it published:
a run killed between the two steps leaves the copy there, and the next run acknowledges the dead
letter without publishing it again. Nothing is lost and nothing is published twice.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from google.api_core import exceptions as gexc

from pullqueue.adapters.pubsub.backend import PubSubBackend
from pullqueue.adapters.pubsub.layout import ATTR_ETA
from pullqueue.adapters.pubsub.peek import give_back, pull_all
from pullqueue.adapters.pubsub.provision import DEAD_LETTER_ACK_DEADLINE
from pullqueue.adapters.pubsub.wire import (
    ATTR_LAST_ERROR,
    ATTR_SET_ASIDE,
    SOURCE_DELIVERIES,
    SOURCE_PUBLISH_TIME,
    SOURCE_SUBSCRIPTION,
    Delivery,
    PubsubMessagePb,
    format_eta,
    parse_eta,
)
from pullqueue.errors import Error

log = logging.getLogger(__name__)

ATTR_REDRIVE_OF = "redrive_of"
"""On a task put back from the dead letters: the message id of the dead letter it copies."""
_PUBSUB_PREFIX = "CloudPubSubDeadLetter"
REDRIVE_FILTER = f"attributes:{ATTR_REDRIVE_OF}"
SETTLE_MARGIN = 5.0
"""Seconds past a dead letter's ack deadline after which a killed run's hold is surely over."""


@dataclass(frozen=True)
class DeadLetter:
    """One dead letter, as a listing found it."""

    delivery: Delivery

    @property
    def attempts(self) -> int | None:
        """Deliveries the task had before Pub/Sub set it aside (None when not recorded)."""
        text = self.delivery.attributes.get(SOURCE_DELIVERIES, "")
        return int(text) if text.isdigit() else None

    @property
    def source_subscription(self) -> str | None:
        return self.delivery.attributes.get(SOURCE_SUBSCRIPTION)

    @property
    def first_published(self) -> float | None:
        """When the task was first published to the queue topic."""
        text = self.delivery.attributes.get(SOURCE_PUBLISH_TIME)
        return parse_eta(text) if text else None

    @property
    def dead_lettered_at(self) -> float:
        return self.delivery.published

    @property
    def last_error(self) -> str | None:
        """Why it died, where recorded: the handler's last error, or why a worker set it aside."""
        attributes = self.delivery.attributes
        return attributes.get(ATTR_LAST_ERROR) or attributes.get(ATTR_SET_ASIDE)


@dataclass
class Redrive:
    """What a redrive did."""

    redriven: int = 0
    """Dead letters published back to the queue by this run."""
    resumed: int = 0
    """Dead letters a killed earlier run had already published back: acknowledged only."""
    unresolved: int = 0
    """Copies whose dead letter could not be found to acknowledge (limit or tag left it)."""


def _paths(backend: PubSubBackend, queue: str) -> tuple[str, str, str]:
    topology = backend.topology(queue)
    layout = topology.layout
    return (
        topology.topic,
        backend.rpc.subscription_path(layout.dead_letter_subscription_id),
        backend.rpc.subscription_path(layout.redrive_subscription_id),
    )


def _of_tag(tag: str | None) -> Callable[[Delivery], bool]:
    return lambda delivery: tag is None or delivery.tag == tag


def list_dead_letters(
    backend: PubSubBackend, queue: str, *, tag: str | None, limit: int
) -> list[DeadLetter]:
    """Up to `limit` dead letters (of `tag`), oldest first; each stays where it was."""
    _, dead, _ = _paths(backend, queue)
    kept, others = pull_all(backend, queue, dead, limit, _of_tag(tag))
    give_back(backend, queue, None, kept + others)
    unique = {d.message_id: d for d in kept}
    return sorted(
        (DeadLetter(d) for d in unique.values()), key=lambda x: (x.delivery.order, x.delivery.name)
    )


def purge_dead_letters(backend: PubSubBackend, queue: str, *, tag: str | None, limit: int) -> int:
    """Delete up to `limit` dead letters (of `tag`); how many were deleted."""
    _, dead, _ = _paths(backend, queue)
    purged = 0
    while purged < limit:
        kept, others = pull_all(backend, queue, dead, min(limit - purged, 1000), _of_tag(tag))
        give_back(backend, queue, None, others)
        if not kept:
            return purged
        backend.rpc.ack(dead, [d.ack_id for d in kept], queue=queue)
        purged += len({d.message_id for d in kept})
    return purged


def _copy(delivery: Delivery) -> object:
    """The task a dead letter holds, as published to the queue: same data, name, tag and ETA
    (the original publish time when it had none, so it keeps its place), marked redrive_of."""
    attributes = {
        key: value
        for key, value in delivery.attributes.items()
        if not key.startswith(_PUBSUB_PREFIX) and key not in (ATTR_LAST_ERROR, ATTR_SET_ASIDE)
    }
    if ATTR_ETA not in attributes:
        first = DeadLetter(delivery).first_published
        attributes[ATTR_ETA] = format_eta(first if first is not None else delivery.published)
    attributes[ATTR_REDRIVE_OF] = delivery.message_id
    return PubsubMessagePb(data=delivery.payload, attributes=attributes)


def _ensure_audit(backend: PubSubBackend, queue: str, topic: str, audit: str) -> bool:
    """Create the redrive subscription; False when it existed (a run was cut short)."""

    def create(timeout: float) -> bool:
        try:
            backend.rpc.subscriber.create_subscription(
                request={
                    "name": audit,
                    "topic": topic,
                    "filter": REDRIVE_FILTER,
                    "ack_deadline_seconds": 60,
                },
                timeout=timeout,
            )
        except gexc.AlreadyExists:
            return False
        return True

    return backend.rpc.call(create, queue=queue, resource=audit)


def _drop_audit(backend: PubSubBackend, queue: str, audit: str) -> None:
    def delete(timeout: float) -> None:
        with contextlib.suppress(gexc.NotFound):
            backend.rpc.subscriber.delete_subscription(
                request={"subscription": audit}, timeout=timeout
            )

    backend.rpc.call(delete, queue=queue, resource=audit)


def _copies(
    backend: PubSubBackend, queue: str, audit: str
) -> tuple[dict[str, float], list[Delivery]]:
    """(dead letter id -> when its copy was published, the held audit deliveries)."""
    kept, others = pull_all(
        backend, queue, audit, 1_000_000, lambda d: ATTR_REDRIVE_OF in d.attributes
    )
    if others:
        # Only on an emulator, which ignores the filter: not copies, nothing to keep.
        backend.rpc.ack(audit, [d.ack_id for d in others], queue=queue)
    copies: dict[str, float] = {}
    for delivery in kept:
        copies[delivery.attributes[ATTR_REDRIVE_OF]] = delivery.published
    return copies, kept


def redrive(
    backend: PubSubBackend,
    queue: str,
    *,
    tag: str | None,
    limit: int,
    batch: int = 100,
    on_batch: Callable[[Redrive], None] | None = None,
) -> Redrive:
    """Put up to `limit` dead letters (of `tag`) back on the queue, keeping name, tag and ETA.

    Safe to kill at any point and run again: see the module docstring.
    """
    topic, dead, audit = _paths(backend, queue)
    copies: dict[str, float] = {}
    if not _ensure_audit(backend, queue, topic, audit):
        copies, held = _copies(backend, queue, audit)
        give_back(backend, queue, None, held)
    report = Redrive()
    done: set[str] = set()
    # A copy from a killed run: its dead letter was pulled before the copy was published, so it
    # is visible again (or was acknowledged) once its ack deadline has passed.
    settle_by = max(
        (at + DEAD_LETTER_ACK_DEADLINE + SETTLE_MARGIN for at in copies.values()), default=0.0
    )
    while report.redriven + report.resumed < limit:
        want = min(batch, limit - report.redriven - report.resumed)
        kept, others = pull_all(backend, queue, dead, want, _of_tag(tag))
        give_back(backend, queue, None, others)
        if not kept:
            if time.time() >= settle_by or copies.keys() <= done:
                break
            time.sleep(1.0)
            continue
        unique = list({d.message_id: d for d in kept}.values())
        fresh = [d for d in unique if d.message_id not in copies and d.message_id not in done]
        try:
            if fresh:
                backend.rpc.publish(topic, [_copy(d) for d in fresh], queue=queue)
            backend.rpc.ack(dead, [d.ack_id for d in kept], queue=queue)
        except BaseException:
            # Interrupted or failed: hand the batch back now rather than when its deadline ends;
            # a copy already published is in the redrive subscription for the next run.
            give_back(backend, queue, None, kept)
            raise
        done.update(d.message_id for d in unique)
        report.redriven += len(fresh)
        report.resumed += len(unique) - len(fresh)
        if on_batch is not None:
            on_batch(report)
    scanned_all = tag is None and report.redriven + report.resumed < limit
    _settle_audit(backend, queue, audit, done, scanned_all, report)
    return report


def _settle_audit(
    backend: PubSubBackend,
    queue: str,
    audit: str,
    done: set[str],
    scanned_all: bool,
    report: Redrive,
) -> None:
    """Acknowledge the copies whose dead letter is gone; drop the audit subscription once empty.

    A copy whose dead letter this run did not see is kept when the dead letters were not all
    scanned (a limit or a tag), so a later run still knows it was published.
    """
    if scanned_all:
        # Every dead letter with a copy has been acknowledged: nothing there is needed any more.
        _drop_audit_quietly(backend, queue, audit)
        return
    _, held = _copies(backend, queue, audit)
    settled = [d for d in held if scanned_all or d.attributes[ATTR_REDRIVE_OF] in done]
    keep = [d for d in held if d not in settled]
    if settled:
        backend.rpc.ack(audit, [d.ack_id for d in settled], queue=queue)
    give_back(backend, queue, None, keep)
    report.unresolved = len({d.attributes[ATTR_REDRIVE_OF] for d in keep})
    if not keep:
        _drop_audit_quietly(backend, queue, audit)


def _drop_audit_quietly(backend: PubSubBackend, queue: str, audit: str) -> None:
    try:
        _drop_audit(backend, queue, audit)
    except Error as exc:  # the redrive is done; the subscription only costs deliveries
        log.warning(
            "queue %r: could not delete the redrive subscription %s (%s); delete it to stop"
            " paying a filtered delivery per task",
            queue,
            audit,
            exc,
        )
