"""The lease keeper: one background thread that extends held leases before they run out.

A handler may take longer than the lease it was given; the keeper calls modify_lease on every
held task once half its lease is gone, so no other worker is handed a task still being worked on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from pullqueue.worker.batch import LeasedBatch


class LeaseKeeper:
    """Extends, by lease_seconds, each held task whose lease has under half of it left."""

    def __init__(self, clock: Callable[[], float], lease_seconds: float) -> None:
        self.lease_seconds = lease_seconds
        self.threshold = lease_seconds / 2
        self.period = min(max(lease_seconds / 4, 0.05), 10.0)
        self._clock = clock
        self._batches: dict[int, LeasedBatch] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="pullqueue-lease-keeper", daemon=True
        )

    def track(self, batch: LeasedBatch) -> None:
        """Keep batch's leases alive until untrack()."""
        with self._lock:
            self._batches[id(batch)] = batch

    def untrack(self, batch: LeasedBatch) -> None:
        """Stop extending batch's leases."""
        with self._lock:
            self._batches.pop(id(batch), None)

    def tracked(self) -> list[LeasedBatch]:
        """The batches whose leases are being kept."""
        with self._lock:
            return list(self._batches.values())

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (leases still held then run out on their own)."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stopped.wait(self.period):
            for batch in self.tracked():
                if self._stopped.is_set():
                    return
                batch.extend_due(self._clock(), self.lease_seconds, self.threshold)
