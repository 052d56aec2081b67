"""The hand: the deliveries one process pulled of one queue and has not leased yet, and its rules.

One Hand per queue owns what is held (count and bytes), the lock that lets one lease call at a
time serve it, and the rules for holding, serving whole shards first, keeping a claimed shard's
tasks while it is served and giving tasks back, so its thread safety can be checked here alone.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, replace

from pullqueue.adapters.pubsub.claims import Claim, Grab, ShardClaims
from pullqueue.adapters.pubsub.deadlines import DeadlineChanges
from pullqueue.adapters.pubsub.leases import LeaseBook
from pullqueue.adapters.pubsub.provision import QueueTopology
from pullqueue.adapters.pubsub.republish import Republisher
from pullqueue.adapters.pubsub.rpc import MAX_ACK_DEADLINE, PubSubRpc
from pullqueue.adapters.pubsub.turns import Turns
from pullqueue.adapters.pubsub.wire import Delivery, by_subscription, fewest_sources
from pullqueue.config import Settings
from pullqueue.errors import DeadlineExceededError, Error

log = logging.getLogger(__name__)

ATTEMPTS_RESERVE = 2
"""A task pullqueue gives back unleased this close to the dead-letter limit is republished."""
RETENTION_RESERVE = 24 * 3600.0
"""... and so is one this close (seconds) to the end of the subscription's retention."""
EMPTY_RECHECK = 0.5
"""Seconds a subscription found empty is left out of probes."""
EMPTY_BEHIND = 2.0
"""Seconds a subscription found empty is left out of the probes of a lease with tasks in hand,
where empty pulls are held (Pub/Sub): such a probe looks for a task older than those in hand,
and one published since the subscription was found empty is younger; probing it cost every
lease by oldest tag a pull held its short wait (0.15-0.25 s)."""
CLAIMED_RECHECK = 5.0
"""Seconds a shard another process holds the claim of is left out of probes."""
HEAD_MEMORY = 5.0
"""Seconds the first task of a subscription, seen by a probe and given back, is remembered (its
age): a later lease by oldest tag weighs it against the hand without probing that subscription
again. A shard drained meanwhile by another process is found claimed (or emptier) when this
process then asks for it, which costs a pull, not a delivery."""
GRAB_PAUSE = 0.5
"""Seconds after a look at the claims subscription that won no token before the next (unless
a last look): every look holds the free tokens and the census for a moment, so idle processes
looking often would keep them from each other."""
CLAIM_SETTLE = 2.0
"""Seconds after winning a shard's claim in which this process pulls the shard again even when
it drained it to empty: a task given back to it just before (by a lease without tag, or a hold
that ran out) would otherwise wait for a later call."""
SIDE_BY_SIDE = 10.0
"""Seconds within which leases by tag of two threads make their leases side by side."""
SETTLE_WAIT = 1.0
"""Seconds the keeper waits for a lease call serving the hand before it settles the hand later."""

AHEAD_MOST = 2
"""Most times its subscription's ack deadline a held task's deadline is set to ahead of the
leases that will take it (Hand.set_ahead): a process that dies leaves them out at most that long."""

Wanted = Callable[[Delivery], bool]


@dataclass
class _Held:
    delivery: Delivery
    release_at: float


