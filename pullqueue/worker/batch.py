"""A leased batch from the lease until every task in it is deleted or released.

Its lock orders the three things that touch a held task (extending the lease, deleting it,
releasing it) so a task is never extended after it was handed back, and never handed back twice.
"""

from __future__ import annotations

import logging
import random
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
from pullqueue.retry import RetryParameters
from pullqueue.task import Task
from pullqueue.worker.backoff import Backoff
from pullqueue.worker.logs import log_event
from pullqueue.worker.stats import WorkerStats

_GONE = (TaskLeaseExpiredError, TombstonedTaskError, BadTaskStateError)
SETTLE_ATTEMPTS = 5


class LeasedBatch:
    """Tasks one lease call returned, with what the handlers made of them."""

    def __init__(
        self,
        queue: Queue,
        tasks: list[Task],
        stats: WorkerStats,
        logger: logging.Logger,
        retry: RetryParameters | None = None,
    ) -> None:
        self.queue = queue
        self.tasks = tasks
        self.lock = threading.Lock()
        self.open_items = 0
        self.done: list[Task] = []
        self.failed: list[Task] = []
        self.retry = retry or RetryParameters()
        self._retry_in: dict[int, float] = {}
        self.retry_due = 0.0
        """When (time.monotonic) the last task released for a retry is leasable again."""
        # One jitter per batch: tasks leased together and failing together come back together
        # (a tag's batch stays whole), while the batches of one outage spread out.
        self._jitter = random.uniform(0.5, 1.0)
        self.settled = False
        self._held: dict[str, Task] = {t.name: t for t in tasks if t.name is not None}
        self._stats = stats
        self._log = logger

    def held_count(self) -> int:
        """How many of the batch's tasks this worker still holds a lease on."""
        with self.lock:
            return len(self._held)

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

    def dead_letter(self, tasks: Iterable[Task], move: Callable[[Task], bool]) -> list[Task]:
        """Hand failed tasks still held to `move` (the queue's dead-lettering); the tasks it
        moved are no longer held: nothing extends or releases them after."""
        with self.lock:
            moved = []
            for task in tasks:
                if task.name in self._held and move(task):
                    del self._held[task.name]
                    moved.append(task)
            return moved

    def fail(self, tasks: Iterable[Task]) -> list[float]:
        """Record tasks whose handler failed; the delay (s) after which each is leasable again.

        The delay follows the retry parameters for the task's retry_count: settling releases
        the task with a lease of that length, so its next attempt waits that long.
        """
        with self.lock:
            delays = []
            for task in tasks:
                self.failed.append(task)
                delay = self._retry_in[id(task)] = self.retry.delay(task.retry_count, self._jitter)
                delays.append(delay)
            return delays

    def release(self, tasks: Iterable[Task], *, reason: str) -> int:
        """Hand tasks back at once (lease 0) if still held; return how many were handed back."""
        with self.lock:
            return self._release_locked(tasks, reason)

    def _release_locked(self, tasks: Iterable[Task], reason: str) -> int:
        """Release held tasks: failed ones after their retry delay, the others at once."""
        count = 0
        for task in tasks:
            if self._held.pop(task.name or "", None) is None:
                continue
            delay = self._retry_in.get(id(task), 0.0)
            error = self._call(partial(self.queue.modify_lease, task, delay))
            if error is None:
                count += 1
                self.retry_due = max(self.retry_due, time.monotonic() + delay)
                log_event(
                    self._log,
                    logging.DEBUG,
                    "released",
                    queue=self.queue.name,
                    task=task.name,
                    reason=reason,
                    retry_in=round(delay, 3) if delay else None,
                )
            elif not isinstance(error, _GONE):
                log_event(
                    self._log,
                    logging.ERROR,
                    "release_failed",
                    queue=self.queue.name,
                    task=task.name,
                    error=error,
                    next="the task comes back when its lease ends",
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
            self._delete(self.done)
        for task in self.done:
            self._held.pop(task.name or "", None)
        self._release_locked(self.failed, "handler_failed")
        self._held.clear()

    def _delete(self, done: list[Task]) -> None:
        """Delete the finished tasks in one call, retrying only those not yet deleted."""

        def pending() -> list[Task]:
            return [task for task in done if not task.was_deleted]

        def delete_pending() -> None:
            todo = pending()
            if todo:
                self.queue.delete(todo)

        error = self._call(delete_pending)
        missing = pending()
        if not missing:
            return
        names = ",".join(task.name or "?" for task in missing[:10])
        if error is None:
            log_event(
                self._log,
                logging.WARNING,
                "already_deleted",
                queue=self.queue.name,
                tasks=names,
                count=len(missing),
            )
            return
        self._stats.add(delete_failures=len(missing))
        log_event(
            self._log,
            logging.ERROR,
            "delete_failed",
            queue=self.queue.name,
            tasks=names,
            count=len(missing),
            error=error,
            next="these tasks come back when their lease ends and will run again",
        )

    def _call(self, call: Callable[[], object]) -> Error | None:
        """Run call, retrying transient errors a few times; the error it ended with, if any."""
        backoff = Backoff(0.05, 1.0)
        failure: Error | None = None
        for attempt in range(1, SETTLE_ATTEMPTS + 1):
            try:
                call()
                return None
            except TransientError as exc:
                self._stats.add(transient_errors=1)
                failure = exc
                if attempt < SETTLE_ATTEMPTS:
                    time.sleep(backoff.next())
            except Error as exc:
                return exc
        return failure
