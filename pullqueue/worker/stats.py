"""Counters a worker keeps while it runs: processed, failed, retried and the rest.

They are what the worker's final log line, the demo's reconciliation and a service's metrics
read; one lock keeps them consistent across handler threads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field, fields


@dataclass
class WorkerStats:
    """What a worker did; read a consistent copy with `snapshot()`."""

    leased: int = 0
    """Tasks handed to the worker by lease calls."""
    processed: int = 0
    """Tasks whose handler succeeded (then deleted from the queue)."""
    failed: int = 0
    """Tasks whose handler raised (then released for another attempt)."""
    retried: int = 0
    """Leased tasks that had been leased before (retry_count above 1): redeliveries."""
    released: int = 0
    """Tasks released unprocessed because the worker was stopping."""
    lease_requests: int = 0
    empty_leases: int = 0
    transient_errors: int = 0
    lease_extensions: int = 0
    leases_lost: int = 0
    """Tasks whose lease ran out before the handler finished (another holder may have them)."""
    delete_failures: int = 0
    """Processed tasks that could not be deleted: they come back when their lease ends."""
    dead_lettered: int = 0
    """Failed tasks that had used their last allowed attempt: the queue sets them aside."""
    _lock: threading.Lock = field(
        default_factory=threading.Lock, init=False, repr=False, compare=False
    )
    _observer: Callable[[dict[str, int]], None] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def observe(self, observer: Callable[[dict[str, int]], None]) -> None:
        """Also pass every later add() to observer (the worker's metrics)."""
        self._observer = observer

    def add(self, **deltas: int) -> None:
        """Add to counters by name, atomically."""
        with self._lock:
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)
        if self._observer is not None:
            self._observer(deltas)

    def snapshot(self) -> WorkerStats:
        """A copy of the counters as they are now."""
        with self._lock:
            return WorkerStats(**self.as_dict())

    def as_dict(self) -> dict[str, int]:
        """The counters by name."""
        return {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}
