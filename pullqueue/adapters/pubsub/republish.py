"""Publishing by workers: fresh copies of tasks kept back too long, and messages set aside.

A worker republishes a task hidden until a far ETA before Pub/Sub would dead-letter it, and moves
a foreign message it may not serve to the dead-letter topic. Both need roles/pubsub.publisher;
without it the worker keeps running, falls back to what needs no publish and says so.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence

from pullqueue.adapters.pubsub.layout import ATTR_ETA
from pullqueue.adapters.pubsub.leases import LeaseBook
from pullqueue.adapters.pubsub.provision import QueueTopology
from pullqueue.adapters.pubsub.rpc import MAX_ACK_DEADLINE, PubSubRpc
from pullqueue.adapters.pubsub.wire import (
    ATTR_LAST_ERROR,
    ATTR_SET_ASIDE,
    SOURCE_DELIVERIES,
    SOURCE_PUBLISH_TIME,
    SOURCE_SUBSCRIPTION,
    Delivery,
    PubsubMessagePb,
    by_subscription,
    format_eta,
)
from pullqueue.errors import NotProvisionedError, PermissionDeniedError
from pullqueue.logs import log_event

log = logging.getLogger(__name__)

DENIED = (PermissionDeniedError, NotProvisionedError)
"""Publish failures a retry will not cure: the worker falls back instead of stopping."""

GRANT_HINT = (
    "grant the worker's service account roles/pubsub.publisher on its queue's topic and"
    " dead-letter topic (the Terraform module does unless grant_worker_publisher = false)"
)


class Republisher:
    """Publishes on the workers' behalf and acknowledges the originals once the copies exist."""

    def __init__(self, rpc: PubSubRpc, book: LeaseBook) -> None:
        self.rpc = rpc
        self._book = book

    def renew(
        self, queue: str, topology: QueueTopology, deliveries: Sequence[Delivery]
    ) -> list[Delivery]:
        """Publish fresh copies of tasks that were never handed out, then ack the old messages.

        The copy keeps the name, tag, payload and order (its eta is the original ETA or publish
        time) and starts again at delivery attempt 1, far from the dead-letter limit. Returns the
        deliveries that could not be republished because publishing is denied: the caller gives
        them back as they are, and they keep using up delivery attempts.
        """
        # Each copy goes to the topic its original came from (the queue's, or a shard's).
        by_topic: dict[str, list[Delivery]] = defaultdict(list)
        for delivery in deliveries:
            by_topic[topology.topics.get(delivery.subscription, topology.topic)].append(delivery)
        refused: list[Delivery] = []
        for topic, group in by_topic.items():
            messages = []
            for delivery in group:
                attributes = dict(delivery.attributes)
                attributes[ATTR_ETA] = format_eta(delivery.order)
                messages.append(PubsubMessagePb(data=delivery.payload, attributes=attributes))
            try:
                self.rpc.publish(topic, messages, queue=queue)
            except DENIED as exc:
                log_event(
                    log,
                    logging.WARNING,
                    "republish_denied",
                    queue=queue,
                    tasks=len(group),
                    topic=topic,
                    error=exc.message,
                    next=f"given back as they are: dead-lettered after {topology.max_attempts}"
                    f" deliveries if their ETA is still ahead; {GRANT_HINT}",
                )
                refused += group
                continue
            self._ack_originals(queue, group, "republished")
        return refused

    def set_aside(
        self, queue: str, topology: QueueTopology, deliveries: Sequence[Delivery]
    ) -> None:
        """Move messages no worker may be handed to the queue's dead-letter topic.

        The copy keeps the data and attributes and adds `pullqueue_set_aside` (the reason). When
        publishing is denied, the message is hidden for the longest ack deadline instead, so it
        stays out of the workers' way until Pub/Sub's own dead-letter policy moves it.
        """
        topic = self.rpc.topic_path(topology.layout.dead_letter_topic_id)
        messages = []
        for delivery in deliveries:
            attributes = dict(delivery.attributes)
            attributes[ATTR_SET_ASIDE] = delivery.set_aside or ""
            messages.append(PubsubMessagePb(data=delivery.payload, attributes=attributes))
        try:
            self.rpc.publish(topic, messages, queue=queue)
        except DENIED as exc:
            for delivery in deliveries:
                log_event(
                    log,
                    logging.WARNING,
                    "set_aside_denied",
                    queue=queue,
                    message_id=delivery.message_id,
                    reason=delivery.set_aside,
                    topic=topic,
                    error=exc.message,
                    next=f"not served; hidden {MAX_ACK_DEADLINE} s at a time until Pub/Sub"
                    f" dead-letters it after {topology.max_attempts} deliveries; {GRANT_HINT}",
                )
            for source, items in by_subscription(deliveries).items():
                self.rpc.modify(source, [d.ack_id for d in items], MAX_ACK_DEADLINE, queue=queue)
            self._book.skipped(list(deliveries))
            return
        for delivery in deliveries:
            log_event(
                log,
                logging.WARNING,
                "set_aside",
                queue=queue,
                message_id=delivery.message_id,
                reason=delivery.set_aside,
                topic=topic,
                next="not served; read it from the dead-letter subscription",
            )
        self._ack_originals(queue, deliveries, "set aside")

    def dead_letter(
        self, queue: str, topology: QueueTopology, delivery: Delivery, error: str
    ) -> bool:
        """Move a task whose handler failed on its last delivery attempt to the dead-letter
        topic now, with the error in `last_error` and the attributes Pub/Sub itself adds, then
        acknowledge it. False when publishing is denied: the caller releases it and Pub/Sub
        dead-letters it, without the error."""
        topic = self.rpc.topic_path(topology.layout.dead_letter_topic_id)
        attributes = dict(delivery.attributes)
        attributes.update(
            {
                ATTR_LAST_ERROR: error.encode("utf-8")[:1024].decode("utf-8", "ignore"),
                SOURCE_DELIVERIES: str(delivery.attempt),
                SOURCE_SUBSCRIPTION: delivery.subscription.rsplit("/", 1)[-1],
                SOURCE_PUBLISH_TIME: format_eta(delivery.published),
            }
        )
        try:
            self.rpc.publish(
                topic, [PubsubMessagePb(data=delivery.payload, attributes=attributes)], queue=queue
            )
        except DENIED as exc:
            log_event(
                log,
                logging.WARNING,
                "dead_letter_denied",
                queue=queue,
                task=delivery.name,
                topic=topic,
                error=exc.message,
                next=f"released: Pub/Sub dead-letters it without its last error; {GRANT_HINT}",
            )
            return False
        self._ack_originals(queue, [delivery], "dead-lettered")
        return True

    def _ack_originals(self, queue: str, deliveries: Sequence[Delivery], done: str) -> None:
        for source, items in by_subscription(deliveries).items():
            stale = self.rpc.ack(source, [d.ack_id for d in items], queue=queue)
            if stale:
                log_event(
                    log,
                    logging.WARNING,
                    "original_not_acknowledged",
                    queue=queue,
                    messages=len(stale),
                    copies=done,
                    next="Pub/Sub took them back before the old copy was acknowledged; they"
                    " will be delivered twice",
                )
