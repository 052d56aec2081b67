"""`Worker`: runs a handler over a queue the way legacy pull-queue workers were told to behave.

It leases batches (by tag, grouped by the oldest task's tag, or any; several leases in flight
when the handlers are quick, paced by worker/pace.py), hands tasks to N handler threads, deletes
what succeeded, releases what failed, keeps leases alive while handlers run, backs off on empty
leases and transient errors, stays under the per-queue lease-request rate, and on SIGTERM/SIGINT
finishes what is running and releases the rest, so nothing is lost.
"""

from __future__ import annotations

import inspect
import logging
import math
import queue as queue_module
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Any

from pullqueue import metrics
from pullqueue.config import Settings
from pullqueue.errors import Error, InvalidMaxTasksError, TransientError
from pullqueue.limits import bad_number
from pullqueue.queue import Queue, validate_lease_seconds, validate_max_tasks, validate_tag
from pullqueue.ratelimit import RateLimiter, shared_limiter
from pullqueue.retry import RetryParameters, queue_retry_parameters
from pullqueue.task import Task
from pullqueue.worker.backoff import Backoff
from pullqueue.worker.batch import LeasedBatch
from pullqueue.worker.handler import is_batch_handler
from pullqueue.worker.keeper import LeaseKeeper
from pullqueue.worker.logs import log_event
from pullqueue.worker.pace import LeasePace
from pullqueue.worker.stats import WorkerStats

logger = logging.getLogger("pullqueue.worker")

MAX_LEASES_IN_FLIGHT = 8
"""A worker's leases in flight at most, however many handler threads it runs."""

_Item = tuple[LeasedBatch, Task | None]
"""A unit of handler work: one task, or (None) the whole batch for a batch handler."""


