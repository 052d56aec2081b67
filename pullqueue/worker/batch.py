"""A leased batch from the lease until every task in it is deleted or released.

Its lock orders the three things that touch a held task (extending the lease, deleting it,
releasing it) so a task is never extended after it was handed back, and never handed back twice.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from functools import partial

from pullqueue.errors import (
    BadTaskStateError,
    Error,
    TaskLeaseExpiredError,
    TombstonedTaskError,
    TransientError,
)
from pullqueue.queue import Queue
from pullqueue.task import Task
from pullqueue.worker.backoff import Backoff
from pullqueue.worker.logs import log_event
from pullqueue.worker.stats import WorkerStats

_GONE = (TaskLeaseExpiredError, TombstonedTaskError, BadTaskStateError)
SETTLE_ATTEMPTS = 5


class LeasedBatch:
    """Tasks one lease call returned, with what the handlers made of them."""

    def __init__(
        self, queue: Queue, tasks: list[Task], stats: WorkerStats, logger: logging.Logger
    ) -> None:
        self.queue = queue
        self.tasks = tasks
        self.lock = threading.Lock()
        self.open_items = 0
        self.done: list[Task] = []
        self.failed: list[Task] = []
        self.settled = False
        self._held: dict[str, Task] = {t.name: t for t in tasks if t.name is not None}
        self._stats = stats
        self._log = logger

    def holds(self, task: Task) -> bool:
        """True while this worker still holds task's lease as far as it knows."""
        with self.lock:
            return task.name in self._held

    def extend_due(self, now: float, lease_seconds: float, threshold: float) -> None:
        """Extend, by lease_seconds, every held lease ending within threshold seconds of now."""
        with self.lock:
            for name, task in list(self._held.items()):
                expires = task.lease_expires
                if expires is None or expires - now > threshold:
                    continue
                try:
                    self.queue.modify_lease(task, lease_seconds)
                except _GONE as exc:
                    del self._held[name]
                    self._stats.add(leases_lost=1)
                    log_event(
                        self._log,
                        logging.WARNING,
                        "lease_lost",
                        queue=self.queue.name,
                        task=name,
                        error=exc,
                        next="the task may run twice; raise --lease above the handler's runtime",
                    )
                except TransientError as exc:
                    self._stats.add(transient_errors=1)
                    log_event(
                        self._log,
                        logging.WARNING,
                        "lease_extend_retry",
                        queue=self.queue.name,
                        task=name,
                        error=exc,
                    )
                except Error as exc:
                    log_event(
                        self._log,
                        logging.ERROR,
                        "lease_extend_failed",
                        queue=self.queue.name,
                        task=name,
                        error=exc,
                    )
                else:
                    self._stats.add(lease_extensions=1)
                    log_event(
                        self._log,
                        logging.DEBUG,
                        "lease_extended",
                        queue=self.queue.name,
                        task=name,
                        expires=task.lease_expires,
                    )

    def release(self, tasks: Iterable[Task], *, reason: str) -> int:
        """Hand tasks back at once (lease 0) if still held; return how many were handed back."""
        with self.lock:
            return self._release_locked(tasks, reason)

    def _release_locked(self, tasks: Iterable[Task], reason: str) -> int:
        count = 0
        for task in tasks:
            if self._held.pop(task.name or "", None) is None:
                continue
            if self._call(partial(self.queue.modify_lease, task, 0), "release", task.name):
                count += 1
                log_event(
                    self._log,
                    logging.DEBUG,
                    "released",
                    queue=self.queue.name,
                    task=task.name,
                    reason=reason,
                )
        return count

    def settle(self) -> None:
        """Delete what the handlers finished, release what failed; then hold nothing."""
        with self.lock:
            self._settle_locked()

    def abandon(self) -> int:
        """Settle now, releasing also the tasks whose handler is still running (the worker is
        stopping at once); return how many such tasks were released."""
        with self.lock:
            if self.settled:
                return 0
            running = [t for t in self._held.values() if t not in self.done + self.failed]
            released = self._release_locked(running, "abort")
            self._settle_locked()
            return released

    def _settle_locked(self) -> None:
        if self.settled:
            return
        self.settled = True
        if self.done:
            done = self.done
            if self._call(partial(self.queue.delete, done), "delete", done[0].name):
                missing = [t.name or "?" for t in done if not t.was_deleted]
                if missing:
                    log_event(
                        self._log,
                        logging.WARNING,
                        "already_deleted",
                        queue=self.queue.name,
                        tasks=",".join(missing[:10]),
                        count=len(missing),
                    )
            else:
                self._stats.add(delete_failures=len(done))
        for task in self.done:
            self._held.pop(task.name or "", None)
        self._release_locked(self.failed, "handler_failed")
        self._held.clear()

    def _call(self, call: Callable[[], object], what: str, task: str | None) -> bool:
        """Run call, retrying transient errors; False (and logged) when it did not happen."""
        backoff = Backoff(0.05, 1.0)
        for attempt in range(1, SETTLE_ATTEMPTS + 1):
            try:
                call()
                return True
            except _GONE as exc:
                log_event(
                    self._log,
                    logging.DEBUG,
                    f"{what}_skipped",
                    queue=self.queue.name,
                    task=task,
                    reason=exc,
                )
                return False
            except TransientError as exc:
                self._stats.add(transient_errors=1)
                failure: Error = exc
                if attempt < SETTLE_ATTEMPTS:
                    time.sleep(backoff.next())
            except Error as exc:
                failure = exc
                break
        log_event(
            self._log,
            logging.ERROR,
            f"{what}_failed",
            queue=self.queue.name,
            task=task,
            error=failure,
            next="the task comes back when its lease ends and may run again",
        )
        return False
