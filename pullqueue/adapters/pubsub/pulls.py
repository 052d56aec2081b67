"""The pull side of the Pub/Sub backend: the rounds of pulls a lease call runs (side by side,
probes, gathering and draining subscriptions into the hand) and what they learn of each one.

backend.py keeps the Backend methods and hands a lease's looking here, as hand.py keeps the
held tasks: one class per concern, each small enough to read whole (docs/architecture.md).
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from pullqueue.adapters.pubsub.acks import Early
from pullqueue.adapters.pubsub.hand import Hand, Wanted
from pullqueue.adapters.pubsub.leases import LeaseBook
from pullqueue.adapters.pubsub.prefetch import Prefetch, Prefetches
from pullqueue.adapters.pubsub.provision import QueueTopology
from pullqueue.adapters.pubsub.republish import Republisher
from pullqueue.adapters.pubsub.rpc import PARALLEL_PULLS, Pending, PubSubRpc
from pullqueue.adapters.pubsub.wire import Delivery, decode, fewest_sources
from pullqueue.config import Settings
from pullqueue.errors import Error
from pullqueue.logs import log_event

log = logging.getLogger(__name__)

PULL_SHARE = 100
"""Messages per pull when a lease call spreads a big pull over several (the emulator's cap)."""
NEXT_PULL_WAIT = 0.25
"""Most seconds a pull waits on an empty subscription once the lease call has tasks to answer
with (see _next_wait)."""
NEXT_PULL_ROUNDS = 4
"""Times a recent answer's time a pull waits on an empty subscription once the call has tasks."""
NEXT_PULL_LEAST = 0.15
"""Least seconds it waits then."""
HELD_SHARE = 0.9
"""Share of the pull wait a round of empty pulls took when the server held them (Pub/Sub does)."""
CLAIMANT_WAIT = 5.0
"""Seconds a lease by oldest tag that finds only tasks other processes hold (their shards'
claims) keeps looking before it answers []."""
CLAIMANT_POLL = 0.5
"""Seconds between those looks."""
EMPTY_POLL = 0.25
"""Seconds between the looks of a lease by oldest tag that found nothing, until the pull wait."""
PROBE_SIZE = 1
"""Messages a lease by oldest tag pulls from each subscription it holds nothing from."""
SPLIT_LEAST = 10
"""Where empty pulls are held, messages a subscription's last answer brought per pull a big
pull is split into (after an answer that brought fewer than asked; see _pull)."""
OVER_ASK_MOST = 4.0
"""Most times what a lease needs that its first round asks for, where pulls bring a share of
what waits (Pub/Sub; see _shares)."""
OVER_ASK_MARGIN = 1.5
"""What a round asks beyond what it needs over the answers' lately share (see _shares)."""
FULL_YIELD = 0.95
"""A share of what they asked for at which answers count as bringing all (no asking more)."""
DROP_GRACE = 0.35
"""Seconds a plain lease's pulls that are not patient are sent with beyond their wait, where
empty pulls are held (see _pull_each): on a loaded host (or a slow link) an answer bringing
messages took longer than a 0.15-0.25 s wait, and was dropped at the client's deadline."""
FEW_SHARE = 0.5
"""A plain lease's first round that pulled some subscriptions only (_choose) and brought less
than this share of what it needs pulls the others too."""
WATCH_LEASES = 1
"""Leases a watch (see PullRounds._watch) must have stood in for during its pull for it to be
left running again when that pull ends empty: one watch a subscription while leases come, none
once they stop."""
PART_SETTLE = 0.05
"""Least seconds the parts of a pull split into parts are waited for after one brought messages,
where empty pulls are held (more where answers take longer: a recent answer's time)."""
DRAIN_WIDE = 4
"""Most shards a lease by oldest tag drains side by side (the oldest head's and the next ones',
see PullRounds._beside), where the hand has room and other processes are left half the shards."""
OUT_ROOM = 1.5
"""Times the room a drain to empty needed so far (Hand.drain_size) a drain out of the hand's
turn is given (at most the hand's room): a shard with more tasks than that is drained in part."""
LANDED_WAIT = 1.0
"""Seconds the keeper waits for the hand to bring an ended drain out of the turn to it."""
OUT_SECONDS = 10.0
"""Most seconds a drain out of the hand's turn pulls."""
SIZE_GUESS = 2**20
"""Bytes per message assumed of a subscription nothing was pulled from yet (the legacy limit of
a task); after a pull, the largest message it brought, or an eighth of the guess before if more."""


class PullRounds:
    """A backend's pulls: what a lease call finds in the hand and pulls from a queue's
    subscriptions, with the size and answer-time estimates of each and the pulls in flight.

    `hand` gives a queue's hand (pubsub/hand.py); the queue's topology is opened first.
    """

    def __init__(
        self,
        settings: Settings,
        rpc: PubSubRpc,
        book: LeaseBook,
        republisher: Republisher,
        hand: Callable[[str], Hand],
    ) -> None:
        self.settings = settings
        self.rpc = rpc
        self._book = book
        self._republisher = republisher
        self._hand = hand
        self._rotation = 0
        self._sizes: dict[str, int] = {}
        """Subscription -> bytes per message a pull of it is sized by (see SIZE_GUESS)."""
        self._message_bytes: dict[str, int] = {}
        """Subscription -> the largest message of its last answer (or half the one before): the
        time a pull's answer is given to arrive follows it (rpc.answer_time)."""
        self._last: dict[str, tuple[int, int]] = {}
        """Subscription -> (asked, brought) of its last pull's answer."""
        self._emptied: dict[str, bool] = {}
        """Subscription -> its last pull was in parts and one of them brought nothing."""
        self._yield: float | None = None
        """Share of what they asked for that answers bringing messages brought, lately (1 on
        the emulator while messages wait; about a half where pulls bring a random share)."""
        self._in_flight: dict[str, int] = {}
        """Subscription -> pulls a lease answered without (run_until_useful) still running."""
        self._flight_began: dict[str, float] = {}
        """Subscription -> when (monotonic) the latest of those pulls began."""
        self._flight_lock = threading.Condition()
        self._watches: dict[str, int] = {}
        """Subscription -> leases that left it to its watch (a pull of _watch running on it)."""
        self._watch_began: dict[str, float] = {}
        """Subscription -> when (monotonic) its latest watch began."""
        self._held_parts: dict[str, int] = {}
        """Subscription -> parts of a pull left running past their round as held empty
        (_parts_running)."""
        self.closing = False
        """Set when the backend closes: no watch is left running again."""
        self._pulled: dict[str, float] = {}
        """Queue -> when (monotonic) probes of a lease by oldest tag last pulled any of it."""
        self._searched: dict[str, float] = {}
        """Queue -> when (monotonic) a lease's probes last pulled every subscription of it
        patiently and found nothing."""
        self._out = Prefetches()
        """The drains out of the hand's turn (pubsub/prefetch.py)."""

    def settle_flights(self, sources: Sequence[str], end: float, *, whole: bool = False) -> None:
        """Before a lease looks in the hand, wait for the pulls earlier leases left running on
        `sources` (their tasks are out to them, then to the hand): a lease by tag would miss
        its tag's tasks in such a pull and answer part of what waits.

        Waits no longer than `end`; unless empty pulls are known to be answered at once (the
        emulator), a pull is waited for no longer than a pull that brings tasks takes
        (_answer_allowance) after it began: later it is held empty (Pub/Sub), and waiting would
        cost each lease the rest of the pull wait. A pull bringing tasks slower than that on
        Pub/Sub still brings them after such a lease answered: to the next lease. `whole`
        waits for them until `end` all the same (a lease about to answer []).
        """
        called = time.monotonic()
        with self._flight_lock:
            if not any(self._running(s, whole, called) for s in sources):
                return
            wait = self.settings.pubsub_pull_wait
            quick = whole or self.rpc.holds_empty_pulls is False
            allowance = math.inf if quick else self._answer_allowance(wait)
            while True:
                now = time.monotonic()
                running = [s for s in sources if self._running(s, whole, called)]
                until = min([end] + [self._flight_began[s] + allowance for s in running])
                if not running or until <= now:
                    return
                self._flight_lock.wait(until - now)

    def _running(self, source: str, watched: bool, since: float) -> bool:
        """True while a pull is left running on `source`: with `watched`, a watch (unless left
        running again after `since`) and the parts of a pull left running as held empty count
        too (under the flight lock). Those are waited for only by a lease about to answer [],
        not by every lease: they bring a task to the hand the moment one comes, and would cost
        a lease that began just after they did the allowance of settle_flights."""
        if source not in self._in_flight:
            return False
        idle = (source in self._watches) + self._held_parts.get(source, 0)
        if (
            source in self._watches
            and self._in_flight[source] == 1
            and self._watch_began[source] > since
        ):
            # A watch left running again after `since` (the call's start): the one before it
            # ended, and brought nothing, within the call; waiting for this one would cost an
            # empty lease another pull wait.
            return False
        return watched or self._in_flight[source] > idle

    def await_claimants(
        self, queue: str, topology: QueueTopology, max_tasks: int, end: float
    ) -> list[Delivery]:
        """Before a lease by oldest tag answers [] while other processes hold the claims of
        shards it found tasks of (or whose tokens its last look did not see free), ask for
        those claims every CLAIMANT_POLL seconds for up to CLAIMANT_WAIT (never past the
        deadline less two pull waits): a claim won (its holder served the shard, or stopped)
        lets this call look again and drain the shard. The hand is let go between asks, so
        other threads lease meanwhile.

        An ask is one pull of the claims subscription and the give-back of the free tokens it
        brought (at most 4 calls a second); the subscriptions are probed again only when a
        claim is won: a look probes every one of them, held a pull wait each on Pub/Sub. A task
        published meanwhile to a shard nobody holds is the next lease's.
        """
        hand = self._hand(queue)
        give_up = min(time.monotonic() + CLAIMANT_WAIT, end - 2 * self.settings.pubsub_pull_wait)
        picked: list[Delivery] = []
        # Whether another process holds claims is known after a look (not after a pull of the
        # claims subscription alone, which may bring a share of the free tokens).
        waiting = hand.claimed_elsewhere()
        while not picked and waiting and time.monotonic() < give_up:
            time.sleep(max(min(CLAIMANT_POLL, give_up - time.monotonic()), 0.0))
            with hand.serving_by(give_up) as free:
                if not free:
                    break
                won = hand.ask_claims_again()
                won = hand.claims_freed() or won
                if won:
                    # One look (the shards won are probed; the rest were looked at already).
                    picked = self._collect_oldest_group(
                        queue, topology, max_tasks, end, last_look=False
                    )
                    waiting = hand.claimed_elsewhere()
        return picked

    def lease_oldest(
        self, queue: str, topology: QueueTopology, max_tasks: int, began: float, end: float
    ) -> list[Delivery]:
        """_collect_oldest_group, answering [] no sooner than the pull wait: a pull of an empty
        subscription may answer at once (the emulator does), and a process that finds nothing
        while other processes serve the shards would ask again and again, each call an empty
        lease. Looks every EMPTY_POLL seconds meanwhile; the last look is taken at the end.

        A call that waited for the hand (begun at `began`) while another thread's look found
        nothing, that look begun after this call and nothing held or given back since,
        answers [] at once: that look was this call's, and threads waiting in turn would
        otherwise add a pull wait each and run past their deadlines.
        """
        hand = self._hand(queue)
        if hand.found_nothing_since(began, every_task=False):
            return []
        until = min(time.monotonic() + self.settings.pubsub_pull_wait, end)
        if queue in self._searched or self.rpc.holds_empty_pulls:
            # Empty pulls are held (a look found nothing after the whole pull wait, or a pull
            # ran to its deadline): a look now waits in the server for tasks, rather than here
            # until the marks expire. A held look is the last (below): one that left out a
            # shard drained a moment ago answered [] while tasks added to it since waited.
            hand.forget_empty(topology.sources)
        last = settled = False
        while True:
            looked = time.monotonic()
            last = last or looked + EMPTY_POLL >= until
            picked = self._collect_oldest_group(
                queue, topology, max_tasks, end, last_look=last, patience=until
            )
            if picked:
                return picked
            if not last and self.rpc.holds_empty_pulls and self._pulled.get(queue, -1) < looked:
                # The look pulled nothing (every subscription found empty a moment ago): where
                # empty pulls are held, the last look waits in the server, not here.
                last = True
                continue
            if self._searched.get(queue, -math.inf) >= looked or (
                self.rpc.holds_empty_pulls and time.monotonic() + EMPTY_POLL >= until
            ):
                # The look pulled every subscription for the whole pull wait (Pub/Sub holds an
                # empty pull that long), or those this process may pull until the wait was over,
                # and found nothing: it was the last look. A process waiting on claims held
                # elsewhere looks again in await_claimants.
                last = True
            if last:
                # Pulls left running (by this call's look or an earlier lease's, answered after
                # their round) bring their tasks to the hand: answer [] only once they ended
                # and brought nothing (a worker stops at its first empty lease).
                self.settle_flights(topology.sources, end, whole=True)
                if hand.count() and not settled and time.monotonic() < end:
                    settled = True
                    continue
                hand.found_nothing(looked, every_task=False)
                return picked
            time.sleep(EMPTY_POLL)

    def lease_named(
        self, queue: str, topology: QueueTopology, tag: str, max_tasks: int, end: float
    ) -> list[Delivery]:
        """The tasks of a named tag: the hand's, then its subscriptions' (its shard's and the
        worker one), after the pulls earlier leases left running on them (settle_flights).

        Where empty pulls are held, a subscription this process found empty less than
        EMPTY_BEHIND seconds ago is not pulled its held short wait as before (in every lease of
        a per-tag cron, most of them empty: 150 ms each at 10 ms round trips): with a pull left
        running on it, that pull watches it (its tasks go to the hand); else it is glanced at
        (one round trip, in the round of the other pulls). A subscription a pull of this call
        brought tasks from is glanced at again, not held a short wait to find the rest of the
        tag gone. A task of the tag published a moment before such a glance may be missed by
        it (Pub/Sub answers what it has at hand): the tag's next lease takes it.
        """
        sources = topology.sources_of(tag)
        if self._hand(queue).out_of_turn().intersection(sources):
            # The tag's shard is being drained out of the turn: its tasks are this call's.
            self._collect_out(queue, wait=True)
        # Neither, unless empty pulls are held.
        watched, glances = self._quiet(queue, sources)
        looked = [s for s in sources if s not in watched]
        self.settle_flights(looked, end)
        return self.collect(
            queue,
            topology,
            looked,
            max_tasks,
            end,
            of_tag(tag),
            rotate=False,
            hold=False,
            glanced=glances,
        )

    def lease_any(
        self,
        queue: str,
        topology: QueueTopology,
        max_tasks: int,
        began: float,
        end: float,
        early: Early | None = None,
    ) -> list[Delivery]:
        """_collect_any; a call that waited for the hand while another thread's look found
        nothing (begun after this call, nothing held or given back since) answers [] at once,
        as in lease_oldest: N idle threads then cost one pull wait, not N in turn."""
        hand = self._hand(queue)
        if hand.found_nothing_since(began, every_task=True):
            return []
        # A drain out of the turn of a lease by oldest tag: its tasks are in hand first.
        self._collect_out(queue, wait=True)
        looked = time.monotonic()
        picked = self._collect_any(queue, topology, max_tasks, end, early)
        if not picked:
            hand.found_nothing(looked, every_task=True)
        return picked

    def _collect_any(
        self,
        queue: str,
        topology: QueueTopology,
        max_tasks: int,
        end: float,
        early: Early | None = None,
    ) -> list[Delivery]:
        """Up to max_tasks of any tag: held ones, then a share of the rest from every
        subscription side by side (so an empty queue answers after one pull wait, not one per
        subscription), then more from those that brought any.

        `early` (AckRounds.early_grant) sets the held ones' deadlines to the lease's while the
        pulls run: the grant then needs no round trip for them.
        """
        hand = self._hand(queue)
        picked = hand.take(None, max_tasks)
        if len(picked) >= max_tasks:
            return picked
        granting = early(picked) if early is not None and picked else None
        taken = len(picked)
        live = self._rotate(topology)
        need = max_tasks - len(picked)
        chosen = self._choose(live, need)
        left: list[str] = []
        looked = time.monotonic()
        try:
            found, more = self._pull_each(
                queue,
                topology,
                chosen,
                self._shares(chosen, need, hand.room()),
                end,
                patient=not picked and chosen == live,
                spread=True,
                any_answer=True,
                grace=True,
                graced_parts=True,
                left=left,
            )
            empty = not picked and not found
            if chosen != live and len(picked) + len(found) < max_tasks * FEW_SHARE:
                # The subscriptions that brought tasks lately had few or none now (drained by
                # other workers): the others that brought tasks when last pulled too, and every
                # one patiently before an answer of [] (a worker stops at its first empty
                # lease), for what is left of the pull wait (an empty lease takes a pull wait).
                again = live if empty else [s for s in live if s not in chosen and self._brought(s)]
                need = max_tasks - len(picked) - len(found)
                wait = self.settings.pubsub_pull_wait - (time.monotonic() - looked)
                extra, further = (
                    self._pull_each(
                        queue,
                        topology,
                        again,
                        self._shares(again, need, hand.room()),
                        end,
                        patient=empty,
                        spread=True,
                        any_answer=True,
                        grace=True,
                        graced_parts=True,
                        wait=max(wait, NEXT_PULL_LEAST) if empty else None,
                        left=left,
                    )
                    if again
                    else ([], [])
                )
                found += extra
                more += [s for s in further if s not in more]
                chosen = live if empty else chosen + again
        except Error:
            hand.hold(picked)
            raise
        # More may be in the sources that brought any: a pull often brings fewer than asked
        # (the emulator at most 100), or only tasks it may not hand out (ETA ahead, a copy).
        picked += found
        picked = self._rounds(queue, topology, more, picked, max_tasks, end, left)
        drained: set[str] = set()
        while left and len(picked) < max_tasks and time.monotonic() < end:
            if (
                max_tasks <= PULL_SHARE
                and len(picked) >= max_tasks * FEW_SHARE
                and set(left) <= {d.subscription for d in picked}
            ):
                # Pulls of subscriptions that brought this call tasks, still running past the
                # round's wait (a glance answered late on a loaded host; a first round's part
                # held empty): what they bring goes to the hand for the next lease. Waited for
                # to their deadline, held ones kept a lease with most of its batch a held
                # pull's grace more (0.6-0.9 s of leases answering in 0.1-0.3 s, at 30 ms round
                # trips). Not a lease of more than a pull's share: its big answers are slow to
                # come, and a lease of 1,000 of 1,099 waiting answered 874 in a CI run here.
                drained = set(left)
                left.clear()
                break
            # A round gave up on a pull still running: what it brings comes to the hand. It
            # may be bringing tasks while the lease would answer short of them (a pull split
            # into parts waits for all: one part held empty while the others brought the
            # subscription's messages, as Pub/Sub and the emulator answer pulls side by side
            # on one subscription; or a loaded host's slow answer).
            caught = self._catch_left(queue, left, max_tasks - len(picked), end)
            if not caught:
                break
            picked += caught
            brought = sorted({d.subscription for d in caught})
            picked = self._rounds(queue, topology, brought, picked, max_tasks, end, left)
        if len(picked) < max_tasks:
            # Short of the batch: the pulls the first round left running may be bringing
            # tasks (on a loaded machine an answer with tasks can come after the round ended);
            # they are waited for as long as such an answer takes, not a held empty pull's wait,
            # but to the end by a lease that would answer [] (the round ended on an answer with
            # nothing to hand out: copies acked away, ETAs ahead): a worker stops at its first
            # empty lease, and an empty lease waits a pull wait anyway.
            self.settle_flights([s for s in chosen if s not in drained], end, whole=not picked)
        if granting is not None:
            picked = granting() + picked[taken:]
        # What pulls left running brought meanwhile.
        picked += hand.take(None, max(max_tasks - len(picked), 0))
        if len(picked) > max_tasks:
            # What the lease answers with costs a grant and a delete call per subscription.
            picked.sort(key=_age)
            answer = fewest_sources(picked, max_tasks)
            kept = {d.ack_id for d in answer}
            hand.hold([d for d in picked if d.ack_id not in kept])
            return answer
        return picked

    def _rounds(
        self,
        queue: str,
        topology: QueueTopology,
        more: list[str],
        picked: list[Delivery],
        max_tasks: int,
        end: float,
        left: list[str],
    ) -> list[Delivery]:
        """A plain lease's rounds side by side of the sources that brought any, until the call
        has max_tasks or a round brings nothing: `picked` and what they found. A source whose
        pull a round left running is added to `left`.

        Where empty pulls are held, a round glances (`immediately`, one round trip): the round
        before may have drained what it pulls, and a pull held empty kept the lease its wait and
        grace (0.5 s; a lease of 5 tasks with 1,000 asked took 0.6 s at 10 ms round trips, 0.17
        s since). A glance the service answers without tasks that wait ends the rounds: the
        lease answers with what it has (never [] on a glance alone: an empty lease waits for
        its first round's pulls), the rest is the next lease's. Elsewhere (the emulator) an
        empty pull answers at once, and a round's pulls wait _next_wait for tasks."""
        hand = self._hand(queue)
        while more and len(picked) < max_tasks and time.monotonic() < end:
            shares = self._shares(more, max_tasks - len(picked), hand.room())
            try:
                found, more = self._pull_each(
                    queue,
                    topology,
                    more,
                    shares,
                    end,
                    patient=False,
                    spread=True,
                    cut=False,
                    grace=True,
                    graced_parts=True,
                    glance=more if self.rpc.holds_empty_pulls is True else (),
                    left=left,
                )
            except Error:
                hand.hold(picked)
                raise
            picked = picked + found
            if not found:
                break
        return picked

    def _catch_left(self, queue: str, left: list[str], limit: int, end: float) -> list[Delivery]:
        """Up to `limit` of what the pulls a plain lease's rounds left running on the sources
        of `left` (emptied) brought, once they ended: waited for as long as such a pull runs
        (its wait and the grace of its deadline), never past `end`. Only of sources whose last
        pull brought messages (the one left running, if it ended): a subscription found empty
        before, pulled in a first round beside the others, is held empty on Pub/Sub, and the
        lease would wait for that."""
        sources = sorted({s for s in left if self._brought(s)})
        left.clear()
        if not sources:
            return []
        until = min(end, time.monotonic() + self._next_wait() + DROP_GRACE)
        self.settle_flights(sources, until, whole=True)
        wanted = set(sources)
        return self._hand(queue).take(lambda d: d.subscription in wanted, limit)

    def _shares(self, sources: list[str], need: int, room: int) -> dict[str, int]:
        """How many of `need` tasks a round of pulls asks each source for: the sources whose
        last answer brought messages share it (all do when none did; the others are asked for
        an even share of it, in case tasks came since), and where pulls bring a share of what
        waits (Pub/Sub: it answers a pull with some of what waits; not the emulator, which answers
        empty pulls at once and brings all it is asked for while messages wait) they are
        asked for as many more as answers lately fell short, up to OVER_ASK_MOST times, so one
        round brings what the call needs: what comes beyond it is held (within `room`) for the
        next calls."""
        busy = [s for s in sources if self._brought(s)] or sources
        factor = self._over_ask()
        even = math.ceil(need / len(sources))
        most = math.ceil((need + max(room, 0)) / len(busy))
        each = max(min(math.ceil(need * factor / len(busy)), most), even)
        return {s: each if s in busy else even for s in sources}

    def _brought(self, source: str) -> bool:
        """Whether the subscription's last pull brought messages."""
        return self._last.get(source, (0, 0))[1] > 0

    def _over_ask(self) -> float:
        """Times what a lease needs that a round asks for: 1, or where pulls bring a share of
        what waits half as many again as the answers' average share (at most OVER_ASK_MOST)."""
        got = self._yield
        if self.rpc.holds_empty_pulls is not False and got is not None and got < FULL_YIELD:
            return min(OVER_ASK_MARGIN / max(got, 0.01), OVER_ASK_MOST)
        return 1.0

    def _choose(self, live: list[str], need: int) -> list[str]:
        """The subscriptions a plain lease's first round pulls: unless empty pulls are
        answered at once (the emulator), and once every one was pulled, as many of those whose
        last answer brought
        messages as a pull of PULL_SHARE each fills the need from (in the rotation's order), and
        one of the others (in turn, so tasks published to it are found); else all of them.

        A plain lease pulling all 17 subscriptions of a queue spread over shards spends 17
        pulls, then a grant and a delete call per subscription its tasks came from, where the
        raw client spends 2 calls for 100 messages of one. A round that brings less than
        FEW_SHARE of the need pulls the rest (_collect_any)."""
        with self._flight_lock:
            flying = set(self._in_flight)
        if self.rpc.holds_empty_pulls is False or any(
            s not in self._last and s not in flying for s in live
        ):
            return live
        # A pull left running (held, on Pub/Sub) brings what comes to the hand.
        busy = [s for s in live if s not in flying and self._brought(s)]
        idle = [s for s in live if s not in flying and not self._brought(s)]
        wanted = max(1, math.ceil(need * self._over_ask() / PULL_SHARE))
        chosen = busy[:wanted] + idle[:1]
        return chosen if 0 < len(chosen) < len(live) else live

    def _rotate(self, topology: QueueTopology) -> list[str]:
        """The queue's subscriptions, starting one further each call so none is starved."""
        sources = topology.sources
        self._rotation = (self._rotation + 1) % len(sources)
        return sources[self._rotation :] + sources[: self._rotation]

    def collect(
        self,
        queue: str,
        topology: QueueTopology,
        sources: list[str],
        max_tasks: int,
        end: float,
        wanted: Wanted | None,
        picked: list[Delivery] | None = None,
        *,
        rotate: bool = True,
        hold: bool = True,
        glanced: Collection[str] = (),
    ) -> list[Delivery]:
        """Up to max_tasks available deliveries `wanted` accepts: held ones first, then pulls.

        Sources are pulled in turn (`rotate`) or each until it is empty, in the order given.
        Deliveries pulled that are not wanted are held for this process's next lease calls; when
        the held buffer is full the scan stops rather than churn tasks back to Pub/Sub.

        Without `hold` an empty subscription is waited on as once a call has tasks (_next_wait,
        0.15-0.25 s), not the pull wait, even with nothing picked: a lease by a named tag, which
        a per-tag cron calls for every tag, most of them empty (Pub/Sub holds an empty pull to
        its deadline; a pull where tasks wait answers in a round trip). Where empty pulls are
        held, such a lease pulls a subscription again with `immediately` once a pull of this
        call brought tasks from it (lease_named), and the `glanced` ones so from the first.
        """
        hand = self._hand(queue)
        picked = picked if picked is not None else []
        picked += hand.take(wanted, max_tasks - len(picked))
        glancing = not hold and self.rpc.holds_empty_pulls is True
        glances = set(glanced)
        pulled: set[str] = set()  # sources a pull of this call (not a glance) brought tasks from
        active = list(sources)
        try:
            if len(active) > 1 and wanted is not None:
                # Every source at once, so a tag with no task waiting costs one pull wait
                # (Pub/Sub holds each empty pull that long), not one per source; with tasks in
                # hand, one short wait (_next_wait), not one per source. As below: the rest of
                # what a pull brings fills the hand for the next calls.
                size = min(max_tasks - len(picked) + hand.room(), 1000)
                # Without `hold`, where empty pulls are held, the round answers once a source
                # brought tasks (the others' pulls go on to the hand, as a plain lease's do).
                cut = not hold and self.rpc.holds_empty_pulls is True
                found, brought = self._pull_each(
                    queue,
                    topology,
                    active,
                    size,
                    end,
                    patient=hold and not picked,
                    spread=cut,
                    cut=cut,
                    grace=True,
                    join=True,
                    glance=glances,
                    # Glances follow (below): no part of it held empty its wait.
                    split=not glancing,
                )
                # A glance that brought nothing is not asked again in this call.
                active = brought
                pulled.update(s for s in brought if s not in glances)
                if glancing:
                    glances.update(brought)
                others: list[Delivery] = []
                for delivery in found:
                    if len(picked) < max_tasks and wanted(delivery):
                        picked.append(delivery)
                    else:
                        others.append(delivery)
                hand.hold(others)
            while len(picked) < max_tasks and active and time.monotonic() < end:
                source = active[0]
                want = max_tasks - len(picked)
                if wanted is not None:
                    room = min(hand.room(), self._fitting(source, hand.room_bytes()))
                    if room == 0:
                        break
                    want = min(want + room, 1000)
                glance = source in glances
                if glance:
                    ready = self._glance_at(queue, topology, source, want, end)
                else:
                    ready = self._pull_one(
                        queue,
                        topology,
                        source,
                        want,
                        end,
                        patient=hold and not picked,
                        split=not glancing,
                    )
                    if glancing:
                        glances.add(source)
                if ready is None:
                    if glance and source in pulled:
                        # A pull of this call brought tasks from it, and nothing more is at
                        # hand: as found empty (a glance after nothing but glances is not).
                        hand.seen_empty(source)
                    active.pop(0)
                    continue
                if not glance:
                    pulled.add(source)
                if rotate:
                    active.append(active.pop(0))
                extra: list[Delivery] = []
                for delivery in ready:
                    if len(picked) < max_tasks and (wanted is None or wanted(delivery)):
                        picked.append(delivery)
                    else:
                        extra.append(delivery)
                hand.hold(extra)
        except Error:
            hand.hold(picked)
            raise
        return picked

    def _collect_oldest_group(
        self,
        queue: str,
        topology: QueueTopology,
        max_tasks: int,
        end: float,
        *,
        last_look: bool = True,
        patience: float | None = None,
    ) -> list[Delivery]:
        """The tasks sharing the tag of the oldest available task in hand.

        The hand is what this process holds plus the head of every subscription it holds nothing
        from (a probe). The subscription the oldest task came from is then drained into the
        hand, since Pub/Sub hands out in no set order and an older task may be further back, and
        the oldest is chosen again; its tag's tasks are all in hand then, even with other
        processes leasing (they find that shard empty while this process serves it). With
        `last_look`, a call that finds nothing looks once more at every subscription.
        `patience` (monotonic): when a probe of a look with nothing in hand stops waiting for
        tasks (the call's pull wait, counted from the call's start); else a pull wait.
        """
        held = self._hand(queue)
        held.serving_oldest(time.time())
        self._collect_out(queue, wait=self._wait_out(queue))
        hand = held.take(None, self.settings.pubsub_hold_max + max_tasks)
        hand, drained, partial = self._gather(
            queue, topology, hand, end, fresh=False, patience=patience
        )
        if not hand and last_look and time.monotonic() < end:
            # A last look before answering []: every subscription, including those found empty
            # or claimed a moment ago (tasks may have been given back to them since). The
            # claims go back first, so a process that took a head of one of them while this one
            # drained it finds the claim free once it has given the head back. A drain out of
            # the turn is waited for first: its tasks are this call's.
            if self._collect_out(queue, wait=True):
                hand = held.take(None, self.settings.pubsub_hold_max + max_tasks)
            held.release_claims()
            hand, drained, partial = self._gather(
                queue, topology, hand, end, fresh=True, patience=patience
            )
        if not hand:
            held.release_claims()
            return []
        hand.sort(key=_age)
        # The oldest of the subscriptions whole in hand: a tag of one the hand had no room for
        # would be leased in parts.
        tag = next((d for d in hand if d.subscription not in partial), hand[0]).tag
        if tag is None:
            # The legacy rule: the untagged among the max_tasks oldest tasks.
            picked = [d for d in hand[:max_tasks] if d.tag is None]
        else:
            picked = [d for d in hand if d.tag == tag][:max_tasks]
        chosen = {d.ack_id for d in picked}
        held.hold([d for d in hand if d.ack_id not in chosen])
        if tag is not None:
            # Fill up from the tag's subscriptions, but not from one this call drained (all of
            # it is in hand) or found empty a moment ago, unless this process won its claim a
            # moment ago (other processes give back the heads of it they held). Where empty
            # pulls are held, a shard this call drained to empty is watched instead (a pull left
            # running brings such a head to the hand for the next lease): looking again now
            # costs a round trip in the hand's turn and finds only what came back since the
            # drain's last pull, a moment ago.
            now = time.monotonic()
            watching = self.rpc.holds_empty_pulls is True
            self._watch(
                queue,
                topology,
                sorted(
                    s for s in drained if held.settling(s, now) and held.emptied(s) and watching
                ),
            )
            try:
                out = held.out_of_turn()
                sources = [
                    source
                    for source in topology.sources_of(tag)
                    if source not in out
                    and (
                        (source not in drained and not held.marked(source, now))
                        or (
                            held.settling(source, now)
                            and not (watching and source in drained and held.emptied(source))
                        )
                    )
                    and (source not in topology.shards or held.may_drain(source, defer=True))
                ]
                sources = self._glance(queue, topology, sources, end)
            except Error:
                held.hold(picked)
                raise
            picked = self.collect(
                queue, topology, sources, max_tasks, end, of_tag(tag), picked, rotate=False
            )
        # Before the claims go back: the token of a shard probed in this call is still held.
        self._drain_next_out(queue, topology)
        # Beside the lease's grant (the backend waits for it after): one round trip less.
        held.release_claims(later=True)
        return picked

    # Drains out of the hand's turn (pubsub/prefetch.py)

    def _drain_next_out(self, queue: str, topology: QueueTopology) -> None:
        """At the end of a lease by oldest tag that leaves tags whole in hand while threads
        lease side by side (Hand.side_by_side), start draining out of the turn the shard of
        the oldest head a probe saw and gave back (_start_out), where other processes are left
        half the shards (Hand.spare_tokens; a lease that would drain that shard now claims it
        either way): the next leases are served from the hand meanwhile. In the hand's turn,
        before its claims go back: the token of a shard probed in the call is still held, and
        kept."""
        if self._out.running(queue) is not None or self.rpc.holds_empty_pulls is not True:
            return
        held = self._hand(queue)
        if not held.side_by_side() or not held.holds_whole():
            # One thread leasing, or nothing to serve meanwhile: the next lease drains in its
            # turn, and the token stays free for other processes until then (a worker alone
            # may be in a handler for minutes).
            return
        in_hand = held.sources()
        heads = sorted(
            (age, s)
            for s, age in held.heads(time.monotonic()).items()
            if s in topology.shards and s not in in_hand and not held.held_elsewhere(s)
        )
        if heads and held.spare_tokens() >= 1:
            self._start_out(queue, topology, heads[0][1], [], heads[0][0])

    def _drains_out(
        self,
        queue: str,
        topology: QueueTopology,
        source: str,
        hand: list[Delivery],
        oldest: Mapping[str, tuple[float, str]],
        partial: set[str],
        age: tuple[float, str],
    ) -> bool:
        """True when a look (_gather) leaves `source`, the oldest candidate to drain (its
        oldest task's age `age`), to a drain out of the hand's turn: threads lease side by side
        (Hand.side_by_side), the hand holds tags whole in it to serve them meanwhile
        (`oldest`: the oldest in `hand` of each subscription), and one runs for the queue
        already, or one is started now for `source` (_start_out). A thread leasing alone
        drains it in its turn: the legacy order, the oldest task's tag first."""
        if self.rpc.holds_empty_pulls is not True:
            return False
        held = self._hand(queue)
        if not held.side_by_side():
            return False
        if not any(s != source and s not in partial and held.emptied(s) for s in oldest):
            return False
        if self._out.running(queue) is not None:
            return True
        return self._start_out(queue, topology, source, hand, age)

    def _start_out(
        self,
        queue: str,
        topology: QueueTopology,
        source: str,
        hand: list[Delivery],
        head: tuple[float, str],
    ) -> bool:
        """Start draining the shard `source` (its oldest known task's age `head`) out of the
        hand's turn (pubsub/prefetch.py), with its tasks in `hand` (a lease's, taken from the
        hand; they go with the drain): where
        empty pulls are held (a drain costs 0.25-0.5 s at 30 ms round trips, every other
        thread waiting on it in the turn; milliseconds on the emulator), the hand has the room
        a drain to empty needed so far (Hand.drain_size), none runs for the queue, no pull is
        left running on the shard and, unless this process holds its token, no other process
        is taken to hold it (Hand.held_elsewhere). The room is kept for it
        (Hand.drain_out) and its token with it; the lease that needs its tasks collects it
        (_wait_out, _collect_out). True when started."""
        if self.closing or self.rpc.holds_empty_pulls is not True:
            return False
        if self._out.running(queue) is not None or source not in topology.shards:
            return False
        held = self._hand(queue)
        size = held.drain_size()
        if size is None or size[0] < 1:
            return False
        if not held.holds_claim(source) and held.held_elsewhere(source):
            return False
        with self._flight_lock:
            if source in self._in_flight:
                return False
        mine = [d for d in hand if d.subscription == source]
        mine_bytes = sum(d.size for d in mine)
        room, room_bytes = held.room_beside(hand)
        room -= held.count()
        room_bytes -= held.held_bytes()
        if room < size[0] - len(mine) or room_bytes < size[1] - mine_bytes:
            return False
        # As much as a drain to empty needed so far and half again. Bytes as much, or the same
        # share of the room, or a full pull's worth by the subscription's size estimate (a
        # pull is sized by it: a probe's one message leaves it at an eighth of a 1 MiB guess),
        # whichever is most.
        count = min(room, math.ceil(size[0] * OUT_ROOM))
        estimate = self._sizes.get(source, SIZE_GUESS)
        kept = min(
            room_bytes,
            max(
                math.ceil(size[1] * OUT_ROOM),
                room_bytes * count // room,
                min(count, PULL_SHARE) * estimate,
            ),
        )
        if mine:
            hand[:] = [d for d in hand if d.subscription != source]
        held.drain_out(source, (count + len(mine), kept + mine_bytes))
        prefetch = Prefetch(source, (count, kept), found=mine, head=head)
        try:
            self._out.start(
                queue,
                prefetch,
                functools.partial(self._drain_out, queue, topology),
                functools.partial(self._landed, queue),
            )
        except BaseException:
            held.drain_in(source)
            hand += mine
            raise
        return True

    def _drain_out(self, queue: str, topology: QueueTopology, prefetch: Prefetch) -> None:
        """A drain out of the hand's turn, in its own thread: the shard's claim (kept from the
        call that started it, or asked for), then _drain within the room kept for it. What it
        found waits in `prefetch` for _collect_out."""
        if not self._hand(queue).may_drain(prefetch.source):
            prefetch.claimed = False
            return
        found, prefetch.whole = self._drain(
            queue,
            topology,
            prefetch.source,
            [],
            time.monotonic() + OUT_SECONDS,
            room=prefetch.room,
        )
        prefetch.found = prefetch.found + found

    def _wait_out(self, queue: str) -> bool:
        """Whether a lease by oldest tag waits for the queue's drain out of the turn before it
        looks: when the hand holds no task of a subscription whole in it (nothing to serve
        meanwhile), and, with one thread leasing, when the drain's shard holds an older task
        than those (the legacy order, which a worker alone follows). With threads leasing side
        by side, it serves the oldest tag whole in hand meanwhile (docs/pubsub.md)."""
        prefetch = self._out.running(queue)
        if prefetch is None:
            return False
        held = self._hand(queue)
        if not held.holds_whole():
            return True
        if held.side_by_side():
            return False
        oldest = held.oldest_whole(_age)
        return prefetch.head is None or oldest is None or prefetch.head < oldest

    def _collect_out(self, queue: str, *, wait: bool) -> bool:
        """Bring what the queue's drain out of the turn found to the hand once it ended (with
        `wait`, once it ends): True when one was collected. Its shard counts as drained to
        empty (its tags whole in hand) only when the drain found it empty and all of it fit."""
        prefetch = self._out.collect(queue, wait=wait)
        if prefetch is None:
            return False
        held = self._hand(queue)
        held.drain_in(prefetch.source)
        if not prefetch.claimed:
            # Another process holds the shard's claim: that process drains it, with the tasks
            # of it a lease had (given back).
            held.give_to_claimants(prefetch.found, {prefetch.source})
            return True
        if prefetch.failed is not None:
            # What the lease had of it comes to the hand, and what the drain found before it
            # failed is there (_drain holds it): its tags in part.
            held.hold(prefetch.found)
            log.warning(
                "queue %r: a drain of %s out of the hand's turn failed (%s); it is drained"
                " again by a later lease",
                queue,
                prefetch.source,
                prefetch.failed,
            )
            held.drained(prefetch.source, False, [])
            return True
        found = prefetch.found
        if not found and not prefetch.whole:
            # It pulled nothing (its deadline, or no room by the size estimate): the shard is
            # as it was, its first task still remembered.
            return True
        fits = held.room() >= len(found) and held.room_bytes() >= sum(d.size for d in found)
        held.hold(found)
        held.drained(prefetch.source, prefetch.whole and fits, found)
        return True

    def _landed(self, queue: str) -> None:
        """A drain out of the turn ended (in its thread): its tasks go to the hand now if no
        lease serves it (the next would collect them), else the keeper's next pass brings
        them (collect_landed): a process whose threads are all in handlers holds them then
        by the hand's rules (given back within twice the hold time once it stops leasing),
        not out of the hand for as long, their shard's token kept."""
        held = self._hand(queue)
        with held.serving_by(time.monotonic()) as free:
            if free:
                self._collect_out(queue, wait=False)
                return
        held.poke()

    def collect_landed(self) -> None:
        """The keeper's pass: bring the ended drains out of the turn to their hands, each in
        the hand's turn (waited for up to a second, else on a later pass)."""
        for queue in self._out.queues(ended=True):
            with self._hand(queue).serving_by(time.monotonic() + LANDED_WAIT) as free:
                if free:
                    self._collect_out(queue, wait=False)

    def finish_out(self, queue: str | None = None) -> None:
        """Wait for the drains out of the turn (of `queue`, else of every queue) and bring
        what they found to the hand: the backend's close gives it back with the hand, a purge
        forgets it."""
        for name in [queue] if queue is not None else self._out.queues():
            self._collect_out(name, wait=True)

    def _glance_at(
        self, queue: str, topology: QueueTopology, source: str, size: int, end: float
    ) -> list[Delivery] | None:
        """One pull of `source` with `immediately` (a glance): not held, so waited for with
        DROP_GRACE too, and a late answer is not dropped."""
        return self._pull(
            queue, topology, source, size, end, patient=False, grace=DROP_GRACE, immediately=True
        )

    def _quiet(self, queue: str, sources: Sequence[str]) -> tuple[set[str], list[str]]:
        """Of `sources`, where empty pulls are held, those this process found empty less than
        EMPTY_BEHIND seconds ago: (those a pull left running watches, the others)."""
        if self.rpc.holds_empty_pulls is not True:
            return set(), []
        held = self._hand(queue)
        now = time.monotonic()
        behind = [s for s in sources if held.empty_behind(s, now)]
        with self._flight_lock:
            flying = {s for s in behind if s in self._in_flight}
            for source in flying & set(self._watches):
                self._watches[source] += 1
        return flying, [s for s in behind if s not in flying]

    def _glance(
        self, queue: str, topology: QueueTopology, sources: list[str], end: float
    ) -> list[str]:
        """The sources a fill-up of a lease by oldest tag pulls. Where empty pulls are held, a
        subscription a pull of this process found empty less than EMPTY_BEHIND seconds ago (a
        shard it drained, the worker subscription its probes found empty) is not pulled as
        before, held its short wait when nothing came since (in every lease by oldest tag: 150
        of its 240 ms at 30 ms round trips):
        - with a pull left running on it, that pull watches it: a task published there is
          answered to it at once and goes to the hand, which a lease takes first;
        - else it is pulled once with `immediately` (one round trip) and left out when that
          brought nothing; what it brought goes to the hand (the fill-up takes it from there)
          and the subscription is pulled as before. A task published a moment before such a
          pull may be missed by it (Pub/Sub answers with what it has at hand): a later lease
          of its tag leases it. A glance that fails leaves the subscription to the fill-up.
        A glance that finds nothing does not mark the subscription found empty: only a held
        pull does, so glances stand in for at most EMPTY_BEHIND seconds after one.
        """
        watched, glances = self._quiet(queue, sources)
        if not watched and not glances:
            return sources
        held = self._hand(queue)
        size = max(min(held.room(), 1000), 1)
        quiet: set[str] = set()
        results = self.rpc.run_each(
            [functools.partial(self._glance_at, queue, topology, s, size, end) for s in glances]
        )
        for source, result in zip(glances, results, strict=True):
            if isinstance(result, Error):
                continue
            if result is None:
                quiet.add(source)
            else:
                held.hold(result)
                held.probed([source])
        self._watch(queue, topology, sorted(quiet))
        return [s for s in sources if s not in quiet and s not in watched]

    def _watch(self, queue: str, topology: QueueTopology, sources: Sequence[str]) -> None:
        """Leave a pull running on each of `sources` (found empty; no pull running on it), held
        in the server up to the pull wait: a task published there meanwhile is answered to it
        at once and goes to the hand. Later fill-ups leave the subscription to it (_quiet)
        rather than glance at it, a round trip in the hand's turn of every lease by oldest tag
        (37 of a 40 ms lease at 30 ms round trips, the worker subscription being empty when
        every task is tagged). A watch that ends empty is left running again while leases
        come (WATCH_LEASES); one that brought tasks is not (a fill-up pulls the subscription,
        its tasks in hand first). A shard's is started only while this process holds its
        token (a fill-up pulls a shard only then) and not left running again once the token
        went back (the hand held none of the shard's tasks): what it brought meanwhile is given
        to the process that claims the shard by the next look. Only where empty pulls are
        held; never once the backend closes.
        """
        if self.closing or self.rpc.holds_empty_pulls is not True:
            return
        held = self._hand(queue)
        for source in sources:
            with self._flight_lock:
                if source in self._in_flight:
                    continue
                self._in_flight[source] = 1
                self._flight_began[source] = self._watch_began[source] = time.monotonic()
                self._watches[source] = 0
            held.unanswered(source)
            wait = self.settings.pubsub_pull_wait
            pull = functools.partial(
                self._pull,
                queue,
                topology,
                source,
                max(min(held.room(), 1000), 1),
                time.monotonic() + wait + DROP_GRACE,
                patient=True,
                wait=wait,
                grace=DROP_GRACE,
                split=False,
            )
            try:
                future = self.rpc.start(pull)
            except RuntimeError:  # the pool shut down: the backend is closing
                self._watched(queue, topology, source, None)
                return
            future.add_done_callback(functools.partial(self._watch_ended, queue, topology, source))

    def _watch_ended(
        self,
        queue: str,
        topology: QueueTopology,
        source: str,
        future: Future[list[Delivery] | None],
    ) -> None:
        """A watch's pull ended: what it brought to the hand; left running again (_watch) when
        it brought nothing and leases stood on it meanwhile."""
        error = future.exception()
        result = None if error is not None else future.result()
        again = self._watched(queue, topology, source, result, failed=error is not None)
        if again and self._hand(queue).holds_claim(source):
            self._watch(queue, topology, [source])

    def _watched(
        self,
        queue: str,
        topology: QueueTopology,
        source: str,
        result: list[Delivery] | None,
        *,
        failed: bool = False,
    ) -> bool:
        """Book a watch's end: True when it should be left running again."""
        held = self._hand(queue)
        try:
            if result:
                held.hold(result)
                held.probed([source])
            elif not failed:
                held.mark_empty(source)
        finally:
            with self._flight_lock:
                used = self._watches.pop(source, 0)
                self._flight_ended(source)
        return not result and not failed and used >= WATCH_LEASES

    def _gather(
        self,
        queue: str,
        topology: QueueTopology,
        hand: list[Delivery],
        end: float,
        *,
        fresh: bool,
        patience: float | None = None,
    ) -> tuple[list[Delivery], set[str], set[str]]:
        """The hand plus the heads of the subscriptions it has nothing from (of the shards,
        those whose token this process holds or wins), with the subscription of the oldest
        drained into it (again while that changes), the oldest weighed with the first tasks
        probes saw a moment ago and gave back; the subscriptions drained, and those of them the
        hand had no room for all of (their tasks are not candidates for the oldest then, unless
        nothing else is in hand). `fresh` ignores the marks of subscriptions found empty or
        claimed a moment ago and the remembered first tasks.

        Tasks in hand of a shard another process holds (a lease without tag pulled them) are
        given back to it; in the last look (`fresh`) its claim is asked for once more. Heads
        probed and not drained are given back with their tokens (_give_probes_back).
        """
        held = self._hand(queue)
        drained: set[str] = set()
        # The subscriptions a drain pulled (`drained` has every one weighed as the oldest).
        pulled: set[str] = set()
        # Heads probes of earlier looks brought after those looks answered: this look's too.
        late = held.late_probes()
        # A shard drained out of the hand's turn is left to that drain (_drain_next_out).
        partial: set[str] = held.out_of_turn()
        try:
            # First tasks probes saw a moment ago and gave back: not probed again, but weighed
            # with the hand.
            seen = {} if fresh else held.heads(time.monotonic())
            probed = self._probe(queue, topology, hand, end, seen, fresh=fresh, patience=patience)
            held.probed({d.subscription for d in probed})
            hand += probed
            present = {d.subscription for d in hand}
            heads = {s: age for s, age in seen.items() if s not in present}
            taken: set[str] = set()
            # The oldest in hand of each subscription, kept up as drains add to the hand (it
            # holds thousands of tasks while a drained shard's tags are served).
            oldest: dict[str, tuple[float, str]] = {}
            _oldest_of(hand, oldest)
            while candidates := [
                (age, s)
                for s, age in [*oldest.items(), *heads.items()]
                if s not in taken and s not in partial
            ]:
                source = min(candidates)[1]
                if source in drained or time.monotonic() >= end:
                    break
                drained.add(source)
                remembered = heads.pop(source, None) is not None
                # Unless remembered, the oldest came from `hand`, so it holds tasks of `source`.
                if not fresh and not remembered and held.emptied(source):
                    # Drained to empty in an earlier call and given nothing back since: what
                    # came later is younger than what is in hand from it.
                    continue
                if (
                    remembered
                    and not held.holds_claim(source)
                    and held.no_room_for(source, hand, partial)
                ):
                    # A head given back (the hand holds no task of it, none to give to another
                    # process holding the claim) and no room to drain its shard in this call:
                    # not claimed. Claimed first, it cost a pull of the claims subscription
                    # (won, then given back at the end of the call) in lease after lease while
                    # the hand was served: 36 of one process's 44 claims in a fleet of 2 x 4 at
                    # 30 ms round trips. (Tasks of it in hand would be given to the claim's
                    # holder, below: kept, they were out of its leases, 200 of them late.)
                    partial.add(source)
                    continue
                if not fresh and self._drains_out(
                    queue, topology, source, hand, oldest, partial, min(candidates)[0]
                ):
                    # The hand serves tags whole in it meanwhile; this shard's come to it
                    # with its drain out of the turn (_collect_out).
                    partial.add(source)
                    oldest.pop(source, None)
                    continue
                if held.may_drain(source, defer=True):
                    if held.no_room_for(source, hand, partial):
                        # Serve what is whole in hand first; draining this now would fill the
                        # hand with parts of subscriptions and lease their tags in parts.
                        partial.add(source)
                        continue
                    beside = (
                        []
                        if fresh
                        else self._beside(queue, source, hand, oldest, heads, drained, partial)
                    )
                    if not beside:
                        drains = [
                            (source, *self._drain(queue, topology, source, hand, end, fresh=fresh))
                        ]
                    else:
                        drains = self._drain_side_by_side(
                            queue, topology, [source, *beside], hand, end
                        )
                    for one, found, whole in drains:
                        drained.add(one)
                        pulled.add(one)
                        heads.pop(one, None)
                        hand += found
                        _oldest_of(found, oldest)
                        held.drained(one, whole, hand)
                        if not whole:
                            partial.add(one)
                elif not held.unclaimed(source):
                    taken.add(source)
            if taken:
                hand = held.give_to_claimants(hand, taken)
                for source in sorted(taken) if fresh else ():
                    if held.may_drain(source, defer=True):
                        hand += self._drain(queue, topology, source, hand, end, fresh=True)[0]
                        pulled.add(source)
            hand = self._give_probes_back(queue, hand, probed, late, pulled)
        except Error:
            held.hold(hand)
            raise
        return hand, drained, partial

    def _beside(
        self,
        queue: str,
        source: str,
        hand: list[Delivery],
        oldest: Mapping[str, tuple[float, str]],
        heads: Mapping[str, tuple[float, str]],
        drained: set[str],
        partial: set[str],
    ) -> list[str]:
        """The shards to drain beside `source` (the oldest task's, about to be drained): up to
        DRAIN_WIDE - 1, oldest head first (`oldest`: the oldest in `hand` of each subscription,
        as _gather keeps it; `heads`: the first tasks probes saw a moment ago and gave back).

        Where empty pulls are held (the service), a drain costs its claim, a pull or two and a
        held part, 0.15-0.45 s at 30 ms round trips, and a process's leases by oldest tag take
        its hand one at a time: the shards of the next oldest heads (ones a probe brought, or
        saw a moment ago and gave back) drained beside it serve their tags from the hand later
        without a look of their own. As many as the hand has room for, each drain given an
        equal share of it and as large as any drained to empty yet, and as other processes are
        left at least half the shards (Hand.spare_tokens)."""
        if self.rpc.holds_empty_pulls is not True:
            return []
        held = self._hand(queue)
        size = held.drain_size()
        spare = min(held.spare_tokens(), DRAIN_WIDE - 1)
        if size is None or spare < 1:
            return []
        room, room_bytes = held.room_beside(hand)
        most = min(spare, min(room // max(size[0], 1), room_bytes // max(size[1], 1)) - 1)
        if most < 1:
            return []
        shards = set(held.topology.shards)
        # A task in hand of a shard drained to empty before is one of its tasks (all of that
        # shard is in hand); a remembered head was given back, its shard not drained since.
        firsts = {s: age for s, age in oldest.items() if not held.emptied(s)}
        for s, age in heads.items():
            firsts[s] = min(firsts.get(s, age), age)
        later = sorted(
            (age, s)
            for s, age in firsts.items()
            if s != source and s in shards and s not in drained and s not in partial
        )
        return [s for _, s in later[:most]]

    def _drain_side_by_side(
        self,
        queue: str,
        topology: QueueTopology,
        sources: list[str],
        hand: list[Delivery],
        end: float,
    ) -> list[tuple[str, list[Delivery], bool]]:
        """_drain of several subscriptions side by side, each within an equal share of the
        hand's room: (the subscription, what its drain found, whether whole) of each drained;
        one after the first is not when another process holds its shard's claim (asked for
        in its drain's thread). Those after the first run in threads of their own: a drain's
        pulls run in the pull pool, which its threads must not wait on (PubSubRpc.run_each)."""
        share = len(sources)
        held = self._hand(queue)
        room_count, room_bytes = held.room_beside(hand)
        room = (room_count // share, room_bytes // share)
        outcomes: dict[int, tuple[list[Delivery], bool] | BaseException | None] = {}

        def other(i: int) -> None:
            try:
                outcomes[i] = (
                    self._drain(queue, topology, sources[i], hand, end, room=room)
                    if held.may_drain(sources[i], defer=True)
                    else None
                )
            except BaseException as exc:  # raised in the calling thread below
                outcomes[i] = exc

        threads = [
            threading.Thread(target=other, args=(i,), name="pullqueue-drain-beside", daemon=True)
            for i in range(1, share)
        ]
        for thread in threads:
            thread.start()
        try:
            first = self._drain(queue, topology, sources[0], hand, end, room=room)
        except BaseException:
            # (The first's found tasks are held by _drain.) The others' are held too.
            for thread in threads:
                thread.join()
            for outcome in outcomes.values():
                if isinstance(outcome, tuple):
                    held.hold(outcome[0])
            raise
        for thread in threads:
            thread.join()
        drains = [(sources[0], *first)]
        failed: BaseException | None = None
        for i in range(1, share):
            outcome = outcomes.get(i)
            if isinstance(outcome, BaseException):
                failed = failed or outcome
            elif outcome is not None:
                drains.append((sources[i], *outcome))
        if failed is not None:
            # What the others found goes to the hand with the call's (see _gather).
            for _, found, _ in drains:
                hand += found
            raise failed
        return drains

    def _give_probes_back(
        self,
        queue: str,
        hand: list[Delivery],
        probed: list[Delivery],
        late: set[str],
        pulled: set[str],
    ) -> list[Delivery]:
        """The hand less the first tasks probes took of subscriptions not `pulled` (drained in
        this call), given back (remembered a while) when the hand holds others to serve: a
        shard's token is held only while its tasks are in hand, so other processes are kept
        off a shard no longer than this call, and a later call weighs those first tasks
        without pulling them again. So are the heads of `late` (ack IDs: probes of earlier
        looks answered after those looks, Hand.probed_late): kept, the first process to look
        held the token of every shard whose probe answered late (49-62 of 64 shards at 4 x 1,
        the other three processes finding nothing to lease)."""
        looked = {d.subscription for d in probed}
        back: list[Delivery] = []
        kept: list[Delivery] = []
        for d in hand:
            given = d.subscription not in pulled and (d.subscription in looked or d.ack_id in late)
            (back if given else kept).append(d)
        if not back or not kept:
            return hand
        held = self._hand(queue)
        held.give_back(back)
        held.remember(back, _age)
        return kept

    def _drain(
        self,
        queue: str,
        topology: QueueTopology,
        source: str,
        hand: list[Delivery],
        end: float,
        *,
        fresh: bool = False,
        room: tuple[int, int] | None = None,
    ) -> tuple[list[Delivery], bool]:
        """Pull a subscription until it is empty or the hand is full (by count or bytes): the
        available deliveries, and True when the subscription was found empty (all of it is in
        hand now). `room` (tasks, bytes) replaces what the hand has room for beside `hand`.

        One found empty a moment ago (EMPTY_RECHECK) is not pulled again yet, unless `fresh`.
        """
        held = self._hand(queue)
        if room is None:
            room = held.room_beside(hand)
        room_count, room_bytes = room
        found: list[Delivery] = []
        if not fresh and held.marked(source, time.monotonic()):
            return found, True
        joined = False
        try:
            while room_count > len(found) and time.monotonic() < end:
                want = min(room_count - len(found), 1000, self._fitting(source, room_bytes))
                if want == 0:
                    break
                ready = self._pull_one(
                    queue, topology, source, want, end, patient=False, landed=True, settle=True
                )
                if ready is None:
                    with self._flight_lock:
                        flying = source in self._in_flight
                    if flying and not joined:
                        # Not answered within its wait (a pull in parts waits for its slowest,
                        # and on Pub/Sub an empty part is held that long; a loaded machine):
                        # the next pull joins it (_join) and takes what it brought from the
                        # hand, rather than the drain ending without it. It brought a tag's
                        # other 111 of 200 tasks to the next lease (a loaded machine, 2 of 6).
                        joined = True
                        continue
                    held.mark_empty(source)
                    return found, True
                joined = False
                found += ready
                room_bytes -= sum(d.size for d in ready)
                if self._emptied.get(source) and len(found) < room_count:
                    # A part of the pull came back empty: the rest came with the others (a
                    # pull more would be held its wait on Pub/Sub, to find nothing).
                    held.mark_empty(source)
                    return found, True
        except Error:
            held.hold(found)
            raise
        return found, False

    def _next_wait(self) -> float:
        """Seconds a pull waits on an empty subscription once the lease call has tasks:
        NEXT_PULL_WAIT, or less where pulls that bring messages answer quickly (NEXT_PULL_ROUNDS
        of their time, at least NEXT_PULL_LEAST). Pub/Sub holds an empty pull to its deadline:
        a subscription drained to empty costs this much each time."""
        return self._answer_allowance(NEXT_PULL_WAIT)

    def _answer_allowance(self, most: float) -> float:
        """Seconds a pull that brings messages is given to answer: NEXT_PULL_ROUNDS of a recent
        answer's time, at least NEXT_PULL_LEAST, at most `most` (`most` before any answer)."""
        answered = self.rpc.answer_seconds
        if answered is None:
            return most
        return min(most, max(answered * NEXT_PULL_ROUNDS, NEXT_PULL_LEAST))

    def _pull_bytes(self) -> int:
        """Most bytes one round of pulls asks for (pubsub_pull_bytes, within a hand's worth)."""
        return min(self.settings.pubsub_pull_bytes, self.settings.pubsub_hold_bytes)

    def _fitting(self, source: str, room_bytes: int) -> int:
        """Messages of the subscription that fit in room_bytes, by its size estimate."""
        return max(room_bytes, 0) // max(self._sizes.get(source, SIZE_GUESS), 1)

    def _probe(
        self,
        queue: str,
        topology: QueueTopology,
        hand: list[Delivery],
        end: float,
        remembered: Mapping[str, tuple[float, str]],
        *,
        fresh: bool = False,
        patience: float | None = None,
    ) -> list[Delivery]:
        """Pull the head of every subscription nothing in hand came from, side by side: of the
        shards, those whose token this process holds or wins now (other processes' shards are
        left to them), unless the queue has no tokens at all.

        A subscription found empty is not asked again for EMPTY_RECHECK seconds (unless `fresh`:
        then every free token is looked for), nor one `remembered` (its head a probe saw a
        moment ago);
        deferred tasks a probe brings are hidden until their ETA, so the probes continue past
        them. A patient probe (nothing in hand) waits until `patience` when given (monotonic),
        not a pull wait from now: an empty lease by oldest tag took the look at the claims
        subscription (a round trip or two), then the pull wait, then the give-back.
        """
        now = time.monotonic()
        present = {d.subscription for d in hand}
        held = self._hand(queue)
        # With a task in hand or a head remembered, where empty pulls are held, a subscription
        # found empty a moment ago is not probed: what came to it since is younger than those
        # (EMPTY_BEHIND). With nothing in hand once a drained shard's tags are served, such
        # probes held the next drain a short wait (160 of its 440 ms at 30 ms round trips).
        # Only where the oldest of those is older than the moment it was found empty.
        orders = [d.order for d in hand] + [age[0] for age in remembered.values()]
        oldest = min(orders) if orders and not fresh else None
        behind = oldest is not None and self.rpc.holds_empty_pulls is True
        out = held.out_of_turn()
        sources = [
            s
            for s in topology.sources
            if s not in present
            and s not in out
            and s not in remembered
            and (fresh or not held.marked(s, now))
            and not (behind and held.empty_behind(s, now, older=oldest))
        ]
        shards = set(topology.shards)
        # A process with nothing in hand looks for every free token (a pull may bring a share of
        # them): a token it did not see would count as another process's claim, and the call
        # look again and wait for claims nobody holds.
        mine = held.grab(
            [s for s in sources if s in shards], thorough=fresh or not hand, busy=bool(hand)
        )
        if mine is not None:
            sources = [s for s in sources if s not in shards or s in mine]
        if not sources:
            return []
        # With a task in hand or a head remembered, where empty pulls are held, a subscription
        # found empty after the oldest of those (longer than EMPTY_BEHIND ago) is glanced at
        # (one round trip), not held the short wait (0.15-0.25 s in every lease by oldest tag
        # once a process's drained shards were found empty, its hand still serving their
        # tags): what waits there now was published since it was found empty, hence younger,
        # unless given back or delivered again. One found empty before that oldest task was
        # published may hold older tasks, published since: probed as before (a glance may miss
        # a task published a moment ago).
        glances = (
            {s for s in sources if held.found_empty_after(s, oldest)}
            if behind and oldest is not None
            else set()
        )
        began = time.monotonic()
        self._pulled[queue] = began
        # Where empty pulls are held (Pub/Sub), the round answers once probes brought tasks and
        # the rest had half as long again (a pull where a task waits answers in a round trip;
        # the others are held a pull wait): what those bring later is in hand for the next
        # lease (settle_flights). Where they answer at once (the emulator) every probe is
        # waited for: no head is missed when the oldest is chosen.
        held_empty = self.rpc.holds_empty_pulls is True
        # Before any pull told whether empty pulls are held, every probe is waited for: on
        # Pub/Sub a process's first lease by oldest tag waits the pull wait (1.05 of its 1.1-1.3
        # s at 30 ms round trips). A round cut after the first answers was tried and taken out:
        # the probes it left running caught tasks added a moment later, and with answers slow on
        # a loaded machine one ran past its deadline and dropped them (hidden until their ack
        # deadline; test_pull_paths' drain-answer test, 1 in 4; docs/pubsub.md).
        left: list[str] = []
        patient = not hand and not remembered
        # Counted from the call's start (the claims look before it took a round trip or two).
        wait = (
            max(patience - time.monotonic(), NEXT_PULL_LEAST)
            if patient and patience is not None
            else None
        )
        found, brought = self._pull_each(
            queue,
            topology,
            sources,
            PROBE_SIZE,
            end,
            # With a task in hand or a head remembered, a probe only has to find an older one:
            # it waits on an empty subscription as a call with tasks does, not the pull wait.
            patient=patient,
            wait=wait,
            spread=held_empty,
            cut=held_empty,
            grace=True,
            join=True,
            landed=True,
            glance=glances,
            left=left,
            probe=True,
        )
        for source in glances.difference(brought, left):
            # Found empty again, by a glance: not glanced at again for EMPTY_BEHIND seconds.
            held.seen_empty(source)
        held_for = time.monotonic() - began
        if (
            not hand
            and not found
            and len(sources) == len(topology.sources)
            and held_for >= HELD_SHARE * (wait or self.settings.pubsub_pull_wait)
            and self.rpc.holds_empty_pulls
        ):
            # Every subscription pulled and held the whole pull wait (as Pub/Sub holds an empty
            # pull; the emulator answers at once), or what the call had left of it: none had a
            # task.
            self._searched[queue] = began
        return found

    def _pull_each(
        self,
        queue: str,
        topology: QueueTopology,
        sources: list[str],
        size: int | Mapping[str, int],
        end: float,
        *,
        patient: bool,
        spread: bool = False,
        cut: bool = True,
        any_answer: bool = False,
        grace: bool = False,
        graced_parts: bool = False,
        wait: float | None = None,
        join: bool = False,
        landed: bool = False,
        glance: Collection[str] = (),
        split: bool = True,
        settle: bool = False,
        left: list[str] | None = None,
        probe: bool = False,
    ) -> tuple[list[Delivery], list[str]]:
        """Pull up to `size` (of each, when a mapping) from each source, side by side (an empty
        queue answers after one pull wait, not one per source): what came, and the sources
        that brought any.

        A source that brought nothing is not asked again for EMPTY_RECHECK seconds. When a pull
        fails, what the others brought is held and the first failure raised.

        `grace` (a plain lease's rounds, where empty pulls are held): a pull that is not patient
        is sent with DROP_GRACE seconds more than its wait, and the round waits for it no longer
        than the wait: an answer later than that is left running into the hand (settle_flights)
        rather than dropped in transfer at its deadline, its messages hidden until their ack
        deadline; with `graced_parts` (a plain lease's) so are the parts of a pull split side
        by side, each waited for no longer than the wait (_pull). `wait` replaces a patient
        pull's wait (the pull wait). `join` (a lease by tag's probes, drains and fill-ups):
        a source with such a pull running is not pulled but joined (_join), so the round sees
        what that pull brings; with `landed` (probes and drains, whose caller took every task
        in hand) also one whose tasks are in the hand.
        The sources of `glance` are pulled with `immediately` (never joined), and one that
        brings nothing is not marked found empty (only a held pull finds that).
        `settle` (a drain's pulls): a pull split into parts does not wait for parts held empty
        (see _pull). `left` gets the sources whose pull the round left running. `probe` (a
        look's probes): what such a pull brings is marked for the next look (Hand.probed_late).
        """
        held = self._hand(queue)
        joining: set[str] = set()
        if spread and join:
            # A pull an earlier lease left running brings its tasks to the hand: not pulled
            # again beside it (Pub/Sub would hold the one that gets nothing), but joined; with
            # `landed`, so are sources whose tasks are in the hand now (such a pull ended after
            # the caller took the hand; in this order, none ends unseen in between).
            with self._flight_lock:
                joining = {s for s in sources if s in self._in_flight}
            if landed:
                joining |= held.sources() & set(sources)
            joining -= set(glance)
        elif spread:
            # As above, but left out; when every source has one, wait for one to end.
            waited = time.monotonic()
            with self._flight_lock:
                self._flight_lock.wait_for(
                    lambda: any(s not in self._in_flight for s in sources),
                    timeout=max(end - time.monotonic(), 0.0),
                )
                sources = [s for s in sources if s not in self._in_flight] or sources
            if wait is not None:
                # A patient wait counts from the call's look, not from the end of that pull:
                # an empty lease takes a pull wait, not that pull's time and a wait more.
                wait = max(wait - (time.monotonic() - waited), NEXT_PULL_LEAST)
        with self._flight_lock:
            # Answers still coming share the link with this round's.
            beside = len(sources) + sum(self._in_flight.values())
        # The round's bytes are shared among the sources pulled side by side.
        share = self._pull_bytes() // len(sources)
        sizes = dict.fromkeys(sources, size) if isinstance(size, int) else size
        graced = grace and spread and not patient and self.rpc.holds_empty_pulls is not False
        extra = DROP_GRACE if graced else 0.0
        pulls = [
            functools.partial(
                self._pull,
                queue,
                topology,
                source,
                max(1, min(sizes[source], self._fitting(source, share))),
                end,
                patient=patient and source not in glance,
                spread=spread,
                beside=beside,
                # Not held, so waited for with the grace too: a late answer is not dropped.
                grace=DROP_GRACE if source in glance else extra,
                graced_parts=graced_parts,
                wait=wait,
                immediately=source in glance,
                split=split,
                settle=settle,
            )
            for source in sources
        ]
        # A join waits for the pulls it joins as long as a pull in their place would be held.
        joined_wait = min(
            (wait or self.settings.pubsub_pull_wait) if patient else self._next_wait() + extra,
            max(end - time.monotonic(), 0.0),
        )
        calls = [
            functools.partial(self._join, queue, source, sizes[source], joined_wait, pull)
            if source in joining
            else pull
            for source, pull in zip(sources, pulls, strict=True)
        ]

        began = time.monotonic()

        def flying(i: int) -> None:
            if sources[i] in joining:
                return
            if self.rpc.holds_empty_pulls is True and sources[i] not in glance:
                held.unanswered(sources[i])
            with self._flight_lock:
                self._in_flight[sources[i]] = self._in_flight.get(sources[i], 0) + 1
                self._flight_began[sources[i]] = began

        def late(i: int, result: list[Delivery] | Error | None) -> None:
            # A pull still running when the lease answered: what it brings is held for the
            # next lease calls.
            if sources[i] in joining:
                # What a join took back from the hand, given back to it.
                held.hold(result if isinstance(result, list) else [])
                return
            try:
                if isinstance(result, list):
                    if probe and result:
                        # Counted as the next look's probes: given back by it unless drained
                        # (in the hand's turn), rather than keeping the shard's token here.
                        held.probed_late(result)
                    held.hold(result)
                    if result:
                        # Not drained to empty after all (a drain's last pull, answered late).
                        held.probed([sources[i]])
                elif result is None and sources[i] not in glance:
                    held.mark_empty(sources[i])
            finally:
                with self._flight_lock:
                    self._flight_ended(sources[i])

        useful: Callable[[list[Delivery] | Error | Pending | None], bool] = (
            # `any_answer`: a round ends once a subscription answered with messages, even none
            # to hand out yet (an ETA ahead): the next round pulls it again at once, rather
            # than after the held empty pulls beside it. A round that is not `cut` waits for
            # every answer (within the wait, with `grace`).
            (lambda r: r is not None) if any_answer else bool
        )
        results: Sequence[list[Delivery] | Error | Pending | None] = (
            self.rpc.run_until_useful(
                calls,
                useful if cut else (lambda _r: False),
                late,
                pending_hook=flying,
                give_up=self._next_wait() if extra else None,
            )
            if spread and (cut or extra)
            else self.rpc.run_each(calls)
        )
        found: list[Delivery] = []
        brought: list[str] = []
        failure: Error | None = None
        for source, result in zip(sources, results, strict=True):
            if isinstance(result, Pending):
                if left is not None:
                    left.append(source)
                continue
            if isinstance(result, Error):
                failure = failure or result
            elif result is None:
                if source not in glance:
                    held.mark_empty(source)
            else:
                found += result
                brought.append(source)
        if failure is not None:
            held.hold(found)
            raise failure
        return found, brought

    def _join(
        self,
        queue: str,
        source: str,
        limit: int,
        wait: float,
        pull: Callable[[], list[Delivery] | None],
    ) -> list[Delivery] | None:
        """What the pulls earlier leases left running on `source` brought, once they ended,
        taken back from the hand (up to `limit`). None when they found it empty, or had not
        ended within `wait` seconds (what a pull in their place would have been held); `pull`
        when there were none (their tasks were taken) or they failed.

        Where empty pulls are held, such a pull is held until a task comes or its deadline: a
        lease that pulled the subscription beside it would be held empty while the other's
        answer brought the tasks it looks for to the hand.
        """
        self.settle_flights([source], time.monotonic() + wait, whole=True)
        with self._flight_lock:
            ended = source not in self._in_flight
        held = self._hand(queue)
        taken = held.take(lambda d: d.subscription == source, limit)
        if taken:
            return taken
        if not ended or held.marked(source, time.monotonic()):
            return None
        return pull()

    def _pull_one(
        self,
        queue: str,
        topology: QueueTopology,
        source: str,
        max_messages: int,
        end: float,
        *,
        patient: bool,
        landed: bool = False,
        split: bool = True,
        settle: bool = False,
    ) -> list[Delivery] | None:
        """_pull of one subscription by a lease by tag (a drain, a fill-up): the available
        deliveries; None when none came in time. `landed`, `split` and `settle` as in
        _pull_each.

        Unless empty pulls are known to be answered at once (the emulator), a pull that is not
        patient goes through _pull_each with `grace`, as a plain lease's rounds do: waited for
        no longer than its wait, its answer if later goes on to the hand rather than being
        dropped at its deadline, its tasks hidden until their ack deadline. A loaded machine
        answered a drain's pull of 4 tasks in 0.140 s of its 0.150 s.
        """
        if patient or self.rpc.holds_empty_pulls is False:
            return self._pull(
                queue, topology, source, max_messages, end, patient=patient, spread=True
            )
        found, brought = self._pull_each(
            queue,
            topology,
            [source],
            {source: max_messages},
            end,
            patient=False,
            spread=True,
            cut=False,
            grace=True,
            join=True,
            landed=landed,
            split=split,
            settle=settle,
        )
        return found if brought else None

    def _pull(
        self,
        queue: str,
        topology: QueueTopology,
        source: str,
        max_messages: int,
        end: float,
        *,
        patient: bool,
        spread: bool = False,
        beside: int = 1,
        grace: float = 0.0,
        graced_parts: bool = False,
        wait: float | None = None,
        immediately: bool = False,
        split: bool = True,
        settle: bool = False,
    ) -> list[Delivery] | None:
        """Pull up to max_messages, sorted out: the available deliveries; None if none came.

        A patient pull (nothing to answer with yet) waits up to pubsub_pull_wait for messages;
        `spread` splits a big pull into a few running side by side (not without `split`: the
        pull a glance follows, whose empty part would be held its wait); `beside` is the number of
        subscriptions pulled side by side with this one; `grace` seconds are added to the
        pull's deadline (_pull_each). Copies this subscription
        should not serve (an emulator ignoring filters) are acked away; tasks whose ETA is
        ahead are hidden until then with their ack deadline.
        """
        remaining = end - time.monotonic()
        if wait is None or not patient:
            wait = self.settings.pubsub_pull_wait if patient else self._next_wait()
        # One round of pulls brings at most pubsub_pull_bytes (and a hand's worth), by the size
        # estimate: the answer is in memory about three times over (received, parsed, copied).
        fits = self._fitting(source, self._pull_bytes())
        known = self._message_bytes.get(source)
        # A subscription nothing was pulled from yet is asked for one message first: its size
        # sets how long the next answers are given to arrive (rpc.answer_time), and an empty
        # one costs a pull's wait and the least of that time on Pub/Sub, not the most.
        total = max(1, min(max_messages, 1000, fits)) if known is not None else 1
        parts = min(PARALLEL_PULLS, math.ceil(total / PULL_SHARE)) if spread else 1
        if immediately or not split:
            parts = 1
        asked, brought = self._last.get(source, (0, 0))
        if self._emptied.get(source):
            # A part of its last pull found nothing: what waits fits one pull.
            parts = 1
        elif self.rpc.holds_empty_pulls is True and not (asked > 1 and brought >= asked):
            # Pulls side by side wait for the slowest, and on Pub/Sub an empty one is held:
            # split after an answer that brought all it asked for (more may wait), else into
            # no more parts than a tenth of what the last answer brought (a pull brings a
            # share of what waits: that many waited then, and the share of each is unknown).
            parts = min(parts, max(1, brought // SPLIT_LEAST))
        sizes = [total // parts + (1 if i < total % parts else 0) for i in range(parts)]
        pulled_at = time.time()
        # With `settle` (a drain), where empty pulls are held, parts still running a moment
        # after one brought messages are held empty: not waited for (their answers, if any, go
        # to the hand). Not a plain lease's: the next plain lease leaves a subscription with a
        # pull running out of its round, and waited for those (126 ms and 13 calls a lease and
        # delete at 30 ms, 85 ms and 7 without).
        settled = settle and parts > 1 and self.rpc.holds_empty_pulls is True
        wait = max(min(wait, remaining), 0.05)
        results, failure = self.rpc.pull_many(
            source,
            sizes,
            queue=queue,
            wait=wait,
            # A plain lease's parts side by side get the grace too (`graced_parts`), but are
            # waited for no longer than the wait: a part held empty to its wait would keep the
            # round the grace more, and one sent without it loses an answer that comes at its
            # deadline (its messages hidden for their ack deadline: a lease of 1,000 through the
            # layer got 350-999 of 1,099). Those of a lease by tag are waited for together.
            grace=grace if parts == 1 or graced_parts else 0.0,
            until=wait if grace and parts > 1 and graced_parts else None,
            budget=max(remaining, 0.05),
            # The answers of pulls side by side share the link: each is given the time of them
            # all to arrive (a subscription's first pull asks for one message).
            message_bytes=known * beside if known is not None else SIZE_GUESS,
            immediately=immediately,
            settle=max(self.rpc.answer_seconds or 0.0, PART_SETTLE) if settled else None,
            late=functools.partial(self._part_ended, queue, topology, source, pulled_at),
            pending_hook=functools.partial(self._parts_running, source),
        )
        received = [item for result in results for item in result]
        self._last[source] = (total, len(received))
        # A part that found nothing while others brought messages: nothing more waited then
        # (on Pub/Sub that part was held until its wait ended).
        self._emptied[source] = len(results) > 1 and not all(results)
        if received and total > 1:
            share = min(len(received) / total, 1.0)
            self._yield = share if self._yield is None else 0.8 * self._yield + 0.2 * share
        if not received:
            if failure is not None:
                raise failure
            return None
        # (The answers are sorted out, then cleared, from `received` alone.)
        del results
        ready = self._sort_out(queue, topology, source, received, pulled_at)
        if failure is not None:
            # Another pull of this round failed: keep what came for the next call, then say so.
            self._hand(queue).hold(ready)
            raise failure
        return ready

    def _parts_running(self, source: str, count: int) -> None:
        """`count` parts of a pull of `source` were left running past its round (settle)."""
        with self._flight_lock:
            self._in_flight[source] = self._in_flight.get(source, 0) + count
            self._held_parts[source] = self._held_parts.get(source, 0) + count
            self._flight_began[source] = time.monotonic()

    def _part_ended(
        self,
        queue: str,
        topology: QueueTopology,
        source: str,
        pulled_at: float,
        received: list[Any] | None,
    ) -> None:
        """A part left running past its round ended: what it brought goes to the hand; one
        that brought nothing found the subscription empty (None: it failed)."""
        held = self._hand(queue)
        count = len(received or ())
        try:
            if received == []:
                held.mark_empty(source)
            ready = self._sort_out(queue, topology, source, received or [], pulled_at)
            if ready:
                held.hold(ready)
                held.probed([source])
        except Error as exc:
            log.warning(
                "queue %r: %d messages a pull brought after its round could not be sorted out"
                " (%s); they come back at their ack deadline",
                queue,
                count,
                exc,
            )
        finally:
            with self._flight_lock:
                self._held_parts[source] -= 1
                if not self._held_parts[source]:
                    del self._held_parts[source]
                self._flight_ended(source)

    def _flight_ended(self, source: str) -> None:
        """One pull left running on `source` ended (the flight lock held): waiters are told."""
        self._in_flight[source] -= 1
        if not self._in_flight[source]:
            del self._in_flight[source]
            del self._flight_began[source]
        self._flight_lock.notify_all()

    def _sort_out(
        self,
        queue: str,
        topology: QueueTopology,
        source: str,
        received: list[Any],
        pulled_at: float,
    ) -> list[Delivery]:
        """The available deliveries of what a pull of `source` brought: copies the
        subscription should not serve are acked away, tasks with an ETA ahead hidden until then
        (or republished near a limit), those set aside handed to the republisher."""
        if not received:
            return []
        largest = max(item.message.ByteSize() for item in received)
        self._sizes[source] = max(largest, self._sizes.get(source, SIZE_GUESS) // 8)
        self._message_bytes[source] = max(largest, self._message_bytes.get(source, 0) // 2)
        rule = topology.rules[source]
        now = time.time()
        foreign: list[str] = []
        served: list[Delivery] = []
        aside: list[Delivery] = []
        for item in received:
            if not rule.serves(item.message.attributes):
                foreign.append(item.ack_id)
                continue
            delivery = decode(source, item, pulled_at)
            if rule.misrouted(item.message.attributes):
                log_event(
                    log,
                    logging.WARNING,
                    "shard_mismatch",
                    queue=queue,
                    message_id=delivery.message_id,
                    detail=f"tag {delivery.tag!r} published to shard {rule.shard} of"
                    f" {rule.shards}: its publisher uses another shard count",
                )
            for note in delivery.ignored:
                log_event(
                    log,
                    logging.WARNING,
                    "foreign_attribute_ignored",
                    queue=queue,
                    message_id=delivery.message_id,
                    detail=note,
                )
            if delivery.set_aside is not None:
                aside.append(delivery)
                continue
            served.append(delivery)
        # The answer as parsed (as big again as its payloads; any part of it keeps it all) goes
        # before the calls below.
        received.clear()
        del item
        self._book.seen(queue, [(d.name, d.message_id) for d in served])
        gone = self._book.dropped_among(d.message_id for d in served)
        if gone:
            # Tasks deleted by name (or delivered again after their delete): never served.
            foreign += [d.ack_id for d in served if d.message_id in gone]
            served = [d for d in served if d.message_id not in gone]
        deferred: dict[int, list[Delivery]] = defaultdict(list)
        renew: list[Delivery] = []
        ready: list[Delivery] = []
        for delivery in served:
            if delivery.eta is not None and delivery.eta > now:
                if self._hand(queue).near_limits(delivery, now):
                    renew.append(delivery)
                else:
                    wait_s = min(delivery.eta - now, self.settings.pubsub_max_deferral)
                    deferred[math.ceil(wait_s)].append(delivery)
                continue
            ready.append(delivery)
        if foreign:
            # Stale ids are copies that went back to the subscription: dropped next time.
            self.rpc.ack(source, foreign, queue=queue)
        if aside:
            self._republisher.set_aside(queue, topology, aside)
        if renew:
            # Without publish rights they are deferred in place, as if not near a limit.
            for delivery in self._republisher.renew(queue, topology, renew):
                wait_s = min((delivery.eta or now) - now, self.settings.pubsub_max_deferral)
                deferred[max(math.ceil(wait_s), 0)].append(delivery)
        for seconds, deliveries in deferred.items():
            self.rpc.modify(source, [d.ack_id for d in deliveries], seconds, queue=queue)
            self._book.skipped(deliveries)
        return ready


def _age(delivery: Delivery) -> tuple[float, str]:
    """Oldest first: by ETA (else publish time), then name."""
    return (delivery.order, delivery.name)


def _oldest_of(deliveries: Iterable[Delivery], oldest: dict[str, tuple[float, str]]) -> None:
    """Lower `oldest` (subscription -> _age of its oldest delivery) by these deliveries."""
    for delivery in deliveries:
        age = _age(delivery)
        known = oldest.get(delivery.subscription)
        if known is None or age < known:
            oldest[delivery.subscription] = age


def of_tag(tag: str) -> Wanted:
    return lambda delivery: delivery.tag == tag
