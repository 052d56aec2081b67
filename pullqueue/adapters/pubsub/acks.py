"""The ack and modifyAckDeadline rounds of the Pub/Sub backend: a lease's grant, the keeper's
renewals and a delete's acks, each one call per subscription, side by side.

backend.py keeps the Backend methods and the pulls are pubsub/pulls.py's; what turns delivered
messages into leases and leases into deleted tasks is here (docs/architecture.md).
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import replace

from pullqueue.adapters.pubsub.deadlines import DeadlineChanges
from pullqueue.adapters.pubsub.hand import Hand
from pullqueue.adapters.pubsub.leases import Lease, LeaseBook
from pullqueue.adapters.pubsub.provision import QueueTopology
from pullqueue.adapters.pubsub.rpc import MAX_ACK_DEADLINE, PubSubRpc
from pullqueue.adapters.pubsub.wire import Delivery, by_subscription
from pullqueue.config import Settings
from pullqueue.dedupe.base import NameRegistry
from pullqueue.errors import Error, TaskLeaseExpiredError
from pullqueue.task import Task

log = logging.getLogger(__name__)

Early = Callable[[list[Delivery]], Callable[[], list[Delivery]]]
"""AckRounds.early_grant's: start setting deliveries' deadlines; the call that waits for it."""

SAME_DEADLINE = 0.25
"""Seconds a lease may end early to reuse the deadline its pull set (saving one call)."""


class AckRounds:
    """A backend's acks and ack-deadline changes: leases granted, renewed and acked.

    `hand` gives a queue's hand (pubsub/hand.py), `names` is the backend's name registry (if
    any) and `poke` wakes the lease keeper.
    """

    def __init__(
        self,
        settings: Settings,
        rpc: PubSubRpc,
        book: LeaseBook,
        hand: Callable[[str], Hand],
        names: NameRegistry | None,
        poke: Callable[[], None],
        changes: DeadlineChanges | None = None,
    ) -> None:
        self.settings = settings
        self.rpc = rpc
        self._book = book
        self._hand = hand
        self.names = names
        self._poke = poke
        self.changes = changes or DeadlineChanges()
        """Deadline changes sent without waiting (a lease's shortened deadline, the hand's
        held tasks set ahead): what a later change of the same delivery waits for."""

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

    def grant(
        self, queue: str, topology: QueueTopology, picked: list[Delivery], lease_seconds: float
    ) -> list[Task]:
        """Set the picked deliveries' ack deadlines to the lease and record the leases.

        A delivery whose deadline (set by its pull, or ahead by the hand: Hand.set_ahead) runs
        past the lease's end is leased at once: its deadline is shortened to the lease's in the
        background (_shorten), not in a round trip before the answer. Until that lands the task
        stays hidden to its earlier deadline, never less than the lease, so it cannot be leased
        twice; a change of that lease waits for it (modify_task_lease, deadlines.py)."""
        picked = self._drop_deleted(queue, picked)
        if not picked:
            return []
        picked.sort(key=lambda d: (d.order, d.name))
        picked = self._one_per_name(queue, topology, picked)
        limits = [d for d in picked if self._over_retry_limit(d)]
        if limits:
            self._expire(queue, limits)
            picked = [d for d in picked if not self._over_retry_limit(d)]
        seconds = self.deadline_for(lease_seconds)
        now = time.time()
        expires = now + lease_seconds
        # A delivery whose pull-time deadline (known only when read from the subscription)
        # already ends when the lease should, within SAME_DEADLINE and never after, needs no
        # modifyAckDeadline: its lease ends at that deadline.
        as_pulled: dict[str, float] = {}
        by_source: dict[str, list[str]] = defaultdict(list)
        later: dict[str, list[str]] = defaultdict(list)
        for delivery in picked:
            deadline = topology.ack_deadlines.get(delivery.subscription)
            pulled_end = delivery.pulled_at + deadline if deadline is not None else -1.0
            if expires - SAME_DEADLINE <= pulled_end <= expires:
                as_pulled[delivery.ack_id] = pulled_end
            elif pulled_end > expires and lease_seconds <= MAX_ACK_DEADLINE:
                later[delivery.subscription].append(delivery.ack_id)
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
        shortened = {ack_id for ack_ids in later.values() for ack_id in ack_ids}
        for delivery in picked:
            end = as_pulled.get(delivery.ack_id)
            if end is not None:
                leases.append(Lease(queue, delivery, expires=end, held_until=end))
            elif delivery.ack_id in shortened:
                # Pub/Sub holds it at least until the lease ends, before and after _shorten.
                leases.append(Lease(queue, delivery, expires=expires, held_until=expires))
            elif delivery.ack_id not in stale:
                leases.append(Lease(queue, delivery, expires=expires, held_until=now + seconds))
        self._book.add(leases)
        for source, ack_ids in later.items():
            self._shorten(queue, source, ack_ids, seconds, expires)
        if lease_seconds > MAX_ACK_DEADLINE:
            self._poke()
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

    def _shorten(
        self, queue: str, source: str, ack_ids: list[str], seconds: int, expires: float
    ) -> None:
        """Set leased deliveries' deadlines (running past their lease's end, `expires`) to the
        lease's, in the background: counted in flight (self.changes) until the answer came."""
        self.changes.send(
            self.rpc,
            source,
            ack_ids,
            seconds,
            queue=queue,
            answered=functools.partial(self._shortened, queue, source, ack_ids, seconds, expires),
        )

    def _shortened(
        self,
        queue: str,
        source: str,
        ack_ids: list[str],
        seconds: int,
        expires: float,
        future: Future[set[str]],
    ) -> None:
        """A shortening's answer. A lease whose delivery Pub/Sub no longer holds is lost (its
        holder hears it at its delete or modify). A refused or failed one (Pub/Sub refuses the
        whole request when one of its deliveries was acked meanwhile: the holder deleted it) is
        sent again once for the leases still held and unchanged (their end still `expires`: a
        modify_task_lease that went meanwhile set the deadline it wants, which the shortening
        sent again would overwrite); one still not shortened returns to the queue at its
        earlier deadline if neither deleted nor changed (later, never sooner, than its lease's
        end).

        The change's waiters (modify_lease) are released when the call ends, before this runs:
        a change made in between is seen by its new end here, one under way by its lock."""
        failure = future.exception()
        stale = set() if failure is not None else future.result()
        if failure is None and not stale:
            return
        # A lease locked now is being deleted or changed, which settles its deadline (an ack that
        # went first is why Pub/Sub refused it; a change is sent after this answer, modify_lease
        # waits for it). The others are lost when Pub/Sub no longer held them, or sent again
        # under their locks, so no change of them goes before. Never waited for: this runs in a
        # thread of the pool the deletes' calls need.
        locked = [
            lease for lease in self._book.by_ack_ids(ack_ids) if lease.lock.acquire(blocking=False)
        ]
        try:
            leases = [lease for lease in locked if self._book.holds(lease) and not lease.lost]
            for lease in leases:
                if lease.ack_id in stale:
                    _lose(
                        lease, "Pub/Sub no longer held the task when its lease's deadline was set"
                    )
            # (Refused: none was marked lost above, stale being empty then.)
            again = (
                [lease.ack_id for lease in leases if lease.expires == expires]
                if failure is not None
                else []
            )
            if not again:
                return
            try:
                for lease in self._book.by_ack_ids(
                    self.rpc.modify(source, again, seconds, queue=queue)
                ):
                    lease.lost = True
            except Error as exc:
                log.warning(
                    "queue %r: could not set %d leases' deadlines to their end (%s); a task"
                    " neither deleted nor changed returns to the queue at its earlier deadline"
                    " (after its lease's end, at most the hold time plus the lease's seconds)",
                    queue,
                    len(again),
                    exc,
                )
        finally:
            for lease in locked:
                lease.lock.release()

    def early_grant(
        self, queue: str, topology: QueueTopology, lease_seconds: float
    ) -> Early | None:
        """What sets the ack deadline of held deliveries a lease call took from the hand to
        the lease's while the call pulls more, side by side (rather than a round trip after
        them, in grant); None when grant could not rely on it (the subscriptions' deadlines
        unread, or a lease longer than an ack deadline).

        It starts the calls and returns what waits for them: the deliveries, those whose
        deadline was set with their pull time moved so that it and the subscription's deadline
        end where the new deadline does (as after a pull). grant then makes no call for them
        when it comes within SAME_DEADLINE of the calls; a failed or refused one is left as it
        was, for grant to set (or drop) as before.
        """
        if lease_seconds > MAX_ACK_DEADLINE or not topology.ack_deadlines:
            return None
        seconds = self.deadline_for(lease_seconds)

        def begin(deliveries: list[Delivery]) -> Callable[[], list[Delivery]]:
            at = time.time()
            groups = by_subscription(deliveries)
            calls = {
                source: self.rpc.start(
                    functools.partial(
                        self.rpc.modify, source, [d.ack_id for d in items], seconds, queue=queue
                    )
                )
                for source, items in groups.items()
            }

            def done() -> list[Delivery]:
                out: list[Delivery] = []
                for source, items in groups.items():
                    deadline = topology.ack_deadlines.get(source)
                    try:
                        stale = calls[source].result()
                    except Error:
                        stale = None
                    if stale is None or deadline is None:
                        out += items
                        continue
                    moved = at + seconds - deadline
                    out += [d if d.ack_id in stale else replace(d, pulled_at=moved) for d in items]
                return out

            return done

        return begin

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

    def deadline_for(self, lease_seconds: float) -> int:
        """The ack deadline a lease starts with: all of it up to 600 s, else one window."""
        if lease_seconds <= MAX_ACK_DEADLINE:
            return math.ceil(lease_seconds)
        return math.ceil(self.settings.pubsub_lease_window)

    def renew(self, due: list[Lease]) -> None:
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
                        _lose(
                            lease, "Pub/Sub took the lease back before it ended (renewed too late)"
                        )
                    else:
                        lease.held_until = now + seconds
        finally:
            for lease in locked:
                lease.lock.release()

    def ack_leases(
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


def _lose(lease: Lease, why: str) -> None:
    """Mark a lease lost (its holder's delete or modify raises TaskLeaseExpiredError), saying
    why in a warning."""
    lease.lost = True
    log.warning(
        "queue %r, task %r: %s; the holder will get TaskLeaseExpiredError",
        lease.queue,
        lease.delivery.name,
        why,
    )
