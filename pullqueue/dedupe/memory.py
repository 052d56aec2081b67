"""The in-memory task-name registry (`memory://`): deduplication within one process.

It is the reference the Firestore registry is tested against and what tests and single-process
services use; the clock is injectable so tombstone expiry can be driven without sleeping.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pullqueue.dedupe.names import LIVE, TOMBSTONE, blocking_error
from pullqueue.errors import Error

DEFAULT_TOMBSTONE_SECONDS = 7 * 24 * 3600.0


@dataclass(slots=True)
class _Record:
    state: str
    expire_at: float | None = None


class MemoryNameRegistry:
    """Task names per queue in this process's memory, thread-safe, on an injectable clock.

    Each instance is its own registry: backends that must see each other's names share one
    instance (pass it as `names=`), as producers in one process do through the default backend.
    """

    def __init__(
        self,
        *,
        tombstone_seconds: float = DEFAULT_TOMBSTONE_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if tombstone_seconds <= 0:
            raise ValueError("tombstone_seconds must be above zero")
        self.url = "memory://"
        self.tombstone_seconds = float(tombstone_seconds)
        self._clock = clock
        self._lock = threading.Lock()
        self._queues: dict[str, dict[str, _Record]] = {}
        self._expiries: deque[tuple[float, str, str]] = deque()

    def claim(self, queue: str, names: Sequence[str]) -> list[Error | None]:
        with self._lock:
            now = self._clock()
            self._forget_expired(now)
            records = self._queues.setdefault(queue, {})
            outcomes: list[Error | None] = []
            for name in names:
                record = records.get(name)
                error = (
                    blocking_error(queue, name, record.state, record.expire_at, now)
                    if record is not None
                    else None
                )
                if error is None:
                    records[name] = _Record(LIVE)
                outcomes.append(error)
            return outcomes

    def release(self, queue: str, names: Sequence[str]) -> None:
        with self._lock:
            records = self._queues.get(queue, {})
            for name in names:
                record = records.get(name)
                if record is not None and record.state == LIVE:
                    del records[name]

    def tombstone(self, queue: str, names: Sequence[str]) -> None:
        with self._lock:
            self._tombstone(queue, names)

    def _tombstone(self, queue: str, names: Sequence[str]) -> None:
        expire_at = self._clock() + self.tombstone_seconds
        records = self._queues.setdefault(queue, {})
        for name in names:
            records[name] = _Record(TOMBSTONE, expire_at)
            self._expiries.append((expire_at, queue, name))

    def delete(self, queue: str, names: Sequence[str]) -> list[bool]:
        with self._lock:
            records = self._queues.get(queue, {})
            live = [n for n in dict.fromkeys(names) if (r := records.get(n)) and r.state == LIVE]
            self._tombstone(queue, live)
        found = set(live)
        return [name in found for name in names]

    def tombstoned(self, queue: str, names: Sequence[str]) -> set[str]:
        with self._lock:
            now = self._clock()
            records = self._queues.get(queue, {})
            return {
                name
                for name in names
                if (record := records.get(name)) is not None
                and record.state == TOMBSTONE
                and (record.expire_at is None or record.expire_at > now)
            }

    def purge(self, queue: str) -> None:
        with self._lock:
            live = [n for n, r in self._queues.get(queue, {}).items() if r.state == LIVE]
        self.tombstone(queue, live)

    def close(self) -> None:
        """Nothing to release: the names live as long as the object."""

    def _forget_expired(self, now: float) -> None:
        """Drop expired tombstones, oldest first (expiries are appended in time order)."""
        while self._expiries and self._expiries[0][0] <= now:
            expire_at, queue, name = self._expiries.popleft()
            record = self._queues.get(queue, {}).get(name)
            if record is not None and record.state == TOMBSTONE and record.expire_at == expire_at:
                del self._queues[queue][name]
