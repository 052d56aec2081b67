"""The lease keeper: one background thread that keeps long Pub/Sub leases alive, window by window.

Pub/Sub holds a message for at most 600 s; a lease longer than that is held in short windows the
keeper renews until the lease ends, the task is deleted or the backend closes, so a killed
worker's tasks come back within one window. It also settles held deliveries whose time is up
(kept in hand for a process still serving their shard, else given back).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from pullqueue.adapters.pubsub.leases import Lease, LeaseBook
from pullqueue.errors import Error

log = logging.getLogger(__name__)

Renew = Callable[[list[Lease]], None]
"""Extends the given leases' ack deadlines (taking each lease's lock); marks refused ones lost."""
Settle = Callable[[float], None]
"""Settles the held deliveries whose time is up by the given POSIX time: held again with a new
deadline, or given back to Pub/Sub."""
NextRelease = Callable[[], "float | None"]
"""When the first held delivery is due to be settled (POSIX seconds); None when none is held."""


class LeaseKeeper:
    """Renews due leases every `period` seconds and settles held deliveries when due."""

    def __init__(
        self,
        book: LeaseBook,
        renew: Renew,
        settle: Settle,
        next_release: NextRelease,
        period: float,
    ) -> None:
        self._book = book
        self._renew = renew
        self._settle = settle
        self._next_release = next_release
        self.period = period
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def poke(self) -> None:
        """Something new to keep or release: start the thread if needed, and let it look now."""
        with self._lock:
            if self._stop.is_set():
                return
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="pullqueue-pubsub-lease-keeper", daemon=True
                )
                self._thread.start()
        self._wake.set()

    def stop(self) -> None:
        """Stop the thread and wait for it (a pass in progress finishes first)."""
        with self._lock:
            self._stop.set()
            thread, self._thread = self._thread, None
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self.run_once()
            except Error as exc:
                # The holders find out through TaskLeaseExpiredError if a lease is lost; the
                # next pass retries renewals that did not go through.
                log.warning("lease keeper pass failed, retrying in %.1f s: %s", self.period, exc)
            except Exception:
                # Not a Pub/Sub failure: a defect. Keep renewing the other leases regardless.
                log.exception("lease keeper pass failed unexpectedly; retrying")
            self._wake.wait(self._sleep())

    def run_once(self) -> None:
        """One pass: renew the leases due before the next pass, settle held deliveries."""
        now = time.time()
        # A lease is renewed when its deadline falls before the next pass plus one period of
        # slack for the renewal itself to arrive.
        due = self._book.due(now + 2 * self.period)
        if due:
            self._renew(due)
        self._settle(now)
        self._book.sweep(now)

    def _sleep(self) -> float:
        wait = self.period
        release = self._next_release()
        if release is not None:
            wait = min(wait, max(release - time.time(), 0.0))
        return wait