class Hand:
    """What this process holds of one queue, and the rules for holding and giving it back.

    Two locks, never held together the other way round:
    - the serve lock (reentrant) is taken for a whole lease call and for the keeper's settling,
      so one thread at a time takes from the hand, pulls into it, claims shards for it and
      settles it: a lease from any thread sees every task the process holds;
    - the state lock guards the fields (held deliveries, bytes, marks) for a few lines, never
      across a call to Pub/Sub, since pulls running side by side for the serving thread (in the
      RPC pool's threads) hold deliveries too.
    """

    def __init__(
        self,
        queue: str,
        topology: QueueTopology,
        *,
        settings: Settings,
        rpc: PubSubRpc,
        book: LeaseBook,
        claims: ShardClaims,
        republisher: Republisher,
        poke: Callable[[], None],
        changes: DeadlineChanges | None = None,
    ) -> None:
        self.queue = queue
        self.topology = topology
        self.settings = settings
        self.rpc = rpc
        self._book = book
        self._claims = claims
        self._republisher = republisher
        self._poke = poke
        self._changes = changes or DeadlineChanges()
        self._turns = Turns()
        self._lock = threading.Lock()
        self._held: OrderedDict[str, _Held] = OrderedDict()
        self._bytes = 0
        self._served: float | None = None
        """When this process last started a lease by oldest tag (POSIX seconds)."""
        self._marks: dict[str, float] = {}
        """Subscription -> until when (monotonic) probes leave it out: found empty, or claimed."""
        self._found_empty: dict[str, float] = {}
        """Subscription -> when (monotonic) a pull of this process last found it empty (since
        this process gave it nothing back)."""
        self._emptied: set[str] = set()
        """Subscriptions drained to empty into the hand and given nothing back since."""
        self._unclaimed: set[str] = set()
        """Shard subscriptions drained finding no token at all."""
        self._nothing: dict[bool, float] = {}
        """Whether a look saw every task (a lease without tag: shards claimed elsewhere too) ->
        when (monotonic) the last such look that found nothing began; cleared once something
        was held or given back since."""
        self._won: dict[str, float] = {}
        """Shard subscription -> when (monotonic) this process won its claim."""
        self._claimed: dict[str, float] = {}
        """Shard subscription -> until when (monotonic) another process is taken to hold its
        claim and serve its tasks: this process gave it that shard's tasks back."""
        self._late: dict[str, str] = {}
        """Ack ID -> subscription of each head a probe brought after its look answered: the next
        look gives such a head back unless it drains that subscription (late_probes)."""
        self._heads: dict[str, tuple[tuple[float, str], float]] = {}
        """Subscription -> the age of its first task, seen by a probe and given back, and until
        when (monotonic) that is trusted."""
        self._elsewhere = 0.0
        """Until when (monotonic) another process is taken to hold a shard's token: the last
        look at the claims subscription saw a token neither free nor this process's."""
        self._unseen: set[int] = set()
        """The shards whose token that look did not see (claims_freed asks for them)."""
        self._grab_pause = 0.0
        """Until when (monotonic) looks at the claims subscription other than last looks wait."""
        self._whole: dict[str, tuple[int, int]] = {}
        """Subscription -> most tasks and bytes the hand held of it after a drain to empty: what
        room a drain of a subscription is expected to need."""
        self._releasing: list[Future[None]] = []
        """Tokens given back while the lease that gave them goes on (release_claims `later`)."""
        self._lessees: dict[int, float] = {}
        """Thread -> when (monotonic) it last asked for the hand alone (a lease by tag)."""
        self._out: dict[str, tuple[int, int]] = {}
        """Subscription -> the room (tasks, bytes) kept for its drain out of the hand's turn
        (pubsub/prefetch.py): its tasks come to the hand when that drain is collected."""
        self._closed = False

    # Serving: one lease call at a time (plain leases side by side)

    @contextlib.contextmanager
    def serving(self, end: float, *, shared: bool = False) -> Iterator[None]:
        """Serve the hand in this thread alone until the block ends: a lease waits for another
        thread's (up to its deadline, `end` on the monotonic clock) rather than answer from
        half a hand. `shared`: beside other shared servers (plain leases, which take any
        task: several threads' pull side by side), never beside one alone (pubsub/turns.py)."""
        if not shared:
            with self._lock:
                now = time.monotonic()
                self._lessees[threading.get_ident()] = now
                for ident in [i for i, t in self._lessees.items() if t < now - SIDE_BY_SIDE]:
                    del self._lessees[ident]
        if not self._turns.acquire(shared=shared, timeout=end - time.monotonic()):
            raise DeadlineExceededError(
                "another thread of this process was serving the queue's held tasks for the"
                " whole deadline; back off and retry",
                queue=self.queue,
            )
        try:
            yield
        finally:
            self._turns.release()

    @contextlib.contextmanager
    def serving_by(self, until: float) -> Iterator[bool]:
        """As serving(), but yields False instead of raising when the hand is not free by
        `until` (monotonic): the block must then not touch the hand."""
        if not self._turns.acquire(shared=False, timeout=until - time.monotonic()):
            yield False
            return
        try:
            yield True
        finally:
            self._turns.release()

    def poke(self) -> None:
        """Let the keeper take a pass soon (Backend: it brings ended drains out of the turn to
        the hand, pubsub/pulls.py)."""
        self._poke()

    def side_by_side(self) -> bool:
        """True when leases by tag of more than one thread came within SIDE_BY_SIDE seconds:
        their order is one thread's against another's, not the queue's (pubsub/pulls.py
        serves what is whole in hand then while the next shard drains out of the turn)."""
        now = time.monotonic()
        with self._lock:
            return sum(t >= now - SIDE_BY_SIDE for t in self._lessees.values()) > 1

    def serving_oldest(self, now: float) -> None:
        """A lease by oldest tag starts: the hand's claimed shards are kept while it is served."""
        with self._lock:
            self._served = now

    def found_nothing(self, began: float, *, every_task: bool) -> None:
        """A lease's look begun at `began` (monotonic) found nothing this process may lease;
        `every_task` when it looked at shards claimed elsewhere too (a lease without tag)."""
        with self._lock:
            self._nothing[every_task] = began

    def found_nothing_since(self, began: float, *, every_task: bool) -> bool:
        """True when a look begun after `began` found nothing, with nothing held or given
        back since; with `every_task`, only a look at every task counts."""
        with self._lock:
            kinds = (True,) if every_task else (True, False)
            return any(self._nothing.get(kind, -math.inf) >= began for kind in kinds)

    # Holding and taking

    def hold(self, deliveries: list[Delivery]) -> None:
        """Keep deliveries for this process's next lease calls; give back what does not fit,
        and settle those whose time ran out while a lease call had them in hand."""
        if not deliveries:
            return
        full, due = self._put(deliveries, time.time())
        if len(full) + len(due) < len(deliveries):
            self._poke()
        if full:
            self.give_back(full)
        if due:
            self.settle(due)

    def _put(
        self, deliveries: Iterable[Delivery], now: float
    ) -> tuple[list[Delivery], list[Delivery]]:
        """Keep deliveries until the hold time after their pull, at most PULLQUEUE_PUBSUB_HOLD_MAX
        and PULLQUEUE_PUBSUB_HOLD_BYTES of them (one is kept whatever its size when none is held);
        the ones that did not fit, and the ones whose time is already up.

        The clock starts at the pull, not here: a delivery held, taken and held again never
        outstays the ack deadline its pull set.
        """
        hold_for = self.hold_for()
        limit = self.settings.pubsub_hold_max
        limit_bytes = self.settings.pubsub_hold_bytes
        full: list[Delivery] = []
        due: list[Delivery] = []
        with self._lock:
            self._nothing.clear()
            for delivery in deliveries:
                release_at = delivery.pulled_at + hold_for
                if release_at <= now:
                    due.append(delivery)
                elif len(self._held) < limit and (
                    not self._held or self._bytes + delivery.size <= limit_bytes
                ):
                    self._held[delivery.ack_id] = _Held(delivery, release_at)
                    self._bytes += delivery.size
                else:
                    full.append(delivery)
        return full, due

    def take(self, wanted: Wanted | None, limit: int) -> list[Delivery]:
        """Remove and return up to limit held deliveries that `wanted` accepts (all: None; then
        from as few subscriptions as may be, wire.fewest_sources: a plain lease's grant and
        delete cost a call per subscription of its tasks)."""
        with self._lock:
            if wanted is None:
                taken = fewest_sources([h.delivery for h in self._held.values()], max(limit, 0))
            else:
                taken = [h.delivery for h in self._held.values() if wanted(h.delivery)][
                    : max(limit, 0)
                ]
            for delivery in taken:
                del self._held[delivery.ack_id]
            self._took(taken)
            return taken

    def _took(self, deliveries: Iterable[Delivery]) -> None:
        self._bytes = max(self._bytes - sum(d.size for d in deliveries), 0)

    def count(self) -> int:
        with self._lock:
            return len(self._held)

    def held_bytes(self) -> int:
        """Bytes of the held deliveries (payloads and attributes)."""
        with self._lock:
            return self._bytes

    def room(self) -> int:
        """Deliveries the hand has room for (less what a drain out of the turn keeps)."""
        limit, _ = self.limits()
        with self._lock:
            return max(limit - len(self._held), 0)

    def room_bytes(self, taken: int = 0) -> int:
        """Bytes the hand has room for, with `taken` bytes of it out in a lease call."""
        _, limit = self.limits()
        with self._lock:
            return limit - self._bytes - taken

    def limits(self) -> tuple[int, int]:
        """Most tasks and bytes a lease call may fill the hand with: the hold limits less the
        room kept for the drains out of the hand's turn (drain_out)."""
        with self._lock:
            count = sum(c for c, _ in self._out.values())
            size = sum(b for _, b in self._out.values())
        return self.settings.pubsub_hold_max - count, self.settings.pubsub_hold_bytes - size

    # Drains out of the hand's turn (pubsub/prefetch.py)

    def drain_out(self, source: str, room: tuple[int, int]) -> None:
        """`source` is drained out of the hand's turn within `room` (tasks, bytes): that room
        is kept for it, its token is kept while it runs (release_claims), and lease calls
        leave it alone (out_of_turn) until its tasks come to the hand (drain_in)."""
        with self._lock:
            self._out[source] = room

    def drain_in(self, source: str) -> None:
        """The drain of `source` out of the turn was collected: its room is the hand's again."""
        with self._lock:
            self._out.pop(source, None)

    def out_of_turn(self) -> set[str]:
        """The subscriptions being drained out of the hand's turn."""
        with self._lock:
            return set(self._out)

    def holds_whole(self) -> bool:
        """True when the hand holds a task of a subscription drained to empty into it (a tag
        a lease by oldest tag may serve whole), none being drained out of the turn."""
        with self._lock:
            return any(True for _ in self._whole_held())

    def oldest_whole(
        self, age: Callable[[Delivery], tuple[float, str]]
    ) -> tuple[float, str] | None:
        """The age of the oldest task held of a subscription whole in hand (see holds_whole)."""
        with self._lock:
            return min((age(d) for d in self._whole_held()), default=None)

    def _whole_held(self) -> Iterator[Delivery]:
        """The held deliveries of subscriptions whole in hand (under the state lock)."""
        return (
            h.delivery
            for h in self._held.values()
            if h.delivery.subscription in self._emptied and h.delivery.subscription not in self._out
        )

    def room_beside(self, hand: list[Delivery]) -> tuple[int, int]:
        """Tasks and bytes the hand has room for beside `hand` (what a lease call took out of
        it), within limits()."""
        limit, limit_bytes = self.limits()
        return limit - len(hand), limit_bytes - sum(d.size for d in hand)

    def sources(self) -> set[str]:
        """The subscriptions the held deliveries came from."""
        with self._lock:
            return {h.delivery.subscription for h in self._held.values()}

    def next_release(self) -> float | None:
        """When the first held delivery's time is up (POSIX seconds); None when none is held."""
        with self._lock:
            return min((h.release_at for h in self._held.values()), default=None)

    def hold_for(self) -> float:
        """Seconds a delivery stays in hand after its pull (or its deadline's last extension)."""
        return min(self.settings.pubsub_hold_seconds, self.topology.ack_deadline / 2)

    def set_ahead(self, lease_seconds: float) -> None:
        """Set the deadlines of the held tasks of the shards this process serves (their token
        held, or drained finding none) to `lease_seconds` plus the hold time, in the background,
        where their deadline would not outlast a lease of that length begun within half the
        hold time: the next leases by tag of them (workers lease for one length) are answered
        without a round trip for their deadline, which is only shortened after the answer
        (acks.grant). Not past AHEAD_MOST times the subscription's ack deadline (nor 600 s):
        that long at most, a dead process's held tasks stay out of the queue. A held task's
        pull time is moved once the change is answered, so its deadline reads as set.

        Only where the server holds empty pulls (the service: a round trip costs there; on the
        emulator the 32-process fleet leased 0.88-0.95 of the legacy batch in 2 of 3 runs with
        it, 1.00 without)."""
        topology = self.topology
        if (
            not topology.ack_deadlines
            or lease_seconds <= 0
            or self.rpc.holds_empty_pulls is not True
        ):
            return
        hold = self.hold_for()
        seconds = math.ceil(lease_seconds + hold)
        mine = {topology.shards[k] for k in self._claims.holding(self.queue)}
        now = time.time()
        due: dict[str, list[str]] = {}
        with self._lock:
            if self._closed:
                return
            mine |= self._unclaimed
            for held in self._held.values():
                delivery = held.delivery
                deadline = topology.ack_deadlines.get(delivery.subscription)
                if (
                    delivery.subscription in mine
                    and deadline is not None
                    and seconds <= min(AHEAD_MOST * deadline, MAX_ACK_DEADLINE)
                    and delivery.pulled_at + deadline < now + lease_seconds + hold / 2
                    and not self._changes.in_flight(delivery.ack_id)
                ):
                    due.setdefault(delivery.subscription, []).append(delivery.ack_id)
        for source, ack_ids in due.items():
            at = time.time()
            answered = functools.partial(self._set_ahead, source, ack_ids, at + seconds)
            if not self._changes.send(
                self.rpc, source, ack_ids, seconds, queue=self.queue, answered=answered
            ):
                return

    def _set_ahead(
        self, source: str, ack_ids: list[str], until: float, future: Future[set[str]]
    ) -> None:
        """A set_ahead change was answered: the held tasks it set read as held `until`."""
        if future.exception() is not None:
            return  # Their deadlines stay as they were; the leases set them as before.
        stale = future.result()
        deadline = self.topology.ack_deadlines.get(source)
        if deadline is None:
            return
        moved = until - deadline
        with self._lock:
            for ack_id in ack_ids:
                held = self._held.get(ack_id)
                if held is not None and ack_id not in stale and held.delivery.pulled_at < moved:
                    held.delivery = replace(held.delivery, pulled_at=moved)

    # Marks: what probes leave out, and what a drain can skip

    def marked(self, source: str, now: float) -> bool:
        """True while the subscription is left out of probes (found empty or claimed)."""
        with self._lock:
            return self._marks.get(source, 0.0) > now

    def mark_empty(self, source: str) -> None:
        with self._lock:
            now = time.monotonic()
            self._marks[source] = now + EMPTY_RECHECK
            self._found_empty[source] = now
            self._heads.pop(source, None)

    def unanswered(self, source: str) -> None:
        """A pull of the subscription is left running past its wait where empty pulls are held
        (a pull where a task waits answers in a round trip): found empty, unless it brings tasks
        (probed)."""
        self.seen_empty(source)

    def seen_empty(self, source: str) -> None:
        """A glance found nothing more in the subscription right after a pull of the same lease
        brought tasks from it: found empty (empty_behind), not left out of probes (marked)."""
        with self._lock:
            self._found_empty[source] = time.monotonic()

    def found_empty_after(self, source: str, older: float) -> bool:
        """True when this process found the subscription empty (at any time) after `older` (a
        task's order, POSIX seconds), and gave it nothing back, nor saw a task of it, since: a
        task published there since is ordered after `older`; only one given back or delivered
        again (by another process) may come before it."""
        with self._lock:
            found = self._found_empty.get(source)
        return found is not None and older < time.time() - (time.monotonic() - found)

    def empty_behind(self, source: str, now: float, *, older: float | None = None) -> bool:
        """True when this process found the subscription empty less than EMPTY_BEHIND seconds
        ago and gave it nothing back since: a task there now came after those in hand. With
        `older` (a task's order, POSIX seconds), only if that is before it was found empty: a
        task published there since is ordered after it (unless given an ETA in the past)."""
        with self._lock:
            found = self._found_empty.get(source, -math.inf)
        if found + EMPTY_BEHIND <= now:
            return False
        return older is None or older < time.time() - (time.monotonic() - found)

    def unmark(self, sources: Iterable[str]) -> None:
        """This process gave tasks back to these subscriptions: they are not empty now."""
        with self._lock:
            self._nothing.clear()
            for source in sources:
                self._marks.pop(source, None)
                self._found_empty.pop(source, None)
                self._emptied.discard(source)

    def forget_empty(self, sources: Iterable[str]) -> None:
        """Look at these subscriptions again though found empty a moment ago: the server holds
        an empty pull until a message comes, so looking costs no calls while they stay empty."""
        with self._lock:
            for source in sources:
                self._marks.pop(source, None)

    def probed(self, sources: Iterable[str]) -> None:
        """A probe (or a pull answered after its lease) brought tasks of these subscriptions:
        they are not drained to empty."""
        with self._lock:
            for source in sources:
                self._emptied.discard(source)
                self._found_empty.pop(source, None)

    def probed_late(self, deliveries: Iterable[Delivery]) -> None:
        """A probe answered after its look with these heads, about to be held."""
        with self._lock:
            for delivery in deliveries:
                self._late[delivery.ack_id] = delivery.subscription

    def late_probes(self) -> set[str]:
        """The ack IDs of the heads probed late (probed_late) whose subscription was not
        drained since, forgotten: the look that asks counts them as its own probes' heads."""
        with self._lock:
            late, self._late = self._late, {}
            return set(late)

    def emptied(self, source: str) -> bool:
        """True when the subscription was drained to empty and given nothing back since."""
        with self._lock:
            return source in self._emptied

    def drained(self, source: str, whole: bool, hand: list[Delivery]) -> None:
        """A drain of `source` ended, `whole` when it found the subscription empty: remember
        the room that took (the most tasks and bytes of it in `hand`)."""
        with self._lock:
            self._heads.pop(source, None)
            for ack_id in [a for a, s in self._late.items() if s == source]:
                del self._late[ack_id]
            if not whole:
                self._emptied.discard(source)
                return
            self._emptied.add(source)
            mine = [d for d in hand if d.subscription == source]
            count, size = self._whole.get(source, (0, 0))
            self._whole[source] = (max(count, len(mine)), max(size, sum(d.size for d in mine)))

    def drain_size(self) -> tuple[int, int] | None:
        """The most tasks and bytes any subscription of the queue filled the hand with when
        drained to empty; None before one was."""
        with self._lock:
            sizes = list(self._whole.values())
        if not sizes:
            return None
        return max(c for c, _ in sizes), max(b for _, b in sizes)

    def no_room_for(self, source: str, hand: list[Delivery], partial: set[str]) -> bool:
        """True when the hand lacks the room a drain of `source` is expected to need (the most
        any subscription of the queue filled it with when drained to empty) while it holds
        tasks of other subscriptions it may serve instead: what is whole is served first."""
        with self._lock:
            sizes = list(self._whole.values())
        if not sizes or not any(
            d.subscription != source and d.subscription not in partial for d in hand
        ):
            return False
        count = max(c for c, _ in sizes)
        size = max(b for _, b in sizes)
        mine = [d for d in hand if d.subscription == source]
        room, room_bytes = self.room_beside(hand)
        return count - len(mine) > room or size - sum(d.size for d in mine) > room_bytes

    # Shard claims

    def may_drain(self, source: str, *, defer: bool = False) -> bool:
        """False for a shard whose token another process holds (it is draining that shard).

        `defer` (a look that ends with release_claims): the tokens and census a pull of the
        claims subscription brings and this does not keep go back with that release, beside
        the lease's grant, not in a call of their own now (a round trip in the hand's turn of
        every lease that drains a shard)."""
        topology = self.topology
        if source not in topology.shards:
            return True
        shard = topology.shards.index(source)
        had = shard in self._claims.holding(self.queue)
        outcome = self._claims.claim(
            self.queue, topology.claims, topology.claims_topic, shard, defer=defer
        )
        with self._lock:
            if outcome is Claim.OWNED and not had:
                self._won[source] = time.monotonic()
            if outcome is Claim.NO_TOKENS:
                self._unclaimed.add(source)
            if outcome is not Claim.TAKEN:
                self._claimed.pop(source, None)
        return outcome is not Claim.TAKEN

    def holds_claim(self, source: str) -> bool:
        """True unless `source` is a shard whose token this process does not hold."""
        topology = self.topology
        if source not in topology.shards:
            return True
        return topology.shards.index(source) in self._claims.holding(self.queue)

    def settling(self, source: str, now: float | None = None) -> bool:
        """True within CLAIM_SETTLE seconds of winning the shard's claim."""
        now = time.monotonic() if now is None else now
        with self._lock:
            won = self._won.get(source)
            return won is not None and now < won + CLAIM_SETTLE

    def ask_claims_again(self) -> bool:
        """Ask again for the claims of the shards given back to other processes: one whose
        claim this process wins now (its holder served it, or stopped) is probed again at once.
        True when one was won."""
        now = time.monotonic()
        with self._lock:
            sources = sorted(s for s, until in self._claimed.items() if until > now)
        won = False
        for source in sources:
            if self.may_drain(source):
                won = True
                with self._lock:
                    self._marks.pop(source, None)
        return won

    def claims_freed(self) -> bool:
        """One pull of the claims subscription for the tokens the last look did not see (other
        processes held them): True when this process won one now, its shard then probed at the
        next look. An idle process waiting on other processes' claims asks this, a call or two,
        rather than probe every subscription again."""
        topology = self.topology
        with self._lock:
            wanted = set(self._unseen)
        wanted -= self._claims.holding(self.queue)
        if not wanted:
            return False
        grab = self._claims.grab(
            self.queue, topology.claims, topology.claims_topic, wanted, pulls=1
        )
        with self._lock:
            self._unseen -= grab.won
            self._note_won(grab.won, time.monotonic())
            self._note_free(grab)
            for k in grab.won:
                self._marks.pop(topology.shards[k], None)
        return bool(grab.won)

    def _note_won(self, shards: Iterable[int], now: float) -> None:
        """Record the shards whose claim this process won at `now` (under the state lock)."""
        for k in shards:
            self._won[self.topology.shards[k]] = now
            self._claimed.pop(self.topology.shards[k], None)

    def _note_free(self, grab: Grab) -> None:
        """Forget the claims taken to be other processes' whose token the look saw free (or
        this process holds): a pull of the claims subscription brings a share of the free
        tokens, so one claim may have been taken for another process's on a share without it,
        and a process alone would then wait on a claim nobody holds (under the state lock)."""
        shards = self.topology.shards
        for k in range(len(shards)):
            if k not in grab.unseen:
                self._claimed.pop(shards[k], None)

    def held_elsewhere(self, source: str) -> bool:
        """True for a shard whose token another process is taken to hold: this process gave it
        that shard's tasks, or its last look at the claims subscription did not see the token
        (each within CLAIMED_RECHECK seconds)."""
        topology = self.topology
        if source not in topology.shards:
            return False
        now = time.monotonic()
        with self._lock:
            if self._claimed.get(source, 0.0) > now:
                return True
            return self._elsewhere > now and topology.shards.index(source) in self._unseen

    def spare_tokens(self) -> int:
        """How many shard tokens this process may hold beyond the one it needs (drains beside
        a drain) without keeping other processes off shards they would serve meanwhile: while
        its last look at the claims subscription saw others hold H of the queue's S shards,
        S // 2 - H - 1 (others keep at least half the shards, counting this one's as held)."""
        with self._lock:
            elsewhere = len(self._unseen)
        return max(len(self.topology.shards) // 2 - elsewhere - 1, 0)

    def claimed_elsewhere(self) -> bool:
        """True while another live process is taken to serve tasks this process cannot: it
        gave tasks back to that process's claimed shard, or its last look at the claims
        subscription saw another process's token (within CLAIMED_RECHECK seconds)."""
        now = time.monotonic()
        with self._lock:
            return self._elsewhere > now or any(until > now for until in self._claimed.values())

    def grab(self, sources: Iterable[str], *, thorough: bool, busy: bool) -> set[str] | None:
        """Win the free tokens of the given shard subscriptions (others are passed over): the
        shard subscriptions this process may probe now, those whose token it holds; None when
        the queue has no tokens at all (every shard may be probed, and drained unclaimed).

        Probing only shards whose token this process holds keeps it off the shards other
        processes drain: a head taken from one of those would split its tag between them. A
        `busy` look (the call has tasks in hand) is skipped while other processes hold tokens:
        the free ones are left to idle processes, and a pull of the claims subscription with
        none free would wait on real Pub/Sub. Only a last look (`thorough`) is never skipped."""
        topology = self.topology
        wanted = {topology.shards.index(s) for s in sources if s in topology.shards}
        holding = self._claims.holding(self.queue)
        grab = None
        with self._lock:
            now = time.monotonic()
            paused = not thorough and (now < self._grab_pause or (busy and now < self._elsewhere))
        if wanted - holding and not paused:
            # The census and the tokens not wanted go back with the tokens the look releases
            # (_collect_oldest_group ends with release_claims): one call, not one more round.
            grab = self._claims.grab(
                self.queue,
                topology.claims,
                topology.claims_topic,
                wanted - holding,
                thorough=thorough,
                defer=True,
            )
            if grab.no_tokens:
                return None
        now = time.monotonic()
        with self._lock:
            if grab is not None:
                self._elsewhere = now + CLAIMED_RECHECK if grab.elsewhere else 0.0
                self._unseen = set(grab.unseen)
                self._grab_pause = 0.0 if grab.won else now + GRAB_PAUSE
                self._note_won(grab.won, now)
                self._note_free(grab)
        mine = self._claims.holding(self.queue) & wanted
        return {topology.shards[k] for k in mine}

    # Remembered heads: what probes saw and gave back

    def remember(
        self, deliveries: Iterable[Delivery], age: Callable[[Delivery], tuple[float, str]]
    ) -> None:
        """Remember the age of each subscription's oldest delivery given (given back after a
        probe), for HEAD_MEMORY seconds."""
        oldest: dict[str, tuple[float, str]] = {}
        for delivery in deliveries:
            key = age(delivery)
            oldest[delivery.subscription] = min(oldest.get(delivery.subscription, key), key)
        until = time.monotonic() + HEAD_MEMORY
        with self._lock:
            for source, key in oldest.items():
                self._heads[source] = (key, until)

    def heads(self, now: float) -> dict[str, tuple[float, str]]:
        """The remembered first tasks' ages, by subscription, still trusted at `now`."""
        with self._lock:
            for source in [s for s, (_, until) in self._heads.items() if until <= now]:
                del self._heads[source]
            return {s: key for s, (key, _) in self._heads.items()}

    def unclaimed(self, source: str) -> bool:
        """True for a shard this process drained finding no token at all."""
        with self._lock:
            return source in self._unclaimed

    def release_claims(self, *, later: bool = False) -> None:
        """Give back the tokens of shards the hand holds no task of any more (and forget the
        shards drained unclaimed once it holds none of their tasks). A watch left running on
        such a shard (pubsub/pulls.py) is not left running again once it ends; what it brings
        meanwhile goes to the hand, a shard's tasks there that another process claims given to
        it by the next look (give_to_claimants).

        `later` (a lease that chose its tasks): the calls that give them back are made beside
        the rest of the lease (its grant) rather than before it, and out of the hand's turn
        (other threads' leases go on meanwhile); settle_releases waits for them. This
        process's books say they are given back at once either way.
        """
        topology = self.topology
        holding = self._claims.holding(self.queue)
        # A shard drained out of the turn keeps its token: its tasks come to the hand.
        in_hand = self.sources() | self.out_of_turn()
        with self._lock:
            self._unclaimed &= in_hand
        done = {k for k in holding if topology.shards[k] not in in_hand}
        renew_before = time.time() - topology.retention / 2
        send = self._claims.let_go(
            self.queue, topology.claims, topology.claims_topic, done, renew_before
        )
        if send is None:
            return

        def give_back() -> None:
            try:
                send()
            except Error as exc:
                # Tokens not given back come back by themselves when their ack deadline ends.
                log.warning("queue %r: could not give shard tokens back (%s)", self.queue, exc)

        if not later:
            give_back()
            return
        with self._lock:
            self._releasing = [f for f in self._releasing if not f.done()]
            self._releasing.append(self.rpc.start(give_back))

    def settle_releases(self) -> None:
        """Wait for the tokens release_claims gives back `later` to be given back."""
        with self._lock:
            pending, self._releasing = self._releasing, []
        for future in pending:
            future.result()

    def give_to_claimants(self, hand: list[Delivery], taken: set[str]) -> list[Delivery]:
        """Give back the tasks of shards another process is draining (it will serve them with
        the rest of their tags), leave those shards out of probes for a while; the rest."""
        self.give_back([d for d in hand if d.subscription in taken])
        with self._lock:
            for source in taken:
                self._marks[source] = self._claimed[source] = time.monotonic() + CLAIMED_RECHECK
                self._heads.pop(source, None)
        return [d for d in hand if d.subscription not in taken]

    # Settling and giving back

    def settle_due(self, now: float) -> None:
        """The keeper's pass: settle held deliveries whose time is up, under the serve lock
        (a hand busy serving a lease call is settled on a later pass, or by that call)."""
        if not self.count() or not self._turns.acquire(shared=False, timeout=SETTLE_WAIT):
            return
        try:
            self.settle(self._due(now))
        finally:
            self._turns.release()

    def _due(self, now: float) -> list[Delivery]:
        """Remove and return the held deliveries whose time is up by `now` (POSIX seconds)."""
        with self._lock:
            due = [
                self._held.pop(ack).delivery
                for ack, h in list(self._held.items())
                if h.release_at <= now
            ]
            self._took(due)
            return due

    def settle(self, deliveries: list[Delivery]) -> None:
        """Held deliveries whose time is up: those of shards this process holds the claim of are
        kept (their deadline extended) while it still leases by oldest tag, the rest given back.

        A drained shard's tags are served one lease each, which can take longer than the hold;
        giving its tasks back then would cost each a delivery and hand them to no one else (the
        claim keeps other processes off the shard). A process that stops leasing by oldest tag
        gives its hand back within twice the hold time of its last such lease.
        """
        if not deliveries:
            return
        topology = self.topology
        now = time.time()
        hold_for = self.hold_for()
        with self._lock:
            served = self._served
            closed = self._closed
        keep: list[Delivery] = []
        back: list[Delivery] = []
        if hold_for > 0 and served is not None and now - served <= hold_for and not closed:
            wanted = {
                topology.shards.index(d.subscription)
                for d in deliveries
                if d.subscription in topology.shards
            }
            try:
                claimed = self._claims.keep(self.queue, topology.claims, wanted)
            except Error as exc:
                log.warning("queue %r: could not renew shard tokens (%s)", self.queue, exc)
                claimed = set()
            # Shards drained finding no token at all are served the same way: no other process
            # could lease what this one holds, and giving it back costs a delivery.
            with self._lock:
                shards = {topology.shards[k] for k in claimed} | self._unclaimed
            for delivery in deliveries:
                if (
                    delivery.subscription in shards
                    and self.extendable(delivery, now)
                    and not self.near_limits(delivery, now)
                ):
                    keep.append(delivery)
                else:
                    back.append(delivery)
        else:
            back = deliveries
        kept: list[Delivery] = []
        for source, items in by_subscription(keep).items():
            seconds = topology.ack_deadlines.get(source, topology.ack_deadline)
            at = time.time()
            try:
                stale = self.rpc.modify(
                    source, [d.ack_id for d in items], seconds, queue=self.queue
                )
            except Error as exc:
                # Not extended: Pub/Sub delivers them again when their deadline ends.
                log.warning("queue %r: could not keep held tasks (%s)", self.queue, exc)
                continue
            # The deadline now runs from just before this request, as from a pull.
            kept += [replace(d, pulled_at=at) for d in items if d.ack_id not in stale]
        if kept:
            full, due = self._put(kept, time.time())
            back += full + due
            self._poke()
        self.give_back(back)

    def extendable(self, delivery: Delivery, now: float) -> bool:
        """True while a quarter of the delivery's ack deadline is left: a renewal sent later
        (the process stalled) might land after Pub/Sub gave the task to someone else, which
        without exactly-once delivery it would not refuse."""
        topology = self.topology
        deadline = topology.ack_deadlines.get(delivery.subscription, topology.ack_deadline)
        return now < delivery.pulled_at + deadline * 0.75

    def near_limits(self, delivery: Delivery, now: float) -> bool:
        """True when giving the delivery back could dead-letter it or outlive its retention."""
        return near_limits(self.topology, self.settings, delivery, now)

    def give_back(self, deliveries: list[Delivery]) -> None:
        """Give deliveries nobody leased back to Pub/Sub (republished when near a limit)."""
        if not deliveries:
            return
        now = time.time()
        renew: list[Delivery] = []
        back: list[Delivery] = []
        for delivery in deliveries:
            (renew if self.near_limits(delivery, now) else back).append(delivery)
        if renew:
            back += self._republisher.renew(self.queue, self.topology, renew)
        by_source = by_subscription(back)
        self.unmark(by_source)
        # A deadline set ahead and answered after the give-back would hide the task again.
        self._changes.wait([d.ack_id for d in back], self.rpc.timeout)
        # Every subscription's side by side: one round trip, not one per subscription (a lease
        # by oldest tag giving back the heads its probes took of a dozen shards made a dozen
        # calls one after another, 380 of its 730 ms at 30 ms round trips).
        sources = list(by_source)
        answers = self.rpc.run_each(
            [
                functools.partial(
                    self.rpc.modify,
                    source,
                    [d.ack_id for d in by_source[source]],
                    0,
                    queue=self.queue,
                )
                for source in sources
            ]
        )
        failure: Error | None = None
        for source, answer in zip(sources, answers, strict=True):
            if isinstance(answer, Error):
                failure = failure or answer
            else:
                self._book.skipped(by_source[source])
        if failure is not None:
            raise failure

    # The hand's end

    def clear(self) -> None:
        """Forget every held delivery (the queue was purged: they are gone)."""
        with self._lock:
            self._held.clear()
            self._late.clear()
            self._bytes = 0
            self._served = None

    def close(self) -> list[Delivery]:
        """Stop keeping anything past its hold; the held deliveries, forgotten (to give back)."""
        with self._lock:
            self._closed = True
            held = [h.delivery for h in self._held.values()]
            self._held.clear()
            self._bytes = 0
            return held


def near_limits(
    topology: QueueTopology, settings: Settings, delivery: Delivery, now: float
) -> bool:
    """True when giving the delivery back could dead-letter it or outlive its retention."""
    if delivery.attempt and delivery.attempt >= topology.max_attempts - ATTEMPTS_RESERVE:
        return True
    age = now - delivery.published
    hidden = settings.pubsub_max_deferral + settings.pubsub_hold_seconds
    return age + hidden >= topology.retention - min(RETENTION_RESERVE, topology.retention / 4)
