"""Ack-deadline changes sent in the background, by ack id, and what waits for them: a later
change of the same delivery is sent only once the earlier ones ended, so none overtakes another.

A lease answered before its deadline is set (acks.py) and a hand's tasks held ahead of the next
leases (hand.py) send their changes without waiting. A modify_task_lease or a give-back of the
same delivery must not be overtaken by them: an extension overwritten by an earlier, shorter
deadline would end a lease before its time, and the task could be leased twice.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, wait
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pullqueue.adapters.pubsub.rpc import PubSubRpc


class DeadlineChanges:
    """The background deadline changes in flight, by ack id (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, set[Future[Any]]] = {}

    def send(
        self,
        rpc: PubSubRpc,
        source: str,
        ack_ids: list[str],
        seconds: int,
        *,
        queue: str,
        answered: Callable[[Future[set[str]]], None],
    ) -> bool:
        """Set these ack ids' deadlines to `seconds` in the background, counted in flight until
        the answer came; `answered(future)` is called with it. False when the pool has shut
        down (the backend is closing): nothing was sent."""
        call = functools.partial(rpc.modify, source, ack_ids, seconds, queue=queue)
        try:
            future = rpc.start(call)
        except RuntimeError:
            return False
        self.track(ack_ids, future)
        future.add_done_callback(answered)
        return True

    def track(self, ack_ids: Iterable[str], future: Future[Any]) -> None:
        """Count `future` (a change of these ack ids' deadlines) in flight until it ends."""
        ids = list(ack_ids)
        with self._lock:
            for ack_id in ids:
                self._pending.setdefault(ack_id, set()).add(future)
        future.add_done_callback(lambda done: self._ended(ids, done))

    def _ended(self, ack_ids: list[str], future: Future[Any]) -> None:
        with self._lock:
            for ack_id in ack_ids:
                futures = self._pending.get(ack_id)
                if futures is not None:
                    futures.discard(future)
                    if not futures:
                        del self._pending[ack_id]

    def in_flight(self, ack_id: str) -> bool:
        """True while a change of this ack id's deadline is on its way."""
        with self._lock:
            return ack_id in self._pending

    def wait(self, ack_ids: Iterable[str], timeout: float) -> bool:
        """Wait up to `timeout` seconds for the changes in flight of these ack ids to end: True
        when none is left."""
        with self._lock:
            futures = {f for ack_id in ack_ids for f in self._pending.get(ack_id, ())}
        if not futures:
            return True
        _, running = wait(futures, timeout=max(timeout, 0.0))
        return not running
