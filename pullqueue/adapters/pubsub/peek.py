"""A look at a queue's tasks on Pub/Sub without taking them: pull, then give each back at once.

Pub/Sub has no listing and no peek: the cheapest honest look is a pull (one delivery attempt per
task) followed by a modifyAckDeadline that returns each task as it was (0 s, or hidden again
until its ETA); a task this close to the dead-letter limit is republished fresh instead, as the
adapter does for any task it gives back unleased, so looking never dead-letters a task.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from pullqueue.adapters.pubsub.backend import PubSubBackend
from pullqueue.adapters.pubsub.hand import near_limits
from pullqueue.adapters.pubsub.provision import QueueTopology
from pullqueue.adapters.pubsub.wire import Delivery, decode

FIRST_WAIT = 1.0
"""Seconds a look waits for the first message of a subscription."""
NEXT_WAIT = 0.3
"""Seconds it waits for more once messages came."""
EMPTY_PULLS = 2
"""Empty pulls in a row after which a subscription is taken as having shown what it has."""


@dataclass(frozen=True)
class Seen:
    """One task as a look found it."""

    delivery: Delivery
    subscription_id: str

    @property
    def retry_count(self) -> int | None:
        """Deliveries so far, this look included (None when the subscription does not count)."""
        return self.delivery.attempt or None


def pull_all(
    backend: PubSubBackend,
    queue: str,
    subscription: str,
    limit: int,
    keep: Callable[[Delivery], bool],
    *,
    first_wait: float = FIRST_WAIT,
) -> tuple[list[Delivery], list[Delivery]]:
    """Pull up to `limit` deliveries `keep` accepts from one subscription, holding them all.

    Returns (kept, others): the caller must give every one of them back or acknowledge it.
    """
    kept: list[Delivery] = []
    others: list[Delivery] = []
    empty = 0
    wait = first_wait
    while len(kept) < limit and empty < EMPTY_PULLS:
        pulled_at = time.time()
        received = backend.rpc.pull(
            subscription,
            min(limit - len(kept), 1000),
            queue=queue,
            wait=wait,
            budget=wait + backend.settings.pubsub_rpc_timeout,
        )
        wait = NEXT_WAIT
        if not received:
            empty += 1
            continue
        empty = 0
        for item in received:
            delivery = decode(subscription, item, pulled_at)
            (kept if len(kept) < limit and keep(delivery) else others).append(delivery)
    return kept, others


def give_back(
    backend: PubSubBackend, queue: str, topology: QueueTopology | None, held: list[Delivery]
) -> None:
    """Return held deliveries as they were: visible now, or hidden until their ETA; republished
    fresh when near the dead-letter limit or the retention (working subscriptions only)."""
    now = time.time()
    renew: list[Delivery] = []
    back: list[Delivery] = []
    for delivery in held:
        near = topology is not None and near_limits(topology, backend.settings, delivery, now)
        (renew if near else back).append(delivery)
    if renew and topology is not None:
        # Without publish rights they are given back as they are.
        back += backend._republisher.renew(queue, topology, renew)
    by_wait: dict[tuple[str, int], list[str]] = defaultdict(list)
    for delivery in back:
        hidden = 0
        if delivery.eta is not None and delivery.eta > now:
            hidden = math.ceil(min(delivery.eta - now, backend.settings.pubsub_max_deferral))
        by_wait[(delivery.subscription, hidden)].append(delivery.ack_id)
    for (subscription, seconds), ack_ids in by_wait.items():
        backend.rpc.modify(subscription, ack_ids, seconds, queue=queue)


def look(backend: PubSubBackend, queue: str, *, tag: str | None, limit: int) -> list[Seen]:
    """Up to `limit` tasks of the queue (of `tag`), oldest first, each given back at once.

    Tasks leased by a worker, or hidden until a future ETA, are not visible to a pull and so are
    not shown; what is shown is what one look could pull, not necessarily the oldest tasks.
    """
    topology = backend.topology(queue)
    declared = topology.tags.get(tag) if tag is not None else None
    sources = [declared] if declared is not None else topology.sources
    seen: list[Seen] = []
    held: list[Delivery] = []
    names: set[str] = set()
    try:

        def keep(delivery: Delivery) -> bool:
            if not topology.rules[delivery.subscription].serves(delivery.attributes):
                return False  # a copy the emulator failed to filter out
            return tag is None or delivery.tag == tag

        for source in sources:
            kept, others = pull_all(backend, queue, source, limit - len(seen), keep)
            held += kept + others
            for delivery in kept:
                if delivery.name not in names:
                    names.add(delivery.name)
                    seen.append(Seen(delivery, source.rsplit("/", 1)[-1]))
            if len(seen) >= limit:
                break
    finally:
        give_back(backend, queue, topology, held)
    seen.sort(key=lambda s: (s.delivery.order, s.delivery.name))
    return seen
