"""A background thread that sweeps the outbox every period, for `pullqueue work` and the bridge.

Long-running processes sweep by themselves so that a deployment without cron still publishes
what a crash left staged within grace + period; a failed pass is logged and retried next period.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from pullqueue.adapters.base import Backend
from pullqueue.outbox.sweep import OutboxStore, SweepReport, sweep

logger = logging.getLogger("pullqueue.outbox")


class PeriodicSweeper:
    """Runs sweep(store, backend) every `period` seconds on a daemon thread until stop()."""

    def __init__(
        self,
        store: OutboxStore,
        backend: Backend,
        *,
        period: float,
        grace: float,
        lock: float = 60.0,
        on_report: Callable[[SweepReport], None] | None = None,
    ) -> None:
        if not period > 0:
            raise ValueError(f"a sweep period is above zero, got {period}")
        self.store, self.backend = store, backend
        self.period, self.grace, self.lock = period, grace, lock
        self.passes = 0
        self._on_report = on_report
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pullqueue-sweeper", daemon=True)

    def start(self) -> PeriodicSweeper:
        """Start sweeping: a first pass at once, then one every period."""
        self._thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the pass under way (waiting up to timeout seconds for it)."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                report = sweep(
                    self.store, self.backend, grace_seconds=self.grace, lock_seconds=self.lock
                )
            except Exception as exc:
                logger.warning("outbox sweep of %s failed: %s", self.store.url, exc)
            else:
                self.passes += 1
                if self._on_report is not None:
                    self._on_report(report)
            self._stopping.wait(self.period)
