"""Shard claims: one token message per shard on the queue's claims subscription, held to drain it.

A process drains a shard into its hand only while it holds the shard's token (under exactly-once
delivery a pulled message is one subscriber's until its ack deadline), so two processes do not
split a shard's tags between them. Tokens are never acknowledged, only given back; a duplicate
or missing token costs batching, never a task, and a missing one is published again.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as WaitedOut
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pullqueue.adapters.pubsub.rpc import PubSubRpc
from pullqueue.adapters.pubsub.wire import PubsubMessagePb
from pullqueue.errors import Error

log = logging.getLogger(__name__)

ATTR_SHARD = "shard"
"""Attribute of a token message: its shard number, in decimal."""
ATTR_CENSUS = "census"
"""Attribute of the census message ("1"), published with the tokens: a process that pulls it
gives it back at once, so one that starts while other processes hold every token still sees
it and knows tokens exist (it waits for one rather than drain shards unclaimed)."""
CLAIM_DEADLINE = 60
"""Seconds a token is held per pull or renewal (the claims subscription's ack deadline)."""
RENEW_MARGIN = 20.0
"""A held token is renewed when less than this many seconds of its deadline are left."""
MISSING_AFTER = 3 * CLAIM_DEADLINE
"""Seconds without seeing a shard's token, while others are seen, before it is published again."""
CLAIM_WAIT = 0.25
"""Seconds a pull of the claims subscription waits for tokens."""
CLAIM_GRACE = 0.35
"""Seconds beyond CLAIM_WAIT a claims pull's deadline is sent with where empty pulls may be
held: an answer later than the wait is given back rather than dropped in transfer, its tokens out
for CLAIM_DEADLINE."""
CLAIM_PULLS = 4
"""Pulls of the claims subscription one claim makes at most, looking for its token."""
CLAIM_ASK = 4
"""A pull of the claims subscription asks for this many times the tokens and census there are:
Pub/Sub may answer a pull with a share of what waits, and asking for more than the subscription
holds costs nothing (it holds tokens only), so more looks see every token in one pull."""
RETRY_PAUSE = 0.1
"""Seconds before looking again when no token came and none was ever seen."""
UNSEEN_PATIENCE = 6.0
"""Seconds a process that never saw a token or the census looks for one before it concludes
there is none (once per queue): at start-up others may hold every free token and the census for
a moment (a look pulls them all), and a process concluding wrongly drains shards unclaimed. With
3 s, 32 processes started together on a loaded 2-core host had 6-9 conclude wrongly, splitting
tags."""


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

    @classmethod
    def of(cls, item: Any, pulled_at: float) -> _Token:
        """The token a pull (begun at `pulled_at`, monotonic) brought: held a deadline."""
        stamp = item.message.publish_time
        return cls(
            item.ack_id,
            pulled_at + CLAIM_DEADLINE,
            stamp.seconds + stamp.nanos / 1e9,
            item.message.message_id,
        )


@dataclass(frozen=True)
class Grab:
    """What one look at the claims subscription won and saw."""

    won: set[int]
    """Shards whose token this process won in the look."""
    elsewhere: bool
    """Some shard's token was neither free nor this process's: another process holds it."""
    no_tokens: bool
    """No token and no census has ever come: the queue has none yet (drain unclaimed)."""
    unseen: frozenset[int] = frozenset()
    """Shards whose token the look neither saw free nor holds (another process may hold it)."""


class ShardClaims:
    """The tokens one process holds, per queue, and the pulls that win or give them back."""

    def __init__(self, rpc: PubSubRpc, shards: Callable[[str], int]) -> None:
        self.rpc = rpc
        self.shards = shards
        """Queue -> its shard count (one token per shard, numbered from 0)."""
        self._lock = threading.Lock()
        self._held: dict[str, dict[int, _Token]] = {}
        self._seen: dict[str, dict[int, float]] = {}
        self._census: dict[str, float] = {}
        """Queue -> when (monotonic) this process last saw its census message."""
        self._owed: dict[str, list[str]] = {}
        """Queue -> ack ids a deferred grab owes back, the census among them (see release)."""
        self._owed_tokens: dict[str, dict[int, _Token]] = {}
        """Queue -> the tokens a deferred grab owes back, by shard: a later grab in the same
        call takes the ones it wants from here, without a pull (see grab)."""
        self._unseen: set[str] = set()
        """Queues whose claims subscription this process looked at long and found no token in."""
        self._started = time.monotonic()

    def claim(
        self, queue: str, subscription: str, topic: str, shard: int, *, defer: bool = False
    ) -> Claim:
        """Hold the shard's token: renewed when already held, else won from the subscription
        (`defer` as in grab)."""
        if self.keep(queue, subscription, {shard}):
            return Claim.OWNED
        grab = self.grab(queue, subscription, topic, {shard}, defer=defer)
        if shard in grab.won:
            return Claim.OWNED
        return Claim.NO_TOKENS if grab.no_tokens else Claim.TAKEN

    def grab(
        self,
        queue: str,
        subscription: str,
        topic: str,
        wanted: set[int],
        *,
        thorough: bool = False,
        pulls: int = CLAIM_PULLS,
        defer: bool = False,
    ) -> Grab:
        """Win the free tokens of the wanted shards (this process does not hold them yet) in one
        pull of the claims subscription, giving the others back; `thorough` pulls again while
        tokens come (a pull may bring fewer than are free) until every token was seen, even
        when the wanted ones came. At most `pulls` pulls.

        With `defer` the tokens and census to give back go back with the next release of
        this queue's tokens (one call for both; the caller releases before it returns), not in
        a call of their own now."""
        now = time.monotonic()
        seen = self._seen.setdefault(queue, {})
        with self._lock:
            # Tokens owed back from a look a moment ago in this call are still this process's:
            # the wanted ones are won from there, the others count as seen free.
            owed = self._owed_tokens.get(queue, {})
            held = self._held.setdefault(queue, {})
            from_owed = {k for k in wanted if k in owed}
            for k in from_owed:
                held[k] = owed.pop(k)
            owed_free = set(owed) | from_owed
            if from_owed and from_owed == wanted:
                known = owed_free | set(held)
                return Grab(
                    won=from_owed,
                    elsewhere=len(known) < self.shards(queue),
                    unseen=frozenset(range(self.shards(queue))) - known,
                    no_tokens=False,
                )
        wanted = wanted - from_owed
        received = self._pull(queue, subscription)
        if not received and not self._known(queue) and queue not in self._unseen:
            # Other processes may have all free tokens in hand for a moment: look again.
            give_up = now + UNSEEN_PATIENCE
            while not received and time.monotonic() < give_up:
                time.sleep(RETRY_PAUSE)
                received = self._pull(queue, subscription)
            if not received:
                self._unseen.add(queue)
        shards = self.shards(queue)
        give_back: list[str] = []
        owed_tokens: dict[int, _Token] = {}
        duplicates: list[str] = []
        won: set[int] = set(from_owed)
        free: set[int] = set(owed_free)
        censuses = 0
        census: list[str] = []
        batch = received
        for pull in range(1, pulls + 1):
            pulled_at = time.monotonic()
            with self._lock:
                held = self._held.setdefault(queue, {})
                for item in batch:
                    attributes = item.message.attributes
                    if attributes.get(ATTR_CENSUS):
                        # One census is enough: a second (two processes published one) goes.
                        (duplicates if censuses else census).append(item.ack_id)
                        censuses += 1
                        self._census[queue] = pulled_at
                        continue
                    number = _shard_number(attributes.get(ATTR_SHARD, ""), shards)
                    if number is not None:
                        seen[number] = pulled_at
                        free.add(number)
                    mine = held.get(number) if number is not None else None
                    if mine is not None and mine.message_id == item.message.message_id:
                        # This process's token, delivered again (its deadline ran out while
                        # held): it holds it under the new ack id.
                        mine.ack_id, mine.held_until = item.ack_id, pulled_at + CLAIM_DEADLINE
                    elif mine is not None:
                        # A second token of a shard this process holds (published by a process
                        # that missed it): removed, so one process drains the shard again.
                        duplicates.append(item.ack_id)
                    elif number is not None and number in wanted:
                        held[number] = _Token.of(item, pulled_at)
                        won.add(number)
                    elif defer and number is not None:
                        owed_tokens[number] = _Token.of(item, pulled_at)
                    else:
                        give_back.append(item.ack_id)
                seen_all = len(free | set(held)) >= shards
            # A pull may bring fewer tokens than are free: keep looking (the ones in hand stay
            # out of the next pull) until the tokens come or no more do; a `thorough` look
            # until it saw every token (an unseen one counts as another process's claim).
            if (
                not batch
                or pull == pulls
                or (thorough and seen_all)
                or (not thorough and (won or won >= wanted))
            ):
                # (A pull after the last would bring tokens nobody looks at: held a deadline.)
                break
            batch = self._pull(
                queue, subscription, glance=not thorough and self.rpc.holds_empty_pulls is True
            )
        pulled_at = time.monotonic()
        holding = self.holding(queue)
        elsewhere = len(free | holding) < shards
        if defer and elsewhere:
            # Other processes hold tokens: what this look does not keep goes back now, beside
            # the rest of the call, not at its end. Held to the end of every call, the census
            # was out of sight in most moments of a busy fleet's life (a process starting sees
            # that tokens exist by it alone, see UNSEEN_PATIENCE), and so were the free tokens:
            # another process's claim of one pulled the claims subscription again and again,
            # each pull held its wait (1.0-1.1 s for a claim, 2 processes x 4 threads at 30 ms
            # round trips).
            back = census + give_back + [t.ack_id for t in owed_tokens.values()]
            if back:
                self._send_back(queue, subscription, back)
            give_back, owed_tokens = [], {}
        else:
            give_back += census
        if defer:
            with self._lock:
                self._owed.setdefault(queue, []).extend(give_back)
                tokens = self._owed_tokens.setdefault(queue, {})
                # A token owed already and pulled again (its ack id changed): the new one.
                gone = [tokens[k].ack_id for k in owed_tokens if k in tokens]
                self._owed[queue] += gone
                tokens.update(owed_tokens)
        elif give_back:
            self.rpc.modify(subscription, give_back, 0, queue=queue)
        if duplicates:
            log.info("queue %r: removing %d duplicate claim message(s)", queue, len(duplicates))
            self.rpc.ack(subscription, duplicates, queue=queue)
        missing = sorted(wanted - won - holding) if received else list(range(shards))
        if missing and all(
            pulled_at - max(seen.get(k, 0.0), self._started) > MISSING_AFTER for k in missing
        ):
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
        elif seen and pulled_at - max(self._census.get(queue, 0.0), self._started) > MISSING_AFTER:
            # Tokens published before the census was: publish it, so a process starting while
            # every token is held knows they exist.
            self.publish(queue, topic, [])
            self._census[queue] = pulled_at
        return Grab(
            won=won,
            elsewhere=elsewhere,
            unseen=frozenset(range(shards)) - free - holding,
            no_tokens=not received and not self._known(queue),
        )

    def _send_back(self, queue: str, subscription: str, ack_ids: list[str]) -> None:
        """Give ack_ids back in the background (a warning if that fails: they come back at their
        ack deadline)."""

        def failed(exc: BaseException) -> None:
            log.warning(
                "queue %r: could not give back %d claim message(s) (%s); they come back at"
                " their ack deadline",
                queue,
                len(ack_ids),
                exc,
            )

        def sent(future: Future[set[str]]) -> None:
            if (exc := future.exception()) is not None:
                failed(exc)

        try:
            future = self.rpc.start(
                functools.partial(self.rpc.modify, subscription, ack_ids, 0, queue=queue)
            )
        except RuntimeError as exc:  # the pool shut down: the backend is closing
            failed(exc)
            return
        future.add_done_callback(sent)

    def _known(self, queue: str) -> bool:
        """True once this process has seen a token or the census of the queue."""
        return bool(self._seen.get(queue)) or queue in self._census

    def _pull(self, queue: str, subscription: str, *, glance: bool = False) -> list[Any]:
        """A pull of the claims subscription, waited for CLAIM_WAIT; a `glance` is not held
        when no token is free (`return_immediately`: a grab's next pulls, looking for the
        rest of the free tokens, where empty pulls are held; each found none free and was held
        its wait, a claim of a shard another process held taking 0.3-0.6 s).

        Unless empty pulls are known to be answered at once (the emulator), it is sent with
        CLAIM_GRACE more, and an answer that comes after the wait gives its tokens back at once
        (_give_back_late): dropped at its deadline, they were out for CLAIM_DEADLINE (60 s),
        every process taking their shards for claimed elsewhere, and a lease by tag alone found
        none of their tasks meanwhile (0 of 30 in 12.6 s, through the realistic layer's
        `slow_answers` on the claims subscription).
        """
        pull = functools.partial(
            self.rpc.pull,
            subscription,
            min(CLAIM_ASK * (self.shards(queue) + 1), 1000),  # the tokens and the census
            queue=queue,
            wait=CLAIM_WAIT,
            budget=self.rpc.timeout,
            immediately=glance,
        )
        if self.rpc.holds_empty_pulls is False:
            return pull()
        future = self.rpc.start(functools.partial(pull, grace=CLAIM_GRACE))
        try:
            return future.result(timeout=CLAIM_WAIT)
        except WaitedOut:
            future.add_done_callback(functools.partial(self._give_back_late, queue, subscription))
            return []

    def _give_back_late(self, queue: str, subscription: str, future: Future[list[Any]]) -> None:
        """Give back what a claims pull brought after its wait (see _pull)."""
        if future.exception() is None and (late := [item.ack_id for item in future.result()]):
            self._send_back(queue, subscription, late)

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
        """Give the shards' tokens back, with what a deferred grab owes back; one published
        before renew_before (POSIX seconds, near the end of the subscription's retention) is
        replaced by a fresh token instead."""
        send = self.let_go(queue, subscription, topic, shards, renew_before)
        if send is not None:
            send()

    def let_go(
        self, queue: str, subscription: str, topic: str, shards: set[int], renew_before: float
    ) -> Callable[[], None] | None:
        """release, of which this process's books change now (the tokens are no longer held
        here when this returns): the calls that give them back to Pub/Sub, to make (None when
        there are none). Until those are made the tokens are out to nobody: other processes
        win them once they are."""
        with self._lock:
            held = self._held.get(queue, {})
            tokens = {k: held.pop(k) for k in shards if k in held}
            owed = self._owed.pop(queue, [])
            owed += [t.ack_id for t in self._owed_tokens.pop(queue, {}).values()]
        old = [k for k, token in tokens.items() if token.published < renew_before]
        back = owed + [token.ack_id for k, token in tokens.items() if k not in old]
        if not old and not back:
            return None

        def send() -> None:
            if old:
                self.publish(queue, topic, old)
                self.rpc.ack(subscription, [tokens[k].ack_id for k in old], queue=queue)
            if back:
                self.rpc.modify(subscription, back, 0, queue=queue)

        return send

    def release_all(self, subscriptions: dict[str, tuple[str, str]]) -> None:
        """Give every token back (the backend is closing); queue -> (subscription, topic)."""
        for queue, (subscription, topic) in subscriptions.items():
            try:
                self.release(queue, subscription, topic, self.holding(queue), 0.0)
            except Error as exc:
                log.warning("queue %r: could not give shard tokens back (%s)", queue, exc)

    def publish(self, queue: str, topic: str, shards: list[int]) -> None:
        """Publish a token for each shard given, and the census with them."""
        self.rpc.publish(topic, token_messages(shards), queue=queue)


def token_messages(shards: Iterable[int]) -> list[PubsubMessagePb]:
    """The token of each shard given, then the census (says tokens exist; never held)."""
    return [PubsubMessagePb(attributes={ATTR_SHARD: str(k)}) for k in shards] + [
        PubsubMessagePb(attributes={ATTR_CENSUS: "1"})
    ]


def _shard_number(text: str, shards: int) -> int | None:
    if not text.isdigit():
        return None
    number = int(text)
    return number if number < shards else None
