"""The Pub/Sub backend class: legacy pull-queue semantics on one queue's topics and subscriptions.

A lease is a pull plus an ack deadline, delete is an ack (exactly-once delivery reports a stale
one), tags are served by filtered subscriptions or grouped here, and ETAs hide tasks until due;
docs/pubsub.md explains each mapping, its cost and what differs from the legacy queue.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import SplitResult

from pullqueue.adapters.pubsub.claims import ShardClaims
from pullqueue.adapters.pubsub.duplicates import check_named, no_registry_error
from pullqueue.adapters.pubsub.hand import Hand, Wanted
from pullqueue.adapters.pubsub.keeper import LeaseKeeper
from pullqueue.adapters.pubsub.layout import QueueLayout
from pullqueue.adapters.pubsub.leases import Lease, LeaseBook
from pullqueue.adapters.pubsub.provision import Provisioner, QueueTopology
from pullqueue.adapters.pubsub.republish import Republisher
from pullqueue.adapters.pubsub.rpc import MAX_ACK_DEADLINE, PARALLEL_PULLS, Pending, PubSubRpc
from pullqueue.adapters.pubsub.wire import (
    Delivery,
    by_subscription,
    decode,
    encode,
    new_task_name,
)
from pullqueue.config import Settings
from pullqueue.dedupe.base import NameRegistry
from pullqueue.errors import (
    ConfigurationError,
    Error,
    TaskLeaseExpiredError,
    TombstonedTaskError,
)
from pullqueue.logs import log_event
from pullqueue.retry import RetryParameters
from pullqueue.task import QueueStats, Task

log = logging.getLogger(__name__)

PUBLISH_REQUEST_BYTES = 9 * 2**20
"""Bytes of messages per publish request (Pub/Sub's limit is 10 MB)."""
PUBLISH_WAVE_BYTES = 3 * PUBLISH_REQUEST_BYTES
"""Bytes of messages an add has in flight at once (its publish requests run side by side)."""
PUBLISH_TIME_RESOLUTION = 0.002
"""Seconds a purge waits after its cut so later tasks get a later publish time (ms precision)."""
PULL_SHARE = 100
"""Messages per pull when a lease call spreads a big pull over several (the emulator's cap)."""
SAME_DEADLINE = 0.25
"""Seconds a lease may end early to reuse the deadline its pull set (saving one call)."""
LEASE_TOKEN_SLACK = 1e-6
"""Seconds a task's ETA may differ from its lease's end and still name that lease (datetimes
carry microseconds, lease ends are floats)."""
NEXT_PULL_WAIT = 0.25
"""Most seconds a pull waits on an empty subscription once the lease call has tasks to answer
with (see _next_wait)."""
NEXT_PULL_ROUNDS = 4
"""Times a recent answer's time a pull waits on an empty subscription once the call has tasks."""
NEXT_PULL_LEAST = 0.05
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
SIZE_GUESS = 2**20
"""Bytes per message assumed of a subscription nothing was pulled from yet (the legacy limit of
a task); after a pull, the largest message it brought, or an eighth of the guess before if more."""


class PubSubBackend:
    """Pull queues on Cloud Pub/Sub (or its emulator, when PUBSUB_EMULATOR_HOST is set).

    `names`, when given, is the registry that makes task names unique: names are claimed before
    publishing, given back when a publish fails and tombstoned after a successful delete.
    Without one a named add is refused with ConfigurationError, unless `accept_duplicate_names`
    (default PULLQUEUE_ACCEPT_DUPLICATE_NAMES) says to publish named tasks unchecked: the name
    then travels in the `task_name` attribute and duplicates are not detected. The registry is
    the caller's to close, unless `close_names` hands it over.
    """

    def __init__(
        self,
        project: str,
        *,
        settings: Settings | None = None,
        auto_create: bool | None = None,
        names: NameRegistry | None = None,
        close_names: bool = False,
        accept_duplicate_names: bool | None = None,
    ) -> None:
        self.settings = settings = settings or Settings()
        if not project:
            raise ConfigurationError("pubsub:// needs a project: pubsub://PROJECT")
        if settings.pubsub_lease_window <= 2 * settings.pubsub_keeper_period:
            raise ConfigurationError(
                f"PULLQUEUE_PUBSUB_LEASE_WINDOW ({settings.pubsub_lease_window} s) must be more"
                f" than twice PULLQUEUE_PUBSUB_KEEPER_PERIOD ({settings.pubsub_keeper_period} s)"
                " so the keeper renews a lease before its window runs out"
            )
        self.url = f"pubsub://{project}"
        self.project = project
        self.names = names
        self._close_names = close_names
        self.accept_duplicate_names = (
            settings.accept_duplicate_names
            if accept_duplicate_names is None
            else accept_duplicate_names
        )
        self.rpc = PubSubRpc(project, settings.pubsub_rpc_timeout)
        self._provisioner = Provisioner(
            self.rpc, settings, settings.auto_create if auto_create is None else auto_create
        )
        self._book = LeaseBook()
        self._republisher = Republisher(self.rpc, self._book)
        self._keeper = LeaseKeeper(
            self._book,
            self._renew,
            self._settle_due,
            self._next_release,
            settings.pubsub_keeper_period,
        )
        self._topologies: dict[str, QueueTopology] = {}
        self._topology_lock = threading.Lock()
        self._rotation = 0
        self._claims = ShardClaims(self.rpc, lambda queue: len(self.topology(queue).shards))
        self._sizes: dict[str, int] = {}
        """Subscription -> bytes per message a pull of it is sized by (see SIZE_GUESS)."""
        self._message_bytes: dict[str, int] = {}
        """Subscription -> the largest message of its last answer (or half the one before): the
        time a pull's answer is given to arrive follows it (rpc.answer_time)."""
        self._in_flight: dict[str, int] = {}
        """Subscription -> pulls a lease answered without (run_until_useful) still running."""
        self._flight_lock = threading.Condition()
        self._searched: dict[str, float] = {}
        """Queue -> when (monotonic) a lease's probes last pulled every subscription of it
        patiently and found nothing."""
        self._hands: dict[str, Hand] = {}
        """Queue -> this process's hand of it (pubsub/hand.py): its held tasks and their rules."""
        self._closed = False

    def __repr__(self) -> str:
        return f"PubSubBackend({self.url!r})"

    def now(self) -> float:
        return time.time()

    def topology(self, queue: str) -> QueueTopology:
        """The queue's Pub/Sub resources, checked (or created) on first use."""
        if self._closed:
            raise ConfigurationError(
                "this Pub/Sub backend is closed; connect() a new one", queue=queue
            )
        found = self._topologies.get(queue)
        if found is not None:
            return found
        with self._topology_lock:
            found = self._topologies.get(queue)
            if found is None:
                layout = QueueLayout(
                    project=self.project,
                    queue=queue,
                    prefix=self.settings.pubsub_prefix,
                    declared_tags=tuple(self.settings.pubsub_declared_tags.get(queue, ())),
                )
                found = self._provisioner.open(layout)
                # The hand first: a thread that finds the topology finds its hand.
                self._hands[queue] = Hand(
                    queue,
                    found,
                    settings=self.settings,
                    rpc=self.rpc,
                    book=self._book,
                    claims=self._claims,
                    republisher=self._republisher,
                    poke=self._keeper.poke,
                )
                self._topologies[queue] = found
            return found

    def _hand(self, queue: str) -> Hand:
        """The queue's hand (the queue's topology was opened first)."""
        return self._hands[queue]

    # Adding

    def check_named_adds(self, queue: str, *, what: str) -> None:
        """Raise the ConfigurationError a named add would get (no registry, duplicates not
        accepted) before anything happens; `what` says what the caller did not do then."""
        if self.names is None and not self.accept_duplicate_names:
            raise no_registry_error(queue, None, what=what)

    def add(self, queue: str, tasks: Sequence[Task]) -> list[Error | None]:
        if self.names is None:
            check_named(queue, tasks, accept=self.accept_duplicate_names)
        topology = self.topology(queue)
        now = time.time()
        names = [task.name or new_task_name() for task in tasks]
        outcomes: list[Error | None] = [None] * len(tasks)
        named = [i for i, task in enumerate(tasks) if task.name is not None]
        if self.names is not None and named:
            claims = self.names.claim(queue, [names[i] for i in named])
            for i, outcome in zip(named, claims, strict=True):
                outcomes[i] = outcome
        ready = [i for i, outcome in enumerate(outcomes) if outcome is None]
        etas = {i: tasks[i].resolve_eta(now) for i in ready}
        by_topic: dict[str, list[int]] = defaultdict(list)
        for i in ready:
            by_topic[topology.topic_for(tasks[i].tag)].append(i)
        requests = [
            (topic, chunk)
            for topic, indexes in by_topic.items()
            for chunk in self._chunks(tasks, indexes)
        ]

        # Every topic's requests side by side, in waves of a few requests' bytes (each encoded
        # in its thread): an add of small tasks over many tags is one round trip.
        def publish(topic: str, chunk: list[int]) -> list[str]:
            messages = [encode(tasks[i], names[i], etas[i], now) for i in chunk]
            return self.rpc.publish(topic, messages, queue=queue)

        answers: list[list[str] | Error] = []
        wave: list[tuple[str, list[int]]] = []
        wave_bytes = 0
        for n, (topic, chunk) in enumerate(requests):
            wave.append((topic, chunk))
            wave_bytes += sum(tasks[i].size + 1024 for i in chunk)
            if n == len(requests) - 1 or wave_bytes >= PUBLISH_WAVE_BYTES:
                answers += self.rpc.run_each([functools.partial(publish, *r) for r in wave])
                wave, wave_bytes = [], 0
        for (_topic, chunk), message_ids in zip(requests, answers, strict=True):
            if isinstance(message_ids, Error):
                exc = message_ids
                claimed = [names[i] for i in chunk if tasks[i].name is not None]
                if self.names is not None and claimed:
                    self.names.release(queue, claimed)
                for i in chunk:
                    outcomes[i] = exc
                continue
            for i in chunk:
                tasks[i].name = names[i]
                tasks[i].eta_posix = round(etas[i], 6)
            self._book.seen(queue, zip([names[i] for i in chunk], message_ids, strict=False))
        return outcomes

    @staticmethod
    def _chunks(tasks: Sequence[Task], indexes: list[int]) -> Iterable[list[int]]:
        chunk: list[int] = []
        size = 0
        for i in indexes:
            task_bytes = tasks[i].size + 1024
            if chunk and size + task_bytes > PUBLISH_REQUEST_BYTES:
                yield chunk
                chunk, size = [], 0
            chunk.append(i)
            size += task_bytes
        if chunk:
            yield chunk

    # Leasing

    def lease(
        self,
        queue: str,
        lease_seconds: float,
        max_tasks: int,
        *,
        tag: str | None = None,
        group_by_tag: bool = False,
        deadline: float = 10.0,
    ) -> list[Task]:
        topology = self.topology(queue)
        began = time.monotonic()
        end = began + deadline
        # Every lease serves the hand in turn, one without tag too: a lease from any thread
        # sees every task the process holds, none being out in another thread's call.
        with self._hand(queue).serving(end):
            if group_by_tag and tag is not None:
                picked = self._collect(
                    queue,
                    topology,
                    topology.sources_of(tag),
                    max_tasks,
                    end,
                    _of_tag(tag),
                    rotate=False,
                )
            elif group_by_tag:
                picked = self._lease_oldest(queue, topology, max_tasks, began, end)
            else:
                picked = self._lease_any(queue, topology, max_tasks, began, end)
        if group_by_tag and tag is None and not picked:
            picked = self._await_claimants(queue, topology, max_tasks, end)
        return self._grant(queue, topology, picked, lease_seconds)

    def _await_claimants(
        self, queue: str, topology: QueueTopology, max_tasks: int, end: float
    ) -> list[Delivery]:
        """Before a lease by oldest tag answers [] while other processes hold the claims of
        shards it found tasks of, look again every CLAIMANT_POLL seconds for up to
        CLAIMANT_WAIT (never past the deadline less two pull waits), asking for those claims
        each time: a claim won (its holder served the shard, or stopped) lets this call drain
        the shard. An idle worker asks a few times while another process serves its shards, not
        once per pull. The hand is let go between looks, so other threads lease meanwhile."""
        hand = self._hand(queue)
        give_up = min(time.monotonic() + CLAIMANT_WAIT, end - 2 * self.settings.pubsub_pull_wait)
        picked: list[Delivery] = []
        while not picked and hand.claimed_elsewhere() and time.monotonic() < give_up:
            time.sleep(max(min(CLAIMANT_POLL, give_up - time.monotonic()), 0.0))
            last = time.monotonic() + CLAIMANT_POLL >= give_up
            with hand.serving_by(give_up) as free:
                if not free:
                    break
                hand.ask_claims_again()
                picked = self._collect_oldest_group(queue, topology, max_tasks, end, last_look=last)
        return picked

    def _lease_oldest(
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
        if queue in self._searched:
            # Empty pulls are held (a look found nothing after the whole pull wait): a look
            # now waits in the server for tasks, rather than here until the marks expire.
            hand.forget_empty(topology.sources)
        while True:
            looked = time.monotonic()
            last = looked + EMPTY_POLL >= until
            picked = self._collect_oldest_group(queue, topology, max_tasks, end, last_look=last)
            if picked:
                return picked
            if self._searched.get(queue, -math.inf) >= looked:
                # The look pulled every subscription for the whole pull wait (Pub/Sub holds an
                # empty pull that long) and found nothing: it was the last look.
                last = True
            if last:
                hand.found_nothing(looked, every_task=False)
                return picked
            time.sleep(EMPTY_POLL)

    def _lease_any(
        self, queue: str, topology: QueueTopology, max_tasks: int, began: float, end: float
    ) -> list[Delivery]:
        """_collect_any; a call that waited for the hand while another thread's look found
        nothing (begun after this call, nothing held or given back since) answers [] at once,
        as in _lease_oldest: N idle threads then cost one pull wait, not N in turn."""
        hand = self._hand(queue)
        if hand.found_nothing_since(began, every_task=True):
            return []
        looked = time.monotonic()
        picked = self._collect_any(queue, topology, max_tasks, end)
        if not picked:
            hand.found_nothing(looked, every_task=True)
        return picked

    def _collect_any(
        self, queue: str, topology: QueueTopology, max_tasks: int, end: float
    ) -> list[Delivery]:
        """Up to max_tasks of any tag: held ones, then a share of the rest from every
        subscription side by side (so an empty queue answers after one pull wait, not one per
        subscription), then more from those that brought any."""
        hand = self._hand(queue)
        picked = hand.take(None, max_tasks)
        if len(picked) >= max_tasks:
            return picked
        live = self._rotate(topology)
        share = math.ceil((max_tasks - len(picked)) / len(live))
        try:
            found, more = self._pull_each(
                queue, topology, live, share, end, patient=not picked, spread=True
            )
        except Error:
            hand.hold(picked)
            raise
        # More may be in the sources that brought any: a pull often brings fewer than asked
        # (the emulator at most 100), or only tasks it may not hand out (ETA ahead, a copy).
        picked += found
        # Then rounds side by side of those that brought any (their pulls wait _next_wait on
        # an empty one): one after another they would cost that wait each.
        while more and len(picked) < max_tasks and time.monotonic() < end:
            share = math.ceil((max_tasks - len(picked)) / len(more))
            try:
                found, more = self._pull_each(
                    queue, topology, more, share, end, patient=False, spread=True, cut=False
                )
            except Error:
                hand.hold(picked)
                raise
            picked += found
            if not found:
                break
        # What pulls left running brought meanwhile.
        picked += hand.take(None, max(max_tasks - len(picked), 0))
        if len(picked) > max_tasks:
            picked.sort(key=_age)
            hand.hold(picked[max_tasks:])
            return picked[:max_tasks]
        return picked

    def _rotate(self, topology: QueueTopology) -> list[str]:
        """The queue's subscriptions, starting one further each call so none is starved."""
        sources = topology.sources
        self._rotation = (self._rotation + 1) % len(sources)
        return sources[self._rotation :] + sources[: self._rotation]

    def _collect(
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
    ) -> list[Delivery]:
        """Up to max_tasks available deliveries `wanted` accepts: held ones first, then pulls.

        Sources are pulled in turn (`rotate`) or each until it is empty, in the order given.
        Deliveries pulled that are not wanted are held for this process's next lease calls; when
        the held buffer is full the scan stops rather than churn tasks back to Pub/Sub.
        """
        hand = self._hand(queue)
        picked = picked if picked is not None else []
        picked += hand.take(wanted, max_tasks - len(picked))
        active = list(sources)
        try:
            if not picked and len(active) > 1 and wanted is not None:
                # Nothing in hand: every source at once, so a tag with no task waiting costs
                # one pull wait (Pub/Sub holds each empty pull that long), not one per source.
                # As below: the rest of what a pull brings fills the hand for the next calls.
                size = min(max_tasks + hand.room(), 1000)
                found, active = self._pull_each(queue, topology, active, size, end, patient=True)
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
                ready = self._pull(
                    queue,
                    topology,
                    source,
                    want,
                    end,
                    patient=not picked,
                    spread=True,
                )
                if ready is None:
                    active.pop(0)
                    continue
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
    ) -> list[Delivery]:
        """The tasks sharing the tag of the oldest available task in hand.

        The hand is what this process holds plus the head of every subscription it holds nothing
        from (a probe). The subscription the oldest task came from is then drained into the
        hand, since Pub/Sub hands out in no set order and an older task may be further back, and
        the oldest is chosen again; its tag's tasks are all in hand then, even with other
        processes leasing (they find that shard empty while this process serves it). With
        `last_look`, a call that finds nothing looks once more at every subscription.
        """
        held = self._hand(queue)
        held.serving_oldest(time.time())
        hand = held.take(None, self.settings.pubsub_hold_max + max_tasks)
        hand, drained, partial = self._gather(queue, topology, hand, end, fresh=False)
        if not hand and last_look and time.monotonic() < end:
            # A last look before answering []: every subscription, including those found empty
            # or claimed a moment ago (tasks may have been given back to them since). The
            # claims go back first, so a process that took a head of one of them while this one
            # drained it finds the claim free once it has given the head back.
            held.release_claims()
            hand, drained, partial = self._gather(queue, topology, hand, end, fresh=True)
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
            # moment ago (other processes give back the heads of it they held).
            now = time.monotonic()
            try:
                sources = [
                    source
                    for source in topology.sources_of(tag)
                    if (
                        (source not in drained and not held.marked(source, now))
                        or held.settling(source, now)
                    )
                    and (source not in topology.shards or held.may_drain(source))
                ]
            except Error:
                held.hold(picked)
                raise
            picked = self._collect(
                queue, topology, sources, max_tasks, end, _of_tag(tag), picked, rotate=False
            )
        held.release_claims()
        return picked

    def _gather(
        self, queue: str, topology: QueueTopology, hand: list[Delivery], end: float, *, fresh: bool
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
        partial: set[str] = set()
        try:
            # First tasks probes saw a moment ago and gave back: not probed again, but weighed
            # with the hand.
            seen = {} if fresh else held.heads(time.monotonic())
            probed = self._probe(queue, topology, hand, end, seen, fresh=fresh)
            held.probed({d.subscription for d in probed})
            hand += probed
            present = {d.subscription for d in hand}
            heads = {s: age for s, age in seen.items() if s not in present}
            taken: set[str] = set()
            while candidates := [
                (_age(d), d.subscription)
                for d in hand
                if d.subscription not in taken and d.subscription not in partial
            ] + [(age, s) for s, age in heads.items() if s not in taken and s not in partial]:
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
                if held.may_drain(source):
                    if held.no_room_for(source, hand, partial):
                        # Serve what is whole in hand first; draining this now would fill the
                        # hand with parts of subscriptions and lease their tags in parts.
                        partial.add(source)
                        continue
                    found, whole = self._drain(queue, topology, source, hand, end, fresh=fresh)
                    hand += found
                    held.drained(source, whole, hand)
                    if not whole:
                        partial.add(source)
                elif not held.unclaimed(source):
                    taken.add(source)
            if taken:
                hand = held.give_to_claimants(hand, taken)
                for source in sorted(taken) if fresh else ():
                    if held.may_drain(source):
                        hand += self._drain(queue, topology, source, hand, end, fresh=True)[0]
            hand = self._give_probes_back(queue, hand, probed, drained)
        except Error:
            held.hold(hand)
            raise
        return hand, drained, partial

    def _give_probes_back(
        self, queue: str, hand: list[Delivery], probed: list[Delivery], drained: set[str]
    ) -> list[Delivery]:
        """The hand less the first tasks probes took of subscriptions not drained, given back
        (remembered a while) when the hand holds others to serve: a shard's token is held only
        while its tasks are in hand, so other processes are kept off a shard no longer than
        this call, and a later call weighs those first tasks without pulling them again."""
        held = self._hand(queue)
        looked = {d.subscription for d in probed} - drained
        back = [d for d in hand if d.subscription in looked]
        if not back or len(back) == len(hand):
            return hand
        held.give_back(back)
        held.remember(back, _age)
        return [d for d in hand if d.subscription not in looked]

    def _drain(
        self,
        queue: str,
        topology: QueueTopology,
        source: str,
        hand: list[Delivery],
        end: float,
        *,
        fresh: bool = False,
    ) -> tuple[list[Delivery], bool]:
        """Pull a subscription until it is empty or the hand is full (by count or bytes): the
        available deliveries, and True when the subscription was found empty (all of it is in
        hand now).

        One found empty a moment ago (EMPTY_RECHECK) is not pulled again yet, unless `fresh`.
        """
        held = self._hand(queue)
        room = self.settings.pubsub_hold_max - len(hand)
        room_bytes = self.settings.pubsub_hold_bytes - sum(d.size for d in hand)
        found: list[Delivery] = []
        if not fresh and held.marked(source, time.monotonic()):
            return found, True
        try:
            while room > len(found) and time.monotonic() < end:
                want = min(room - len(found), 1000, self._fitting(source, room_bytes))
                if want == 0:
                    break
                ready = self._pull(queue, topology, source, want, end, patient=False, spread=True)
                if ready is None:
                    held.mark_empty(source)
                    return found, True
                found += ready
                room_bytes -= sum(d.size for d in ready)
        except Error:
            held.hold(found)
            raise
        return found, False

    def _next_wait(self) -> float:
        """Seconds a pull waits on an empty subscription once the lease call has tasks:
        NEXT_PULL_WAIT, or less where pulls that bring messages answer quickly (NEXT_PULL_ROUNDS
        of their time, at least NEXT_PULL_LEAST). Pub/Sub holds an empty pull to its deadline:
        a subscription drained to empty costs this much each time."""
        answered = self.rpc.answer_seconds
        if answered is None:
            return NEXT_PULL_WAIT
        return min(NEXT_PULL_WAIT, max(answered * NEXT_PULL_ROUNDS, NEXT_PULL_LEAST))

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
        remembered: Mapping[str, object],
        *,
        fresh: bool = False,
    ) -> list[Delivery]:
        """Pull the head of every subscription nothing in hand came from, side by side: of the
        shards, those whose token this process holds or wins now (other processes' shards are
        left to them), unless the queue has no tokens at all.

        A subscription found empty is not asked again for EMPTY_RECHECK seconds (unless `fresh`:
        then every free token is looked for), nor one `remembered` (its head a probe saw a
        moment ago);
        deferred tasks a probe brings are hidden until their ETA, so the probes continue past
        them.
        """
        now = time.monotonic()
        present = {d.subscription for d in hand}
        held = self._hand(queue)
        sources = [
            s
            for s in topology.sources
            if s not in present and s not in remembered and (fresh or not held.marked(s, now))
        ]
        shards = set(topology.shards)
        mine = held.grab([s for s in sources if s in shards], thorough=fresh, busy=bool(hand))
        if mine is not None:
            sources = [s for s in sources if s not in shards or s in mine]
        if not sources:
            return []
        began = time.monotonic()
        found, _ = self._pull_each(queue, topology, sources, PROBE_SIZE, end, patient=not hand)
        held_for = time.monotonic() - began
        if (
            not hand
            and not found
            and len(sources) == len(topology.sources)
            and held_for >= HELD_SHARE * self.settings.pubsub_pull_wait
            and self.rpc.holds_empty_pulls
        ):
            # Every subscription pulled and held the whole pull wait (as Pub/Sub holds an empty
            # pull; the emulator answers at once): none had a task.
            self._searched[queue] = began
        return found

    def _pull_each(
        self,
        queue: str,
        topology: QueueTopology,
        sources: list[str],
        size: int,
        end: float,
        *,
        patient: bool,
        spread: bool = False,
        cut: bool = True,
    ) -> tuple[list[Delivery], list[str]]:
        """Pull up to `size` from each source, side by side (an empty queue answers after one
        pull wait, not one per source): what came, and the sources that brought any.

        A source that brought nothing is not asked again for EMPTY_RECHECK seconds. When a pull
        fails, what the others brought is held and the first failure raised.
        """
        if spread:
            # A pull an earlier lease left running brings its tasks to the hand: not again (a
            # second answer would share the link with it); when every source has one, wait
            # for one to end.
            with self._flight_lock:
                self._flight_lock.wait_for(
                    lambda: any(s not in self._in_flight for s in sources),
                    timeout=max(end - time.monotonic(), 0.0),
                )
                sources = [s for s in sources if s not in self._in_flight] or sources
        with self._flight_lock:
            # Answers still coming share the link with this round's.
            beside = len(sources) + sum(self._in_flight.values())
        # The round's bytes are shared among the sources pulled side by side.
        share = self._pull_bytes() // len(sources)
        held = self._hand(queue)
        calls = [
            functools.partial(
                self._pull,
                queue,
                topology,
                source,
                max(1, min(size, self._fitting(source, share))),
                end,
                patient=patient,
                spread=spread,
                beside=beside,
            )
            for source in sources
        ]

        def flying(i: int) -> None:
            with self._flight_lock:
                self._in_flight[sources[i]] = self._in_flight.get(sources[i], 0) + 1

        def late(i: int, result: list[Delivery] | Error | None) -> None:
            # A pull still running when the lease answered: what it brings is held for the
            # next lease calls.
            try:
                if isinstance(result, list):
                    held.hold(result)
                elif result is None:
                    held.mark_empty(sources[i])
            finally:
                with self._flight_lock:
                    self._in_flight[sources[i]] -= 1
                    if not self._in_flight[sources[i]]:
                        del self._in_flight[sources[i]]
                    self._flight_lock.notify_all()

        results: Sequence[list[Delivery] | Error | Pending | None] = (
            self.rpc.run_until_useful(calls, bool, late, pending_hook=flying)
            if spread and cut
            else self.rpc.run_each(calls)
        )
        found: list[Delivery] = []
        brought: list[str] = []
        failure: Error | None = None
        for source, result in zip(sources, results, strict=True):
            if isinstance(result, Pending):
                continue
            if isinstance(result, Error):
                failure = failure or result
            elif result is None:
                held.mark_empty(source)
            else:
                found += result
                brought.append(source)
        if failure is not None:
            held.hold(found)
            raise failure
        return found, brought

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
    ) -> list[Delivery] | None:
        """Pull up to max_messages, sorted out: the available deliveries; None if none came.

        A patient pull (nothing to answer with yet) waits up to pubsub_pull_wait for messages;
        `spread` splits a big pull into a few running side by side; `beside` is the number of
        subscriptions pulled side by side with this one. Copies this subscription
        should not serve (an emulator ignoring filters) are acked away; tasks whose ETA is
        ahead are hidden until then with their ack deadline.
        """
        remaining = end - time.monotonic()
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
        sizes = [total // parts + (1 if i < total % parts else 0) for i in range(parts)]
        pulled_at = time.time()
        results, failure = self.rpc.pull_many(
            source,
            sizes,
            queue=queue,
            wait=max(min(wait, remaining), 0.05),
            budget=max(remaining, 0.05),
            # The answers of pulls side by side share the link: each is given the time of them
            # all to arrive (a subscription's first pull asks for one message).
            message_bytes=known * beside if known is not None else SIZE_GUESS,
        )
        received = [item for result in results for item in result]
        if not received:
            if failure is not None:
                raise failure
            return None
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
        del received, results, item
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
        if failure is not None:
            # Another pull of this round failed: keep what came for the next call, then say so.
            self._hand(queue).hold(ready)
            raise failure
        return ready

    def _one_per_name(
        self, queue: str, topology: QueueTopology, picked: list[Delivery]
    ) -> list[Delivery]:
        """The picked deliveries less any whose name came earlier in them; those are held for
        the next lease call.

        Without a name registry two messages may carry one name (a producer's retried add, a
        foreign publisher). A lease hands out each name once, as on the legacy queue, so a
        worker's batch can be deleted in one call and bookkeeping by name stays exact.
        """
        names: set[str] = set()
        unique: list[Delivery] = []
        repeated: list[Delivery] = []
        for delivery in picked:
            (repeated if delivery.name in names else unique).append(delivery)
            names.add(delivery.name)
        self._hand(queue).hold(repeated)
        return unique

    def _grant(
        self, queue: str, topology: QueueTopology, picked: list[Delivery], lease_seconds: float
    ) -> list[Task]:
        """Set the picked deliveries' ack deadlines to the lease and record the leases."""
        picked = self._drop_deleted(queue, picked)
        if not picked:
            return []
        picked.sort(key=lambda d: (d.order, d.name))
        picked = self._one_per_name(queue, topology, picked)
        limits = [d for d in picked if self._over_retry_limit(d)]
        if limits:
            self._expire(queue, limits)
            picked = [d for d in picked if not self._over_retry_limit(d)]
        seconds = self._deadline_for(lease_seconds)
        now = time.time()
        expires = now + lease_seconds
        # A delivery whose pull-time deadline (known only when read from the subscription)
        # already ends when the lease should, within SAME_DEADLINE and never after, needs no
        # modifyAckDeadline: its lease ends at that deadline.
        as_pulled: dict[str, float] = {}
        by_source: dict[str, list[str]] = defaultdict(list)
        for delivery in picked:
            deadline = topology.ack_deadlines.get(delivery.subscription)
            pulled_end = delivery.pulled_at + deadline if deadline is not None else -1.0
            if expires - SAME_DEADLINE <= pulled_end <= expires:
                as_pulled[delivery.ack_id] = pulled_end
            else:
                by_source[delivery.subscription].append(delivery.ack_id)
        stale: set[str] = set()
        # Every subscription's deadlines side by side: one round trip, not one per subscription.
        answers = self.rpc.run_each(
            [
                functools.partial(self.rpc.modify, source, ack_ids, seconds, queue=queue)
                for source, ack_ids in by_source.items()
            ]
        )
        for answer in answers:
            if isinstance(answer, Error):
                self._hand(queue).hold(picked)
                raise answer
            stale |= answer
        leases = []
        for delivery in picked:
            end = as_pulled.get(delivery.ack_id)
            if end is not None:
                leases.append(Lease(queue, delivery, expires=end, held_until=end))
            elif delivery.ack_id not in stale:
                leases.append(Lease(queue, delivery, expires=expires, held_until=now + seconds))
        self._book.add(leases)
        if lease_seconds > MAX_ACK_DEADLINE:
            self._keeper.poke()
        counts = self._book.retry_counts([lease.delivery for lease in leases])
        return [
            Task.restore(
                payload=lease.delivery.payload,
                name=lease.delivery.name,
                tag=lease.delivery.tag,
                eta_posix=lease.expires,
                retry_count=count,
                lease_token=lease.ack_id,
                queue_name=queue,
            )
            for lease, count in zip(leases, counts, strict=True)
        ]

    def _drop_deleted(self, queue: str, picked: list[Delivery]) -> list[Delivery]:
        """The picked deliveries less those whose task was deleted by name (acked unseen).

        A process that deletes a task it holds no lease on cannot ack it; it tombstones the name
        (in the registry when there is one, else in this process), and whoever is delivered the
        task next drops it here, just before it would be handed out.
        """
        if not picked:
            return picked
        gone = self._book.dropped_among(d.message_id for d in picked)
        if self.names is not None:
            try:
                tombstoned = self.names.tombstoned(queue, [d.name for d in picked])
            except Error:
                self._hand(queue).hold(picked)
                raise
            gone |= {d.message_id for d in picked if d.name in tombstoned}
        if not gone:
            return picked
        dropped = [d for d in picked if d.message_id in gone]
        self._book.drop(gone)
        for source, items in by_subscription(dropped).items():
            self.rpc.ack(source, [d.ack_id for d in items], queue=queue)
        log.info(
            "queue %r: dropped %d delivered tasks deleted by name (first %r)",
            queue,
            len(dropped),
            dropped[0].name,
        )
        return [d for d in picked if d.message_id not in gone]

    def _over_retry_limit(self, delivery: Delivery) -> bool:
        limit = delivery.retry_limit
        return limit is not None and self._book.retry_count(delivery) > limit

    def _expire(self, queue: str, deliveries: list[Delivery]) -> None:
        """Delete tasks whose retry limit is used up instead of leasing them (legacy rule)."""
        for source, items in by_subscription(deliveries).items():
            self.rpc.ack(source, [d.ack_id for d in items], queue=queue)
        if self.names is not None:
            self.names.tombstone(queue, [d.name for d in deliveries])

    def _deadline_for(self, lease_seconds: float) -> int:
        """The ack deadline a lease starts with: all of it up to 600 s, else one window."""
        if lease_seconds <= MAX_ACK_DEADLINE:
            return math.ceil(lease_seconds)
        return math.ceil(self.settings.pubsub_lease_window)

    def _settle_due(self, now: float) -> None:
        """The keeper's pass over the hands: settle held deliveries whose time is up."""
        for hand in list(self._hands.values()):
            hand.settle_due(now)

    def _next_release(self) -> float | None:
        """When the first held delivery of any queue is due to be settled (POSIX seconds)."""
        times = [hand.next_release() for hand in list(self._hands.values())]
        return min((t for t in times if t is not None), default=None)

    def _renew(self, due: list[Lease]) -> None:
        """The keeper's renewal: extend each due lease by a window, or to its end if sooner."""
        locked = [lease for lease in due if lease.lock.acquire(blocking=False)]
        try:
            now = time.time()
            groups: dict[tuple[str, str, int], list[Lease]] = defaultdict(list)
            for lease in locked:
                if not lease.needs_keeper() or not self._book.holds(lease):
                    continue
                window = min(lease.expires - now, self.settings.pubsub_lease_window)
                seconds = max(math.ceil(window), 0)
                groups[(lease.queue, lease.delivery.subscription, seconds)].append(lease)
            for (queue, source, seconds), leases in groups.items():
                stale = self.rpc.modify(source, [le.ack_id for le in leases], seconds, queue=queue)
                for lease in leases:
                    if lease.ack_id in stale:
                        lease.lost = True
                        log.warning(
                            "queue %r, task %r: Pub/Sub took the lease back before it ended"
                            " (renewed too late); the holder will get TaskLeaseExpiredError",
                            queue,
                            lease.delivery.name,
                        )
                    else:
                        lease.held_until = now + seconds
        finally:
            for lease in locked:
                lease.lock.release()

    # Changing and ending leases

    def modify_lease(self, queue: str, task: Task, lease_seconds: float) -> None:
        lease = self._current(queue, task)
        with lease.lock:
            now = time.time()
            self._check_current(lease, task, now)
            seconds = self._deadline_for(lease_seconds)
            source = lease.delivery.subscription
            if self.rpc.modify(source, [lease.ack_id], seconds, queue=queue):
                self._book.remove(lease)
                raise TaskLeaseExpiredError(
                    "Pub/Sub no longer holds this lease for you (it ended, or the task was"
                    " leased again); lease the task again",
                    queue=queue,
                    task=task.name,
                )
            if lease_seconds == 0:
                self._book.remove(lease)
                self._hand(queue).unmark([source])
            lease.expires = now + lease_seconds
            lease.held_until = now + seconds
        task.eta_posix = lease.expires
        task.lease_token = lease.ack_id
        if lease.needs_keeper():
            self._keeper.poke()

    def _current(self, queue: str, task: Task) -> Lease:
        lease = self._book.find(queue, task)
        if lease is None and self._book.was_deleted(queue, task.name or ""):
            raise TombstonedTaskError(
                "the task was deleted; its lease cannot change", queue=queue, task=task.name
            )
        if lease is None:
            raise TaskLeaseExpiredError(
                "this process holds no lease on the task (on Pub/Sub a lease lives with the"
                " process that took it, and only its holder can change or delete the task);"
                " lease the task again",
                queue=queue,
                task=task.name,
            )
        return lease

    @staticmethod
    def _check_current(lease: Lease, task: Task, now: float) -> None:
        if lease.lost:
            raise TaskLeaseExpiredError(
                "Pub/Sub took this lease back before it ended (it could not be renewed in"
                " time); lease the task again",
                queue=lease.queue,
                task=task.name,
            )
        if lease.expires <= now:
            raise TaskLeaseExpiredError(
                "the lease has expired; lease the task again", queue=lease.queue, task=task.name
            )
        if task.eta_posix is None or abs(task.eta_posix - lease.expires) > LEASE_TOKEN_SLACK:
            # The legacy lease token is the task's ETA: a task object whose ETA is not the
            # current lease's end (a stale copy, or one rebuilt by name) holds no lease.
            raise TaskLeaseExpiredError(
                "the task's ETA is not the end of its current lease (the ETA is the lease"
                " token: this task object is stale); use the task the last lease or"
                " modify_task_lease returned",
                queue=lease.queue,
                task=task.name,
            )

    def delete(self, queue: str, tasks: Sequence[Task]) -> list[bool]:
        """Acknowledge each task's lease; raises TaskLeaseExpiredError for the first task whose
        lease is gone, after deleting the others (their was_deleted is then already True).

        A task given by name alone is acked when this process holds a lease on it; otherwise it
        is deleted by name (see _delete_by_name): only a lease's holder can ack on Pub/Sub, so
        the name is tombstoned and the task is dropped wherever it is delivered next.
        """
        self.topology(queue)
        results = [False] * len(tasks)
        failures: list[Error] = []
        by_source: dict[str, list[tuple[int, Lease]]] = defaultdict(list)
        leases = self._book.find_all(queue, tasks)
        for i, (task, lease) in enumerate(zip(tasks, leases, strict=True)):
            if lease is None:
                # A bare name this process holds no lease on: deleted by name below;
                # a lease token that is no longer current: the holder must hear about it.
                if task.lease_token is not None and not self._book.was_deleted(
                    queue, task.name or ""
                ):
                    failures.append(self._no_lease(queue, task))
                continue
            if lease.lost:
                failures.append(self._no_lease(queue, task))
                continue
            by_source[lease.delivery.subscription].append((i, lease))
        unheld = [
            i
            for i, (task, lease) in enumerate(zip(tasks, leases, strict=True))
            if lease is None and task.lease_token is None
        ]
        if unheld:
            for i, done in zip(unheld, self._delete_by_name(queue, tasks, unheld), strict=True):
                results[i] = done
        deleted: list[str] = []
        try:
            self._ack_leases(queue, tasks, by_source, results, failures, deleted)
        finally:
            if self.names is not None and deleted:
                self.names.tombstone(queue, deleted)
            # Queue.delete sets was_deleted from the results; when this call raises, it is
            # set here, so the caller still sees which tasks are gone.
            for task, done in zip(tasks, results, strict=True):
                if done:
                    task.was_deleted = True
        if failures:
            raise failures[0]
        return results

    def _delete_by_name(self, queue: str, tasks: Sequence[Task], indexes: list[int]) -> list[bool]:
        """Delete tasks this process holds no lease on, by name: True per task deleted.

        With a name registry the name is tombstoned there if its task is in the queue (a live
        name), and every process drops the task when it is delivered. Without one, only tasks
        this process published or was delivered (known by message id) count as in the queue,
        and only this process drops them; documented in docs/pubsub.md. A name re-added later is
        a new message, never dropped for the old one.
        """
        names = [tasks[i].name or "" for i in indexes]
        known = [self._book.messages_of(queue, name) for name in names]
        live = [sorted(set(ids) - self._book.dropped_among(ids)) for ids in known]
        if self.names is not None:
            done = self.names.delete(queue, names)
        else:
            done = [bool(ids) for ids in live]
        self._book.drop(m for ids, ok in zip(live, done, strict=True) if ok for m in ids)
        return done

    def _ack_leases(
        self,
        queue: str,
        tasks: Sequence[Task],
        by_source: dict[str, list[tuple[int, Lease]]],
        results: list[bool],
        failures: list[Error],
        deleted: list[str],
    ) -> None:
        """Acknowledge leases, one call per subscription and all side by side (one round trip
        on the service, not one per subscription), filling results, failures and deleted names.

        Every lease is locked first, in one order for every thread, so a lease released or
        deleted by another thread meanwhile is left out."""
        locked = sorted(
            ((i, lease) for items in by_source.values() for i, lease in items),
            key=lambda item: item[1].ack_id,
        )
        for _, lease in locked:
            lease.lock.acquire()
        try:
            current = self._book.holding([lease for _, lease in locked])
            sources = [
                (source, [(i, le) for i, le in items if le.ack_id in current])
                for source, items in by_source.items()
            ]
            sources = [(source, items) for source, items in sources if items]
            answers = self.rpc.run_each(
                [
                    functools.partial(
                        self.rpc.ack, source, [le.ack_id for _, le in items], queue=queue
                    )
                    for source, items in sources
                ]
            )
            unanswered: Error | None = None
            for (_source, items), stale in zip(sources, answers, strict=True):
                if isinstance(stale, Error):
                    unanswered = unanswered or stale
                    continue
                acked = [le for _, le in items if le.ack_id not in stale]
                self._book.remove_all(acked, deleted=True)
                self._book.drop(le.delivery.message_id for le in acked)
                self._book.remove_all([le for _, le in items if le.ack_id in stale])
                for i, lease in items:
                    if lease.ack_id in stale:
                        failures.append(
                            TaskLeaseExpiredError(
                                "Pub/Sub refused the delete: the lease ended and the task may"
                                " be with another holder now; it stays in the queue",
                                queue=queue,
                                task=tasks[i].name,
                            )
                        )
                    else:
                        results[i] = True
                        deleted.append(lease.delivery.name)
            if unanswered is not None:
                # The other subscriptions' acks are counted above; this one's tasks stay leased.
                raise unanswered
        finally:
            for _, lease in locked:
                lease.lock.release()

    @staticmethod
    def _no_lease(queue: str, task: Task) -> TaskLeaseExpiredError:
        return TaskLeaseExpiredError(
            "this process holds no current lease on the task; on Pub/Sub only the holder of a"
            " task's lease can delete it: lease the task, then delete it",
            queue=queue,
            task=task.name,
        )

    def retry_parameters(self, queue: str) -> RetryParameters | None:
        """The queue's retry parameters, as its worker subscription carries them (labels
        written by `pullqueue plan`, or a Pub/Sub retry policy); None when it has none."""
        return self.topology(queue).retry

    def dead_letter(self, queue: str, task: Task, error: str) -> bool:
        """Move a task on its last delivery attempt, whose handler failed with `error`, to the
        dead-letter topic now, so `pullqueue dead-letters` shows why it died; True when done.
        False (nothing changed) when it is not on its last attempt, not leased by this process,
        or publishing is denied: release it then, as any failed task."""
        lease = self._book.find(queue, task)
        topology = self._topologies.get(queue)
        if lease is None or topology is None or not self.final_attempt(queue, task):
            return False
        with lease.lock:
            if lease.lost or not self._book.holds(lease):
                return False
            if not self._republisher.dead_letter(queue, topology, lease.delivery, error):
                return False
            self._book.remove(lease)
        return True

    def final_attempt(self, queue: str, task: Task) -> bool:
        """True when the task's current delivery is its last before the dead-letter policy
        moves it aside: released now, it goes to the dead-letter topic, not to a worker."""
        lease = self._book.find(queue, task)
        topology = self._topologies.get(queue)
        if lease is None or topology is None or not lease.delivery.attempt:
            return False
        return lease.delivery.attempt >= topology.max_attempts

    # Whole queue

    def purge(self, queue: str) -> None:
        """Seek every subscription of the queue to now: every task published so far is gone."""
        topology = self.topology(queue)
        when = time.time()
        for source in topology.sources:
            self.rpc.seek(source, when, queue=queue)
        # Publish times are kept to the millisecond: a task added right after this call must
        # not share the millisecond the seek cut at.
        time.sleep(max(when + PUBLISH_TIME_RESOLUTION - time.time(), 0.0))
        self._book.drop_queue(queue)
        self._hand(queue).clear()
        if self.names is not None:
            self.names.purge(queue)

    def stats(self, queue: str) -> QueueStats:
        """What this process knows: its leases and held tasks. Pub/Sub's API does not count a
        backlog (Cloud Monitoring does, minutes late), so `approximate` is always True."""
        self.topology(queue)
        now = time.time()
        leased = [le for le in self._book.leases(queue) if not le.lost and le.expires > now]
        held = self._hand(queue).count()
        return QueueStats(
            queue=queue,
            tasks=len(leased) + held,
            oldest_eta=None,
            leased=len(leased),
            approximate=True,
            whole_queue=False,
        )

    def list_queues(self) -> list[str]:
        """The queues provisioned in the project (see pubsub/inventory.py)."""
        from pullqueue.adapters.pubsub.inventory import provisioned_queues

        return provisioned_queues(self)

    def queue_identity(self, queue: str) -> str:
        """The queue's topic (prefix included): what every spelling of the URL reaches."""
        return f"pubsub://projects/{self.project}/topics/{self.settings.pubsub_prefix}{queue}"

    def close(self) -> None:
        """Stop the keeper and give back every lease and held task this process still has."""
        if self._closed:
            return
        self._closed = True
        self._keeper.stop()
        # Pulls a lease left running bring their tasks to the hand: wait for them (each ends
        # within its pull wait), so what they bring is given back below.
        self.rpc.finish_pulls()
        leases = self._book.take_everything()
        held = {queue: hand.close() for queue, hand in self._hands.items()}
        now = time.time()
        try:
            by_source: dict[tuple[str, str], list[str]] = defaultdict(list)
            for lease in leases:
                if not lease.lost and lease.expires > now:
                    by_source[(lease.queue, lease.delivery.subscription)].append(lease.ack_id)
            for (queue, source), ack_ids in by_source.items():
                self.rpc.modify(source, ack_ids, 0, queue=queue)
            for queue, deliveries in held.items():
                self._hands[queue].give_back(deliveries)
        except Error as exc:
            log.warning(
                "closing %s: could not give leases back (%s); they return to their queues"
                " when their ack deadlines run out",
                self.url,
                exc,
            )
        finally:
            # The claims last: a process that wins one drains the shard with the tasks given
            # back above in it, its tags whole.
            self._claims.release_all(
                {q: (t.claims, t.claims_topic) for q, t in self._topologies.items()}
            )
            self.rpc.close()
            if self._close_names and self.names is not None:
                self.names.close()


def _age(delivery: Delivery) -> tuple[float, str]:
    """Oldest first: by ETA (else publish time), then name."""
    return (delivery.order, delivery.name)


def _of_tag(tag: str) -> Wanted:
    return lambda delivery: delivery.tag == tag


def from_url(url: SplitResult, options: dict[str, Any]) -> PubSubBackend:
    """Build a PubSubBackend for `pubsub://PROJECT` (options: settings, auto_create, names,
    dedupe_url, accept_duplicate_names). Without `names`, a registry is built from `dedupe_url`
    (default PULLQUEUE_DEDUPE_URL) when one is set, and closed with the backend."""
    if url.path not in ("", "/") or url.query or url.fragment:
        raise ConfigurationError(
            f"expected pubsub://PROJECT, got {url.geturl()!r} (no path or query)"
        )
    settings: Settings = options.get("settings") or Settings()
    names: NameRegistry | None = options.get("names")
    dedupe_url = options.get("dedupe_url", settings.dedupe_url)
    owned = names is None and bool(dedupe_url)
    if owned:
        from pullqueue.dedupe import connect_registry

        names = connect_registry(dedupe_url, settings=settings)
    try:
        return PubSubBackend(
            url.netloc,
            settings=settings,
            auto_create=options.get("auto_create"),
            names=names,
            close_names=owned,
            accept_duplicate_names=options.get("accept_duplicate_names"),
        )
    except BaseException:
        if owned and names is not None:
            names.close()
        raise
