"""This process's Pub/Sub leases: who holds which task until when, and delivery counts, thread-safe.

The Pub/Sub adapter and its lease keeper share this book; it does no I/O, so every decision
about a lease (is it current, is it due for renewal) is made here under one lock. Deliveries
pulled and not leased yet are the hand's (hand.py).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pullqueue.adapters.pubsub.wire import Delivery
from pullqueue.task import Task

RECENT_NAMES = 100_000
"""Names of deleted tasks remembered, so deleting one again says 'already gone'; and the
message ids of tasks seen and of tasks gone, so a delete by name finds its messages and a
delivery of a gone one is dropped."""
COUNTED_MESSAGES = 100_000
"""Messages whose deliveries this process consumed without handing them out, remembered."""
EXPIRED_GRACE = 60.0
"""Seconds a lease's record outlives its expiry (a delete may still reach Pub/Sub in time)."""


@dataclass(eq=False)
class Lease:
    """One task leased by this process: the delivery it came from and how long it lasts."""

    queue: str
    delivery: Delivery
    expires: float
    """The lease's end (POSIX seconds): the task's eta_posix as the holder sees it."""
    held_until: float
    """Until when Pub/Sub's ack deadline is known to run (a lower bound, POSIX seconds)."""
    lost: bool = False
    """Pub/Sub took the lease back before it ended (a renewal came too late)."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    """Orders the holder's modify/delete and the keeper's renewal of this one lease."""
    ack_id: str = field(init=False)

    def __post_init__(self) -> None:
        self.ack_id = self.delivery.ack_id

    def needs_keeper(self) -> bool:
        """True while the lease ends after what Pub/Sub currently holds for it."""
        return not self.lost and self.expires > self.held_until


class LeaseBook:
    """Leases by ack id and by task name, names and messages seen or gone, delivery counts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._leases: dict[str, Lease] = {}
        self._by_name: dict[tuple[str, str], list[str]] = {}
        self._deleted: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._messages: OrderedDict[tuple[str, str], list[str]] = OrderedDict()
        self._dropped: OrderedDict[str, None] = OrderedDict()
        self._skipped: OrderedDict[str, int] = OrderedDict()

    # Leases

    def add(self, leases: Iterable[Lease]) -> None:
        with self._lock:
            for lease in leases:
                self._leases[lease.ack_id] = lease
                key = (lease.queue, lease.delivery.name)
                self._by_name.setdefault(key, []).append(lease.ack_id)

    def find(self, queue: str, task: Task) -> Lease | None:
        """The lease behind a task: the one its lease token names (None when that lease is gone,
        even if the task was leased again since), or for a bare name the newest lease of it."""
        return self.find_all(queue, [task])[0]

    def find_all(self, queue: str, tasks: Sequence[Task]) -> list[Lease | None]:
        """find() for many tasks under one lock."""
        found: list[Lease | None] = []
        with self._lock:
            for task in tasks:
                lease: Lease | None
                if task.lease_token is not None:
                    lease = self._leases.get(task.lease_token)
                    if lease is not None and (lease.queue, lease.delivery.name) != (
                        queue,
                        task.name,
                    ):
                        lease = None
                else:
                    ack_ids = self._by_name.get((queue, task.name or ""))
                    lease = self._leases[ack_ids[-1]] if ack_ids else None
                found.append(lease)
        return found

    def holding(self, leases: Iterable[Lease]) -> set[str]:
        """The ack ids of those leases still in the book."""
        with self._lock:
            return {le.ack_id for le in leases if self._leases.get(le.ack_id) is le}

    def remove(self, lease: Lease, *, deleted: bool = False) -> None:
        """Forget a lease (acked, released or lost); deleted=True remembers its name as gone."""
        self.remove_all([lease], deleted=deleted)

    def remove_all(self, leases: Iterable[Lease], *, deleted: bool = False) -> None:
        """remove() for many leases under one lock."""
        with self._lock:
            for lease in leases:
                self._forget(lease)
                if deleted:
                    key = (lease.queue, lease.delivery.name)
                    self._deleted[key] = None
                    self._deleted.move_to_end(key)
            while len(self._deleted) > RECENT_NAMES:
                self._deleted.popitem(last=False)

    def _forget(self, lease: Lease) -> None:
        if self._leases.pop(lease.ack_id, None) is None:
            return
        key = (lease.queue, lease.delivery.name)
        ack_ids = self._by_name.get(key, [])
        if lease.ack_id in ack_ids:
            ack_ids.remove(lease.ack_id)
        if not ack_ids:
            self._by_name.pop(key, None)

    def by_ack_ids(self, ack_ids: Iterable[str]) -> list[Lease]:
        """The leases in the book of these ack ids."""
        with self._lock:
            return [self._leases[a] for a in ack_ids if a in self._leases]

    def holds(self, lease: Lease) -> bool:
        """True while the lease is in the book (not deleted, released or forgotten)."""
        with self._lock:
            return self._leases.get(lease.ack_id) is lease

    def was_deleted(self, queue: str, name: str) -> bool:
        with self._lock:
            return (queue, name) in self._deleted

    def seen(self, queue: str, messages: Iterable[tuple[str, str]]) -> None:
        """Remember (task name, message id) pairs this process published or was delivered."""
        with self._lock:
            for name, message_id in messages:
                key = (queue, name)
                ids = self._messages.get(key)
                if ids is None:
                    self._messages[key] = [message_id]
                elif message_id not in ids:
                    ids.append(message_id)
                self._messages.move_to_end(key)
            while len(self._messages) > RECENT_NAMES:
                self._messages.popitem(last=False)

    def messages_of(self, queue: str, name: str) -> list[str]:
        """The ids of the messages of this name this process knows of (recently)."""
        with self._lock:
            return list(self._messages.get((queue, name), ()))

    def drop(self, message_ids: Iterable[str]) -> None:
        """Remember messages whose task is gone (acked, or deleted by name): a delivery of one
        is acknowledged unseen, never handed out."""
        with self._lock:
            for message_id in message_ids:
                self._dropped[message_id] = None
                self._dropped.move_to_end(message_id)
            while len(self._dropped) > RECENT_NAMES:
                self._dropped.popitem(last=False)

    def dropped_among(self, message_ids: Iterable[str]) -> set[str]:
        """The message ids among these whose task is gone."""
        with self._lock:
            return {m for m in message_ids if m in self._dropped}

    def leases(self, queue: str | None = None) -> list[Lease]:
        with self._lock:
            return [le for le in self._leases.values() if queue is None or le.queue == queue]

    def due(self, horizon: float) -> list[Lease]:
        """Leases the keeper must renew now: they end after Pub/Sub's deadline, due by horizon."""
        with self._lock:
            return [
                le for le in self._leases.values() if le.needs_keeper() and le.held_until <= horizon
            ]

    def needs_keeper(self) -> bool:
        with self._lock:
            return any(le.needs_keeper() for le in self._leases.values())

    def sweep(self, now: float) -> None:
        """Forget leases that ended more than EXPIRED_GRACE seconds ago."""
        with self._lock:
            for lease in [le for le in self._leases.values() if le.expires + EXPIRED_GRACE < now]:
                self._forget(lease)

    def drop_queue(self, queue: str) -> list[Lease]:
        """Forget every lease of a queue (after a purge); the leases."""
        with self._lock:
            dropped = [le for le in self._leases.values() if le.queue == queue]
            for lease in dropped:
                self._forget(lease)
            return dropped

    def take_everything(self) -> list[Lease]:
        """Every lease, forgotten (the backend is closing)."""
        with self._lock:
            leases = list(self._leases.values())
            self._leases.clear()
            self._by_name.clear()
            return leases

    # Deliveries consumed without a lease (ETA deferrals, releases of held tasks)

    def skipped(self, deliveries: Iterable[Delivery]) -> None:
        with self._lock:
            for delivery in deliveries:
                key = delivery.message_id
                self._skipped[key] = self._skipped.get(key, 0) + 1
                self._skipped.move_to_end(key)
            while len(self._skipped) > COUNTED_MESSAGES:
                self._skipped.popitem(last=False)

    def retry_count(self, delivery: Delivery) -> int:
        """Leases of the message so far, this one included: Pub/Sub's delivery attempt less the
        deliveries this process consumed without handing the task out."""
        return self.retry_counts([delivery])[0]

    def retry_counts(self, deliveries: Iterable[Delivery]) -> list[int]:
        """retry_count() for many deliveries under one lock."""
        with self._lock:
            skipped = self._skipped
            return [max(d.attempt - skipped.get(d.message_id, 0), 1) for d in deliveries]