class Worker:
    """Runs `handler` over `queue` until stopped (or, with exit_when_idle, until it is empty).

    handler: `fn(task)` called once per task (return: delete it; raise: release it), or a
    function marked `@batch_handler` called once per leased batch (see pullqueue.worker.handler).
    """

    def __init__(
        self,
        queue: Queue,
        handler: Callable[..., Any],
        *,
        batch_size: int = 100,
        lease_seconds: float = 60.0,
        tag: str | None = None,
        group_by_tag: bool = False,
        concurrency: int = 1,
        per_batch: bool | None = None,
        lease_requests_per_second: float | None = None,
        backoff: Backoff | None = None,
        exit_when_idle: float | None = None,
        retry: RetryParameters | None = None,
    ) -> None:
        if not callable(handler):
            raise TypeError(f"handler must be callable, not {type(handler).__name__}")
        if inspect.iscoroutinefunction(handler):
            raise TypeError(
                f"handler {handler!r} is async; pass a plain function (call asyncio.run inside"
                " it if it must await)"
            )
        if bad_number(concurrency) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be a whole number from 1, got {concurrency!r}")
        for option, value in (
            ("exit_when_idle", exit_when_idle),
            ("lease_requests_per_second", lease_requests_per_second),
        ):
            if value is not None and (
                bad_number(value) or not isinstance(value, int | float) or value < 0
            ):
                raise ValueError(f"{option} must be a finite number >= 0, got {value!r}")
        if tag is not None and group_by_tag:
            raise ValueError("give a tag or group_by_tag, not both")
        validate_tag(tag, queue.name)
        self.queue = queue
        self.handler = handler
        try:
            self.batch_size = validate_max_tasks(batch_size, queue.name)
        except InvalidMaxTasksError as exc:
            raise InvalidMaxTasksError(f"batch_size: {exc.message}", queue=queue.name) from None
        self.lease_seconds = validate_lease_seconds(lease_seconds, queue.name)
        if self.lease_seconds <= 0:
            raise ValueError("lease_seconds must be above zero for a worker")
        self.tag = tag
        self.group_by_tag = group_by_tag
        self.concurrency = concurrency
        self.per_batch = is_batch_handler(handler) if per_batch is None else per_batch
        rate = lease_requests_per_second or Settings().lease_requests_per_second
        self.limiter: RateLimiter = shared_limiter(f"{queue.backend.url}|{queue.name}", rate)
        self.backoff = backoff or Backoff()
        self.retry = retry
        self.exit_when_idle = exit_when_idle
        self.stats = WorkerStats()
        self._metric_attributes = metrics.queue_attributes(queue.backend.url, queue.name)
        if tag is not None:
            self._metric_attributes[metrics.TAG] = tag
        self.stats.observe(metrics.worker_recorder(self._metric_attributes))
        self.error: Error | None = None
        self._stopping = threading.Event()
        self._aborted = threading.Event()
        self._work: queue_module.SimpleQueue[_Item | None] = queue_module.SimpleQueue()
        self._cond = threading.Condition()
        self._pending = 0
        self._pending_bytes = 0
        """Payload bytes of the queued items (the early-lease rule keeps it bounded)."""
        self._running = 0
        self._settling = 0
        """Batches whose handlers ended, being deleted and released (not handler capacity: the
        next lease runs beside their deletes)."""
        self._retry_due = 0.0
        self._leasing = 0
        """Lease calls in flight (each counts as the work it may bring: see `_may_lease`)."""
        self._quiet = False
        """After an empty or failed lease, one lease at a time until one brings work."""
        self._calm_until = 0.0
        """No lease starts before this (monotonic): the backoff after an empty or failed one."""
        self._idle_since: float | None = None
        self._leasers: list[threading.Thread] = []
        self._crash: BaseException | None = None
        self._pace = LeasePace()
        self._keeper = LeaseKeeper(queue.backend.now, self.lease_seconds)
        self._threads: list[threading.Thread] = []

    # -- control -------------------------------------------------------------------------

    def held_tasks(self) -> int:
        """Tasks this worker holds a lease on right now (queued for or inside a handler)."""
        return sum(batch.held_count() for batch in self._keeper.tracked())

    @property
    def stopping(self) -> bool:
        """True once stop() (or a signal) asked the worker to finish."""
        return self._stopping.is_set()

    @property
    def aborted(self) -> bool:
        """True when abort() (or a second signal) cut the worker short."""
        return self._aborted.is_set()

    def stop(self) -> None:
        """Stop leasing; running handlers finish, tasks not yet started are released."""
        if not self._stopping.is_set():
            log_event(logger, logging.INFO, "stopping", queue=self.queue.name)
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()

    def abort(self) -> None:
        """Stop now: release every held task, even those whose handler is still running."""
        self._aborted.set()
        self.stop()

    def run(self, *, handle_signals: bool = True) -> WorkerStats:
        """Work until stop(), a signal, idleness (exit_when_idle) or a fatal queue error.

        On the main thread with handle_signals, the first SIGTERM/SIGINT stops gracefully and a
        second one aborts. Returns the counters; raises the queue error that stopped it, if any.
        """
        if self._threads:
            raise RuntimeError("a Worker runs once; create a new Worker to run again")
        with self._signals(handle_signals):
            self._start()
            try:
                self._dispatch()
            finally:
                self._finish()
        log_event(logger, logging.INFO, "stopped", queue=self.queue.name, **self.stats.as_dict())
        if self._crash is not None:
            raise self._crash
        if self.error is not None:
            raise self.error
        return self.stats.snapshot()

    @contextmanager
    def _signals(self, enabled: bool) -> Iterator[None]:
        if not enabled or threading.current_thread() is not threading.main_thread():
            yield
            return

        def on_signal(signum: int, frame: FrameType | None) -> None:
            name = signal.Signals(signum).name
            if self._stopping.is_set():
                log_event(logger, logging.WARNING, "abort", queue=self.queue.name, signal=name)
                self.abort()
            else:
                log_event(logger, logging.INFO, "signal", queue=self.queue.name, signal=name)
                self.stop()

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    # -- leasing ---------------------------------------------------------------------------

    def _start(self) -> None:
        if self.retry is None:
            self.retry = queue_retry_parameters(self.queue.backend, self.queue.name)
        log_event(
            logger,
            logging.INFO,
            "started",
            queue=self.queue.name,
            backend=self.queue.backend.url,
            tag=self.tag,
            group_by_tag=self.group_by_tag or None,
            batch=self.batch_size,
            lease=self.lease_seconds,
            concurrency=self.concurrency,
            handler="per_batch" if self.per_batch else "per_task",
            retry=self.retry.describe(),
        )
        self._keeper.start()
        metrics.held.watch(self, self._metric_attributes)
        for index in range(self.concurrency):
            thread = threading.Thread(
                target=self._handle_loop, name=f"pullqueue-handler-{index}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def _lease_width(self) -> int:
        """Leases in flight at most: one per handler thread, up to MAX_LEASES_IN_FLIGHT."""
        return max(1, min(self.concurrency, MAX_LEASES_IN_FLIGHT))

    def _may_lease(self) -> bool:
        """Whether one more lease may start now (under `_cond`). A lease in flight counts as
        the work it may bring (one batch for a batch handler, `batch_size` tasks for a per-task
        one). A lease starts when a handler thread would otherwise be idle, or early, when the
        work queued and on its way would be started within two lease times (LeasePace). After
        an empty or failed lease one runs at a time."""
        if self._leasing >= (1 if self._quiet else self._lease_width()):
            return False
        per_lease = 1 if self.per_batch else self.batch_size
        ahead = self._pending + self._leasing * per_lease
        if ahead + self._running < self.concurrency:
            return True
        return self._pace.due(
            ahead, self._running, self.concurrency, self._pending_bytes, self._leasing + 1
        )

    def _dispatch(self) -> None:
        """Lease until stopped, here and in the extra leasing threads (`_lease_width` in all)."""
        for index in range(1, self._lease_width()):
            thread = threading.Thread(
                target=self._lease_thread, name=f"pullqueue-lease-{index}", daemon=True
            )
            thread.start()
            self._leasers.append(thread)
        self._lease_loop()

    def _lease_thread(self) -> None:
        """An extra leasing thread: a crash stops the worker and is raised by run()."""
        try:
            self._lease_loop()
        except BaseException as exc:
            self._crash = exc
            self.stop()

    def _lease_loop(self) -> None:
        while not self._stopping.is_set():
            with self._cond:
                while not self._stopping.is_set():
                    calm = self._calm_until - time.monotonic()
                    if calm > 0:
                        self._cond.wait(calm)
                    elif self._may_lease():
                        break
                    else:
                        self._cond.wait(0.5)
                if self._stopping.is_set():
                    return
                self._leasing += 1
            try:
                tasks = None
                if self._rate_slot():
                    began = time.monotonic()
                    tasks = self._lease()
                    if tasks:
                        size = _payload_bytes(tasks)
                        self._pace.leased(time.monotonic() - began, size)
                        self._submit(tasks, size)
            finally:
                with self._cond:
                    self._leasing -= 1
                    self._cond.notify_all()
            if tasks is not None:
                self._leased(tasks)

    def _leased(self, tasks: list[Task]) -> None:
        """After a lease answered: work resets the backoff and lets every leasing thread go;
        an empty lease backs them all off together, or ends an idle worker (exit_when_idle)."""
        now = time.monotonic()
        with self._cond:
            if tasks:
                self._idle_since = None
                self._quiet = False
                self._calm_until = 0.0
                self.backoff.reset()
                self._cond.notify_all()
                return
            self.stats.add(empty_leases=1)
            most = math.inf
            if self.exit_when_idle is not None:
                # Failed tasks waiting out their retry delay are work left: not idle yet.
                busy = self._pending + self._running + self._settling + self._leasing > 0
                if busy or now < self._retry_due:
                    self._idle_since = None
                elif self._idle_since is None:
                    self._idle_since = now
                if self._idle_since is not None:
                    idle = now - self._idle_since
                    if idle >= self.exit_when_idle:
                        log_event(logger, logging.INFO, "idle", queue=self.queue.name)
                        self.stop()
                        return
                    most = self.exit_when_idle - idle
            self._back_off(now, most)

    def _back_off(self, now: float, most: float = math.inf) -> float:
        """Wait after an empty or failed lease (under `_cond`; no longer than `most` seconds),
        every leasing thread, and from then on lease one at a time; the backoff's delay. Leases
        that were in flight side by side and come back empty or failed within a backoff already
        set wait that one out: the backoff grows a step per round, not per leasing thread (four
        empty answers at a drain's end would have made the next wait 8x)."""
        if self._quiet and self._calm_until > now:
            delay = self._calm_until - now
        else:
            self._quiet = True
            delay = self.backoff.next()
        self._calm_until = max(self._calm_until, now + min(delay, most))
        return delay

    def _rate_slot(self) -> bool:
        """Wait for the queue's next lease-request slot; False when stopped meanwhile."""
        while (delay := self.limiter.try_acquire()) > 0:
            if self._stopping.wait(delay):
                return False
        return not self._stopping.is_set()

    def _lease(self) -> list[Task] | None:
        """One lease call: the tasks, or None after a transient error (backed off: see
        `_calm_until`) or a fatal one (the worker stops)."""
        self.stats.add(lease_requests=1)
        try:
            return self.queue.lease(
                self.lease_seconds,
                self.batch_size,
                tag=self.tag,
                group_by_tag=self.group_by_tag,
            )
        except TransientError as exc:
            self.stats.add(transient_errors=1)
            with self._cond:
                # Every leasing thread waits it out, and then one leases at a time.
                delay = self._back_off(time.monotonic())
            log_event(
                logger,
                logging.WARNING,
                "lease_retry",
                queue=self.queue.name,
                error=exc,
                retry_in=round(delay, 3),
            )
            return None
        except Error as exc:
            self.error = exc
            log_event(logger, logging.ERROR, "lease_failed", queue=self.queue.name, error=exc)
            self.stop()
            return None

    def _submit(self, tasks: list[Task], size: int) -> None:
        """Queue the leased tasks for the handler threads (`size`: their payload bytes)."""
        batch = LeasedBatch(self.queue, tasks, self.stats, logger, self.retry)
        if self._stopping.is_set():
            # Leased in flight as the worker was told to stop: back now, unhandled.
            self.stats.add(leased=len(tasks), released=batch.release(tasks, reason="stopping"))
            return
        retried = sum(1 for t in tasks if t.retry_count > 1)
        self.stats.add(leased=len(tasks), retried=retried)
        log_event(
            logger,
            logging.INFO,
            "leased",
            queue=self.queue.name,
            tasks=len(tasks),
            tag=tasks[0].tag if (self.tag or self.group_by_tag) else None,
            retried=retried or None,
        )
        items: list[_Item] = [(batch, None)] if self.per_batch else [(batch, t) for t in tasks]
        batch.open_items = len(items)
        self._keeper.track(batch)
        with self._cond:
            self._pending += len(items)
            self._pending_bytes += size
        for item in items:
            self._work.put(item)

    # -- handling ----------------------------------------------------------------------------

    def _handle_loop(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            batch, task = item
            with self._cond:
                self._pending -= 1
                self._pending_bytes -= _payload_bytes(batch.tasks if task is None else [task])
                self._running += 1
            try:
                if self._stopping.is_set() or batch.settled:
                    self._cancel(batch, task)
                elif task is None:
                    self._handle_batch(batch)
                else:
                    self._handle_task(batch, task)
            finally:
                last = self._close_item(batch)
                with self._cond:
                    # The handler's capacity is free once it ended: the next lease runs while
                    # this batch's delete (a round trip) is in flight, not after it.
                    self._running -= 1
                    self._settling += last
                    self._cond.notify_all()
            if last:
                try:
                    self._settle(batch)
                finally:
                    with self._cond:
                        self._settling -= 1
                        self._cond.notify_all()

    def _timed(self, started: float, error: BaseException | None) -> None:
        self._pace.handled(time.perf_counter() - started)
        attributes = self._metric_attributes
        if error is not None:
            attributes = {**attributes, metrics.ERROR_TYPE: type(error).__qualname__}
        metrics.process_duration.record(time.perf_counter() - started, attributes)

    def _handle_task(self, batch: LeasedBatch, task: Task) -> None:
        started = time.perf_counter()
        try:
            self.handler(task)
        except BaseException as exc:
            self._timed(started, exc)
            self._failed(batch, [task], exc)
        else:
            self._timed(started, None)
            with batch.lock:
                batch.done.append(task)
            self.stats.add(processed=1)
            log_event(logger, logging.DEBUG, "done", queue=self.queue.name, task=task.name)

    def _handle_batch(self, batch: LeasedBatch) -> None:
        started = time.perf_counter()
        try:
            done, failed = self._split(batch.tasks, self.handler(list(batch.tasks)))
        except BaseException as exc:
            self._timed(started, exc)
            self._failed(batch, batch.tasks, exc)
            return
        self._timed(started, None)
        with batch.lock:
            batch.done.extend(done)
        self.stats.add(processed=len(done))
        if failed:
            self._failed(batch, failed, None)
        log_event(
            logger,
            logging.INFO if not failed else logging.WARNING,
            "batch_done",
            queue=self.queue.name,
            done=len(done),
            failed=len(failed) or None,
        )

    def _split(self, tasks: Sequence[Task], result: object) -> tuple[list[Task], list[Task]]:
        """(done, not done) from a batch handler's result: None means all done."""
        if result is None:
            return list(tasks), []
        if not isinstance(result, Iterable):
            raise TypeError(
                f"batch handler {self.handler!r} returned {type(result).__name__}; return None"
                " (all done) or the tasks it finished"
            )
        names = {t.name for t in result if isinstance(t, Task)}
        return [t for t in tasks if t.name in names], [t for t in tasks if t.name not in names]

    def _failed(self, batch: LeasedBatch, tasks: Sequence[Task], exc: BaseException | None) -> None:
        """Release failed tasks for a later attempt; a task on its last attempt goes to the
        dead-letter topic now, with the error, where the backend can (Pub/Sub)."""
        error = (
            f"{type(exc).__name__}: {exc}"
            if exc is not None
            else "the batch handler did not return it as done"
        )
        final = getattr(self.queue.backend, "final_attempt", None)
        last = [t for t in tasks if final(self.queue.name, t)] if final is not None else []
        dead_letter = getattr(self.queue.backend, "dead_letter", None)
        moved: list[Task] = []
        if last and dead_letter is not None:
            moved = batch.dead_letter(last, lambda task: dead_letter(self.queue.name, task, error))
        released = [t for t in tasks if t not in moved]
        delays = batch.fail(released)
        self.stats.add(failed=len(tasks), dead_lettered=len(last))
        outcomes = [
            (t, "dead-lettered: its last attempt (pullqueue dead-letters shows it)") for t in moved
        ]
        outcomes += [
            (t, "released; dead-lettered by the queue, its last attempt")
            if t in last
            else (t, f"released; leasable again in {delay:.1f} s")
            for t, delay in zip(released, delays, strict=True)
        ]
        for task, next_step in outcomes:
            log_event(
                logger,
                logging.WARNING,
                "failed",
                queue=self.queue.name,
                task=task.name,
                tag=task.tag,
                retry_count=task.retry_count,
                error=error,
                next=next_step,
            )

    def _cancel(self, batch: LeasedBatch, task: Task | None) -> None:
        """Release, unhandled, the item's task (or whole batch): the worker is stopping."""
        released = batch.release(batch.tasks if task is None else [task], reason="stopping")
        self.stats.add(released=released)

    def _close_item(self, batch: LeasedBatch) -> bool:
        """One item of `batch` ended: True when it was the last (the batch is to settle)."""
        with batch.lock:
            batch.open_items -= 1
            last = batch.open_items == 0
        if last:
            self._keeper.untrack(batch)
        return last

    def _settle(self, batch: LeasedBatch) -> None:
        """Delete what the batch's handlers finished, release what failed (unless aborted)."""
        if not self._aborted.is_set():
            batch.settle()
            with self._cond:
                self._retry_due = max(self._retry_due, batch.retry_due)

    # -- shutdown ----------------------------------------------------------------------------

    def _finish(self) -> None:
        """Let running handlers finish (releasing queued tasks), or release all on abort."""
        self.stop()
        # A lease in flight answers before the handler threads are told to end: its tasks are
        # released by the thread that leased them (see `_submit`).
        while any(t.is_alive() for t in self._leasers) and not self._aborted.is_set():
            for thread in self._leasers:
                thread.join(0.1)
        for _ in self._threads:
            self._work.put(None)
        while any(t.is_alive() for t in self._threads):
            if self._aborted.is_set():
                break
            for thread in self._threads:
                thread.join(0.1)
        if self._aborted.is_set():
            for batch in self._keeper.tracked():
                self._keeper.untrack(batch)
                self.stats.add(released=batch.abandon())
        self._keeper.stop()
        metrics.held.forget(self)


def _payload_bytes(tasks: Iterable[Task]) -> int:
    return sum(len(task.payload) for task in tasks)


def run_worker(queue: Queue, handler: Callable[..., Any], **options: Any) -> WorkerStats:
    """Build a Worker with options and run it until it stops; return its counters."""
    return Worker(queue, handler, **options).run()
