"""`LeasePace`: when a worker should start its next lease so the work lands as threads run out.

A lease on Pub/Sub takes several round trips; a worker that leases only once a thread is idle
leaves its threads waiting that long every batch. This tracks how long leases and handler calls
take and says when the work already queued (and on its way) will run out within two leases.
"""

from __future__ import annotations

import threading

SMOOTHING = 0.2
"""Weight of the newest measure in the moving averages (about the last ten count)."""

LEASES_AHEAD = 2.0
"""Lease once the queued work would be started within this many lease times."""

EARLY_BYTES = 64 * 2**20
"""Payload bytes queued and on their way (by the leases' average) past which no lease starts
early: with large payloads a worker's memory stays bounded (a lease still starts when a handler
thread would otherwise be idle)."""


class LeasePace:
    """Moving averages of a non-empty lease's time and of one handler call's time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.lease_seconds: float | None = None
        """How long a lease that brought work took (moving average); None before one did."""
        self.item_seconds: float | None = None
        """How long one handler call took (moving average); None before one ended."""
        self.lease_bytes = 0.0
        """Payload bytes a lease that brought work brought (moving average)."""

    @staticmethod
    def _average(old: float | None, new: float) -> float:
        return new if old is None else old + SMOOTHING * (new - old)

    def leased(self, seconds: float, size: int) -> None:
        """A lease that brought work (`size` payload bytes) took `seconds`."""
        with self._lock:
            first = self.lease_seconds is None
            self.lease_seconds = self._average(self.lease_seconds, seconds)
            self.lease_bytes = size if first else self._average(self.lease_bytes, size)

    def handled(self, seconds: float) -> None:
        """A handler call (one task, or one batch for a batch handler) took `seconds`."""
        with self._lock:
            self.item_seconds = self._average(self.item_seconds, seconds)

    def due(
        self, ahead: int, running: int, threads: int, queued_bytes: int = 0, leases: int = 1
    ) -> bool:
        """Whether `ahead` items (queued, or counted for leases in flight) and `running` ones
        would keep `threads` busy for less than LEASES_AHEAD leases: then the next lease is due
        now, to land as they run out. Not while `queued_bytes` and `leases` leases' average
        bytes (those in flight and this one) pass EARLY_BYTES, nor before both times were
        measured once."""
        with self._lock:
            lease, item, size = self.lease_seconds, self.item_seconds, self.lease_bytes
        if lease is None or item is None or queued_bytes + leases * size > EARLY_BYTES:
            return False
        # A running item is half done on average.
        return (ahead + running / 2) * item / threads < LEASES_AHEAD * lease
