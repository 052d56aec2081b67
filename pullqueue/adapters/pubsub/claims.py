"""Shard claims: one token message per shard on the queue's claims subscription, held to drain it.

A process drains a shard into its hand only while it holds the shard's token (under exactly-once
delivery a pulled message is one subscriber's until its ack deadline), so two processes do not
split a shard's tags between them. Tokens are never acknowledged, only given back; a duplicate
or missing token costs batching, never a task, and a missing one is published again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pullqueue.adapters.pubsub.rpc import PubSubRpc
from pullqueue.adapters.pubsub.wire import PubsubMessagePb
from pullqueue.errors import Error

log = logging.getLogger(__name__)

ATTR_SHARD = "shard"
"""Attribute of a token message: its shard number, in decimal."""
CLAIM_DEADLINE = 60
"""Seconds a token is held per pull or renewal (the claims subscription's ack deadline)."""
RENEW_MARGIN = 20.0
"""A held token is renewed when less than this many seconds of its deadline are left."""
MISSING_AFTER = 3 * CLAIM_DEADLINE
"""Seconds without seeing a shard's token, while others are seen, before it is published again."""
CLAIM_WAIT = 0.25
"""Seconds a pull of the claims subscription waits for tokens."""
CLAIM_PULLS = 4
"""Pulls of the claims subscription one claim makes at most, looking for its token."""
RETRY_PAUSE = 0.1
"""Seconds before looking again when no token came and none was ever seen."""
UNSEEN_PATIENCE = 1.0
"""Seconds a process that never saw a token looks for one before it concludes there is none
(once per queue): at start-up others may hold every free token for a moment (a claim pulls them
all), and a process concluding wrongly drains a shard another is about to claim."""


class Claim(Enum):
    """The outcome of asking for a shard's token."""

    OWNED = "owned"
    """This process holds the token: drain the shard."""
    TAKEN = "taken"
    """Another process holds it: serve only what is in hand."""
    NO_TOKENS = "no tokens"
    """No token at all came (none published yet, or every one is held): drain unclaimed."""


@dataclass
class _Token:
    ack_id: str
    held_until: float
    published: float
    message_id: str


class ShardClaims:
    """The tokens one process holds, per queue, and the pulls that win or give them back."""

    def __init__(self, rpc: PubSubRpc, shards: Callable[[str], int]) -> None:
        self.rpc = rpc
        self.shards = shards
        """Queue -> its shard count (one token per shard, numbered from 0)."""
        self._lock = threading.Lock()
        self._held: dict[str, dict[int, _Token]] = {}
        self._seen: dict[str, dict[int, float]] = {}
        self._unseen: set[str] = set()
        """Queues whose claims subscription this process looked at long and found no token in."""
        self._started = time.monotonic()

    def claim(self, queue: str, subscription: str, topic: str, shard: int) -> Claim:
        """Hold the shard's token: renewed when already held, else won from the subscription."""
        now = time.monotonic()
        if self.keep(queue, subscription, {shard}):
            return Claim.OWNED
        seen = self._seen.setdefault(queue, {})
        received = self._pull(queue, subscription)
        if not received and not seen and queue not in self._unseen:
            # Other processes may have all free tokens in hand for a moment: look again.
            give_up = now + UNSEEN_PATIENCE
            while not received and time.monotonic() < give_up:
                time.sleep(RETRY_PAUSE)
                received = self._pull(queue, subscription)
            if not received:
                self._unseen.add(queue)
        give_back: list[str] = []
        duplicates: list[str] = []
        won = False
        batch = received
        for _ in range(CLAIM_PULLS):
            pulled_at = time.monotonic()
            with self._lock:
                held = self._held.setdefault(queue, {})
                for item in batch:
                    attributes = item.message.attributes
                    number = _shard_number(attributes.get(ATTR_SHARD, ""), self.shards(queue))
                    if number is not None:
                        seen[number] = pulled_at
                    mine = held.get(number) if number is not None else None
                    if mine is not None and mine.message_id == item.message.message_id:
                        # This process's token, delivered again (its deadline ran out while
                        # held): it holds it under the new ack id.
                        mine.ack_id, mine.held_until = item.ack_id, pulled_at + CLAIM_DEADLINE
                    elif mine is not None:
                        # A second token of a shard this process holds (published by a process
                        # that missed it): removed, so one process drains the shard again.
                        duplicates.append(item.ack_id)
                    elif number == shard:
                        stamp = item.message.publish_time
                        published = stamp.seconds + stamp.nanos / 1e9
                        held[shard] = _Token(
                            item.ack_id,
                            pulled_at + CLAIM_DEADLINE,
                            published,
                            item.message.message_id,
                        )
                        won = True
                    else:
                        give_back.append(item.ack_id)
            # A pull may bring fewer tokens than are free: keep looking (the ones in hand stay
            # out of the next pull) until the token comes or no more do.
            if won or not batch:
                break
            batch = self._pull(queue, subscription)
        pulled_at = time.monotonic()
        if give_back:
            self.rpc.modify(subscription, give_back, 0, queue=queue)
        if duplicates:
            log.info("queue %r: removing %d duplicate shard token(s)", queue, len(duplicates))
            self.rpc.ack(subscription, duplicates, queue=queue)
        if won:
            return Claim.OWNED
        missing = [shard] if received else list(range(self.shards(queue)))
        if all(pulled_at - max(seen.get(k, 0.0), self._started) > MISSING_AFTER for k in missing):
            # Never published (Terraform cannot publish), expired, or lost: publish it again; a
            # duplicate only lets two processes share a shard.
            log.warning(
                "queue %r: no token for shard(s) %s seen in %d s; publishing them",
                queue,
                ", ".join(map(str, missing)),
                MISSING_AFTER,
            )
            self.publish(queue, topic, missing)
            for k in missing:
                seen[k] = pulled_at
        if not received and not seen:
            return Claim.NO_TOKENS
        return Claim.TAKEN

    def _pull(self, queue: str, subscription: str) -> list[Any]:
        return self.rpc.pull(
            subscription,
            min(self.shards(queue), 1000),
            queue=queue,
            wait=CLAIM_WAIT,
            budget=self.rpc.timeout,
        )

    def holding(self, queue: str) -> set[int]:
        with self._lock:
            return set(self._held.get(queue, {}))

    def keep(self, queue: str, subscription: str, shards: set[int]) -> set[int]:
        """Renew those of the shards' tokens this process holds that are near their deadline,
        in one request; the shards whose token it still holds."""
        now = time.monotonic()
        with self._lock:
            held = self._held.get(queue, {})
            tokens = {k: held[k] for k in shards if k in held}
        due = {k: t for k, t in tokens.items() if t.held_until - now <= RENEW_MARGIN}
        if due:
            stale = self.rpc.modify(
                subscription, [t.ack_id for t in due.values()], CLAIM_DEADLINE, queue=queue
            )
            released: list[str] = []
            with self._lock:
                held = self._held.get(queue, {})
                for k, token in due.items():
                    if token.ack_id in stale:
                        if held.get(k) is token:
                            del held[k]
                        del tokens[k]
                    elif held.get(k) is not token:
                        # Given back while this renewal was on its way: give it back again.
                        released.append(token.ack_id)
                        del tokens[k]
                    else:
                        token.held_until = now + CLAIM_DEADLINE
            if released:
                self.rpc.modify(subscription, released, 0, queue=queue)
        return set(tokens)

    def release(
        self, queue: str, subscription: str, topic: str, shards: set[int], renew_before: float
    ) -> None:
        """Give the shards' tokens back; one published before renew_before (POSIX seconds, near
        the end of the subscription's retention) is replaced by a fresh token instead."""
        with self._lock:
            held = self._held.get(queue, {})
            tokens = {k: held.pop(k) for k in shards if k in held}
        if not tokens:
            return
        old = [k for k, token in tokens.items() if token.published < renew_before]
        if old:
            self.publish(queue, topic, old)
            self.rpc.ack(subscription, [tokens[k].ack_id for k in old], queue=queue)
        back = [token.ack_id for k, token in tokens.items() if k not in old]
        if back:
            self.rpc.modify(subscription, back, 0, queue=queue)

    def release_all(self, subscriptions: dict[str, tuple[str, str]]) -> None:
        """Give every token back (the backend is closing); queue -> (subscription, topic)."""
        for queue, (subscription, topic) in subscriptions.items():
            try:
                self.release(queue, subscription, topic, self.holding(queue), 0.0)
            except Error as exc:
                log.warning("queue %r: could not give shard tokens back (%s)", queue, exc)

    def publish(self, queue: str, topic: str, shards: list[int]) -> None:
        """Publish a token for each shard given."""
        messages = [PubsubMessagePb(attributes={ATTR_SHARD: str(k)}) for k in shards]
        self.rpc.publish(topic, messages, queue=queue)


def _shard_number(text: str, shards: int) -> int | None:
    if not text.isdigit():
        return None
    number = int(text)
    return number if number < shards else None
