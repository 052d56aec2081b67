"""Drains out of the hand's turn: the shard of the next oldest head, drained in a thread of its
own while the process's leases by oldest tag are served from what the hand holds.

A process's leases by tag take its hand one at a time, and on Pub/Sub a drain takes 0.25-0.5 s
at 30 ms round trips: every other thread waited on it. pulls.py starts one where the hand has
the room, and the next lease that needs its tasks collects it (docs/pubsub.md).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from pullqueue.adapters.pubsub.wire import Delivery
from pullqueue.errors import Error

log = logging.getLogger(__name__)


@dataclass
class Prefetch:
    """One drain out of the turn: of `source`, within `room` (tasks, bytes) beyond `found`
    (the tasks of it a lease had when it started the drain)."""

    source: str
    room: tuple[int, int]
    done: threading.Event = field(default_factory=threading.Event)
    found: list[Delivery] = field(default_factory=list)
    whole: bool = False
    """True when the drain found the subscription empty: all of it is in `found`."""
    head: tuple[float, str] | None = None
    """The age (ETA or publish time, name) of the shard's oldest task known when it began."""
    claimed: bool = True
    """False when another process held the shard's token (nothing was pulled)."""
    failed: Error | None = None


Drain = Callable[[Prefetch], None]
"""Fills in a Prefetch (found, whole, claimed); runs in the prefetch's thread."""


class Prefetches:
    """The drains out of the turn running for each queue (one at a time per queue)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[str, tuple[Prefetch, threading.Thread]] = {}

    def running(self, queue: str) -> Prefetch | None:
        """The queue's drain out of the turn, done or not, until collected."""
        with self._lock:
            entry = self._running.get(queue)
        return entry[0] if entry else None

    def start(
        self, queue: str, prefetch: Prefetch, drain: Drain, landed: Callable[[], None]
    ) -> None:
        """Run `drain` on `prefetch` in a thread of its own (a drain's pulls run in the pull
        pool, which its threads must not wait on: PubSubRpc.run_each), then `landed` (which
        must not wait for a lease call: one may be waiting for this thread)."""

        def run() -> None:
            try:
                drain(prefetch)
            except Error as exc:
                prefetch.failed = exc
            finally:
                prefetch.done.set()
                try:
                    landed()
                except Exception:
                    log.exception("queue %r: bringing a drain out of the turn in failed", queue)

        thread = threading.Thread(target=run, name="pullqueue-prefetch", daemon=True)
        with self._lock:
            if queue in self._running:
                raise RuntimeError(f"queue {queue!r} already has a drain out of the turn")
            self._running[queue] = (prefetch, thread)
        thread.start()

    def collect(self, queue: str, *, wait: bool) -> Prefetch | None:
        """The queue's drain out of the turn once it ended (waited for with `wait`), no longer
        running; None when none ended (or none runs)."""
        with self._lock:
            entry = self._running.get(queue)
        if entry is None:
            return None
        prefetch, thread = entry
        if wait:
            thread.join()
        elif not prefetch.done.is_set():
            return None
        with self._lock:
            if self._running.get(queue, (None,))[0] is not prefetch:
                return None  # another thread collected it meanwhile
            del self._running[queue]
        return prefetch

    def queues(self, *, ended: bool = False) -> list[str]:
        """The queues with a drain out of the turn not collected (`ended`: that has ended)."""
        with self._lock:
            return [q for q, (p, _) in self._running.items() if p.done.is_set() or not ended]
