"""drain(): move every task of a source queue into a destination queue, with nothing lost.

A task leaves the source only after the destination confirmed it, and the journal lets a rerun
after a crash finish the job without re-sending what the destination already confirmed.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from pullqueue import limits
from pullqueue.adapters.base import ListingBackend, queue_identity
from pullqueue.config import Settings
from pullqueue.errors import (
    BadTaskStateError,
    ConfigurationError,
    Error,
    TaskLeaseExpiredError,
    TombstonedTaskError,
    TransientError,
)
from pullqueue.migrate.dryrun import dry_run
from pullqueue.migrate.journal import WRITTEN, CrashedRun, HeldLease, Journal
from pullqueue.migrate.pipeline import Pipeline
from pullqueue.migrate.remaining import account_remaining
from pullqueue.migrate.report import MigrationReport
from pullqueue.migrate.send import Sender, Sent
from pullqueue.queue import Queue
from pullqueue.ratelimit import shared_limiter
from pullqueue.task import QueueStats, Task
from pullqueue.worker.backoff import Backoff

DEFAULT_LEASE_SECONDS = 60.0
DEFAULT_QUIET_PERIOD = 10.0
DEFAULT_WRITE_THREADS = 8
PIPELINE_DEPTH = 2
"""Batches in flight: one being written while the next is leased."""
LEASE_CLOCK_SLACK = 2.0
"""Seconds added to a lease's end when waiting it out: the source's clock may run ahead."""
MAX_DESTINATION_FAILURES = 3
"""Batches in a row the destination may fail (after retries) before the drain stops."""
DELETE_ATTEMPTS = 5
EMPTY = "the source stayed empty"
STOPPED = "stop requested"
INTERRUPTED = "interrupted: stopped before the source was empty"

ProgressCallback = Callable[[MigrationReport], None]
_LEASE_GONE = (TaskLeaseExpiredError, TombstonedTaskError, BadTaskStateError)


def queue_id(queue: Queue) -> str:
    """How a queue is named in reports and journals: backend URL and queue name."""
    return f"{queue.backend.url} {queue.name}"


class _Stop(Exception):
    """Raised inside the drain to end it early with an error in the report."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass
class _Batch:
    """Named tasks from one lease call (or one slice of a listing), as recorded."""

    tasks: list[Task]
    leased: bool
    number: int


def drain(
    source: Queue,
    dest: Queue,
    *,
    journal: Journal | str | os.PathLike[str] | None = None,
    dry_run: bool = False,
    follow: bool = False,
    batch_size: int = limits.MAX_TASKS_PER_LEASE,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    lease_rate: float | None = None,
    quiet_period: float = DEFAULT_QUIET_PERIOD,
    max_wait: float | None = None,
    write_threads: int = DEFAULT_WRITE_THREADS,
    use_listing: bool = True,
    sample_size: int = 10,
    progress: ProgressCallback | None = None,
    stop: threading.Event | None = None,
) -> MigrationReport:
    """Move every task from `source` into `dest`; return what happened.

    Options: `journal` (a Journal or a path; None runs without one, and a rerun then re-sends
    what a crashed run had written), `dry_run` (count and sample, change nothing), `follow`
    (keep draining until `stop` is set), `batch_size` (tasks per lease, up to 1000),
    `lease_seconds` (how long a leased batch stays hidden; it must cover the writes),
    `lease_rate` (source lease calls per second; default PULLQUEUE_LEASE_REQUESTS_PER_SECOND,
    the legacy 10; math.inf for none), `quiet_period` (seconds the source must stay empty before
    the drain ends), `max_wait` (seconds the end may wait for tasks about to become available;
    default lease_seconds), `write_threads` (concurrent destination adds of up to 100 tasks),
    `use_listing` (copy future-ETA tasks from a listing where the source can list), `progress`
    (called with the report as the drain goes, from the drain's threads), `stop` (an Event that
    ends the drain cleanly: the batches in flight finish, the rest stays in the source).
    """
    opened: Journal | None = None
    if isinstance(journal, str | os.PathLike):
        if dry_run and not Path(journal).exists():
            journal = None
        else:
            journal = opened = Journal(journal, source=queue_id(source), destination=queue_id(dest))
    try:
        return _Drain(
            source,
            dest,
            journal=journal,
            follow=follow,
            batch_size=batch_size,
            lease_seconds=lease_seconds,
            lease_rate=lease_rate,
            quiet_period=quiet_period,
            max_wait=max_wait,
            write_threads=write_threads,
            use_listing=use_listing,
            sample_size=sample_size,
            progress=progress,
            stop=stop,
        ).run(dry=dry_run)
    finally:
        if opened is not None:
            opened.close()


class _Drain:
    """One run of drain(): the lease loop (this thread) and the writer (a pipeline thread)."""

    def __init__(
        self,
        source: Queue,
        dest: Queue,
        *,
        journal: Journal | None,
        follow: bool,
        batch_size: int,
        lease_seconds: float,
        lease_rate: float | None,
        quiet_period: float,
        max_wait: float | None,
        write_threads: int,
        use_listing: bool,
        sample_size: int,
        progress: ProgressCallback | None,
        stop: threading.Event | None,
    ) -> None:
        for option, value in (
            ("batch_size", batch_size),
            ("lease_seconds", lease_seconds),
            ("lease_rate", None if lease_rate == math.inf else lease_rate),
            ("quiet_period", quiet_period),
            ("max_wait", max_wait),
            ("write_threads", write_threads),
            ("sample_size", sample_size),
        ):
            if value is not None and limits.bad_number(value):
                raise ConfigurationError(f"{option} must be a finite number, got {value!r}")
        if not 1 <= batch_size <= limits.MAX_TASKS_PER_LEASE:
            raise ConfigurationError(
                f"batch_size must be 1 to {limits.MAX_TASKS_PER_LEASE}, got {batch_size}"
            )
        if not 0 < lease_seconds <= limits.MAX_LEASE_SECONDS:
            raise ConfigurationError(
                f"lease_seconds must be above 0 and at most {limits.MAX_LEASE_SECONDS}"
            )
        if quiet_period < 0 or write_threads < 1:
            raise ConfigurationError("quiet_period must be >= 0 and write_threads >= 1")
        rate = Settings().lease_requests_per_second if lease_rate is None else lease_rate
        if rate <= 0:
            raise ConfigurationError(f"lease_rate must be above zero (math.inf: none), got {rate}")
        self.source = source
        self.dest = dest
        self.journal = journal
        self.follow = follow
        self.batch_size = batch_size
        self.lease_seconds = float(lease_seconds)
        self.limiter = shared_limiter(queue_id(source), rate)
        self.quiet_period = quiet_period
        self.wait_budget = self.lease_seconds if max_wait is None else max_wait
        self.write_threads = write_threads
        self.listing = use_listing and isinstance(source.backend, ListingBackend)
        self.sample_size = sample_size
        self.progress = progress
        self.stop = stop or threading.Event()
        self.report = MigrationReport(
            source=queue_id(source),
            destination=queue_id(dest),
            follow=follow,
            journal=str(journal.path) if journal is not None else None,
        )
        self._clock_start = 0.0
        self._held: dict[str, Task] = {}
        """Leased tasks the destination refused: held until the end, then released."""
        self._failed: dict[str, str] = {}
        self._undeleted: set[str] = set()
        self._moved = 0
        self._hold_until = 0.0
        self._dest_failures = 0
        self._recent: deque[set[str]] = deque(maxlen=PIPELINE_DEPTH)
        """Names the last batches moved: a batch in flight with them may hold them again."""
        self._doubt: set[str] = set()
        """Without a journal: names whose last send had no known outcome (as the journal's)."""
        self._doubt_lock = threading.Lock()
        self._empty = Backoff(0.05, 1.0)
        self._errors = Backoff(0.1, 10.0)

    # --- the run -------------------------------------------------------------------------

    def run(self, *, dry: bool) -> MigrationReport:
        self._clock_start = time.monotonic()
        self.report.started_at = time.time()
        self._preflight()
        if dry:
            self.report.dry_run = True
            self.report.dry = dry_run(
                self.source, self.journal, sample_size=self.sample_size, listing=self.listing
            )
            self.report.stopped = "dry run: nothing changed"
            self.report.elapsed = time.monotonic() - self._clock_start
            return self.report
        if self.journal is not None:
            self._resume(*self.journal.start_run(self.lease_seconds, self.source.backend.now()))
            own, earlier = self.journal.possible_duplicates()
            self.report.possible_duplicates = own + earlier
            self.report.possible_duplicates_from_killed_runs = earlier
        self._sender = Sender(
            self.dest,
            threads=self.write_threads,
            retry_seconds=self.lease_seconds / 2,
            stop=self.stop,
            uncertain=self._uncertain,
        )
        self._pipeline: Pipeline[_Batch] = Pipeline(
            self._complete, self._abandon, depth=PIPELINE_DEPTH
        )
        clean = interrupted = False
        try:
            self._loop()
            self._pipeline.flush()
            if self.report.stopped == STOPPED and not self.follow:
                self.report.interrupted = True
                self.report.stopped = INTERRUPTED
            clean = True
        except _Stop as stop:
            self.report.error = f"{type(stop.error).__name__}: {stop.error}"
            self.report.stopped = "error"
            clean = True
        except KeyboardInterrupt:
            interrupted = True  # a second Ctrl-C: leave at once, the journal covers the rest
            raise
        finally:
            self._pipeline.close(wait=not interrupted)
            self._sender.close(wait=not interrupted)
            if clean:
                self._finish()
        return self.report

    def _preflight(self) -> None:
        identity = queue_identity(self.source.backend, self.source.name)
        if identity == queue_identity(self.dest.backend, self.dest.name):
            raise ConfigurationError(
                f"the source and the destination are the same queue ({identity}), however their"
                " URLs are spelled; nothing was moved: give another --to URL or --to-queue NAME",
                queue=self.source.name,
            )
        at_start = self._probe(self.source, "source")
        self.report.source_tasks_at_start = at_start.tasks if at_start.whole_queue else None
        self._probe(self.dest, "destination")
        check = getattr(self.dest.backend, "check_named_adds", None)
        if callable(check):
            check(
                self.dest.name,
                what="the migration copies every task with its name, so nothing was moved",
            )

    @staticmethod
    def _probe(queue: Queue, side: str) -> QueueStats:
        try:
            return queue.stats()
        except Error as exc:
            raise type(exc)(
                f"preflight on the {side} ({queue.backend.url}) failed: {exc.message or exc};"
                " nothing was moved",
                queue=queue.name,
            ) from exc
        except Exception as exc:
            raise ConfigurationError(
                f"preflight on the {side} ({queue.backend.url}) failed: {exc!r}; check the URL,"
                " the credentials (gcloud auth application-default login) and that the queue"
                " exists; nothing was moved",
                queue=queue.name,
            ) from exc

    def _resume(self, crashed: list[CrashedRun], held: list[HeldLease]) -> None:
        """Hand back what killed earlier runs held; else wait out their leases at the end."""
        if not crashed:
            return
        all_released = True
        for lease in held:
            task = Task.restore(
                payload=b"",
                name=lease.name,
                tag=None,
                eta_posix=lease.lease_expires or 0.0,
                lease_token=lease.lease_token,
                queue_name=self.source.name,
            )
            try:
                self.source.modify_lease(task, 0)
                self.report.released_from_crashed_run += 1
            except (TombstonedTaskError, BadTaskStateError):
                pass  # deleted since: nothing to hand back
            except Error:
                all_released = False  # e.g. a lease that lives with the dead process (Pub/Sub)
        for run in crashed:
            if not (all_released and run.all_leases_recorded):
                self._hold_until = max(self._hold_until, run.holds_until)

    def _loop(self) -> None:
        quiet_since: float | None = None
        last_listing = -math.inf
        while not self.stop.is_set():
            self._pipeline.reserve()
            if self.stop.is_set():
                self._pipeline.unreserve()
                break
            tasks = self._lease()
            if tasks:
                quiet_since = None
                self._empty.reset()
                self._pipeline.submit(self._prepare(tasks, leased=True))
                continue
            self._pipeline.unreserve()
            if tasks is None:
                continue
            self._pipeline.flush()
            now = time.monotonic()
            quiet_since = now if quiet_since is None else quiet_since
            if self.listing and now - last_listing >= self.quiet_period:
                moved = self._move_future()
                last_listing = time.monotonic()
                if moved:
                    quiet_since = None
                    continue
            quiet_for = time.monotonic() - quiet_since
            if not self.follow and quiet_for >= self.quiet_period:
                delay = self._time_to_wait()
                if delay is None:
                    self.report.stopped = EMPTY
                    return
                self._wait(delay)
                self.wait_budget -= delay
                quiet_since = None
                continue
            delay = self._empty.next()
            if not self.follow:
                delay = min(delay, max(0.0, self.quiet_period - quiet_for))
            self._wait(delay)
        self.report.stopped = STOPPED

    def _wait(self, seconds: float) -> None:
        if seconds > 0:
            self.stop.wait(seconds)
            self._notify()

    def _notify(self) -> None:
        if self.progress is not None:
            self.report.elapsed = time.monotonic() - self._clock_start
            self.progress(self.report)

    # --- leasing (the loop's thread) -----------------------------------------------------

    def _lease(self) -> list[Task] | None:
        """One paced lease call: the tasks (maybe none), or None after a transient error."""
        while (delay := self.limiter.try_acquire()) > 0:
            if self.stop.wait(delay):
                return None
        if self.journal is not None:
            self.journal.lease_starting(
                self.source.backend.now() + self.lease_seconds + LEASE_CLOCK_SLACK
            )
        try:
            tasks = self.source.lease(self.lease_seconds, self.batch_size)
        except TransientError:
            self.stop.wait(self._errors.next())
            return None
        except Error as exc:
            raise _Stop(exc) from exc
        self._errors.reset()
        if not tasks and self.journal is not None:
            self.journal.record_leases(tasks)
        return tasks

    def _prepare(self, tasks: list[Task], *, leased: bool) -> _Batch:
        """Count and record a batch (its names and lease tokens) before anything is written."""
        if leased:
            self.report.leased += len(tasks)
        else:
            self.report.listed += len(tasks)
        named = [task for task in tasks if task.name is not None]
        for _ in range(len(tasks) - len(named)):
            self._failed[f"(unnamed #{len(self._failed) + 1})"] = (
                "the source returned a task without a name; it stays in the source"
            )
        if self.journal is None:
            return _Batch(named, leased, 0)
        record = self.journal.record_leases if leased else self.journal.record_listed
        record(named)
        return _Batch(named, leased, self.journal.batch)

    # --- writing (the pipeline's thread) -------------------------------------------------

    def _complete(self, batch: _Batch) -> None:
        """Write a batch to the destination, record it, delete it from the source.

        A batch whose lease ran out while it waited for the writer is handed back untouched:
        someone else may hold its tasks by now (the lease must cover writing a batch).
        What is already in the destination is decided now, not when the batch was leased:
        batches are written in order, so every earlier batch has settled by now. That matters
        when a batch's lease ran out while it was being written and the next lease call got
        some of its tasks again: those are not sent twice, only deleted (by the new lease).
        """
        if batch.leased and self._lease_ran_out(batch.tasks):
            self._abandon(batch, None)
            return
        names = [task.name or "" for task in batch.tasks]
        known = self.journal.states(names) if self.journal is not None else {}
        recent = set().union(*self._recent)
        already: list[Task] = []  # confirmed earlier, still in the source: delete only
        again: list[Task] = []  # moved by a batch of this run just now, leased once more
        to_send: list[Task] = []
        for task, name in zip(batch.tasks, names, strict=True):
            if known.get(name) == WRITTEN or name in self._undeleted:
                already.append(task)
            elif name in recent:
                again.append(task)
            else:
                to_send.append(task)
        if self.journal is not None and to_send:
            self.journal.sending(batch.number)
        sent = self._sender.send(to_send, keep_eta=not batch.leased)
        done = sent.confirmed + sent.duplicates
        possible = sent.possible_duplicates + self._record_written(
            batch, [t.name or "" for t in sent.confirmed], [t.name or "" for t in sent.duplicates]
        )
        self._recent.append({task.name or "" for task in done})
        self.report.written += len(sent.confirmed)
        self.report.skipped_duplicates += len(sent.duplicates)
        self.report.possible_duplicates += possible
        self.report.already_written += len(already)
        for task in done:
            if task.name in self._failed:
                del self._failed[task.name]
                self._held.pop(task.name, None)
        deleted = self._delete(already + done, leased=batch.leased)
        deleted += self._delete(again, leased=batch.leased, count=False)
        self._moved += len(already) + len(done)
        self._settle_unmoved(sent, batch, deleted)
        self._notify()

    def _uncertain(self, names: list[str]) -> int:
        """A send of these tasks ended without a known outcome (from the sender's threads);
        return the possible duplicates that adds (the journal's rule, see journal.py)."""
        if self.journal is not None:
            return self.journal.mark_in_doubt(names)
        with self._doubt_lock:
            repeats = sum(1 for name in names if name in self._doubt)
            self._doubt.update(names)
        return repeats

    def _record_written(self, batch: _Batch, confirmed: list[str], duplicates: list[str]) -> int:
        """Record what the destination confirmed; return the possible duplicates that adds
        (new copies of names in doubt)."""
        if self.journal is not None:
            return self.journal.mark_written(batch.number, confirmed, duplicates)
        with self._doubt_lock:
            if not self._doubt:
                return 0
            possible = sum(1 for name in confirmed if name in self._doubt)
            self._doubt.difference_update(confirmed)
            self._doubt.difference_update(duplicates)
        return possible

    def _settle_unmoved(self, sent: Sent, batch: _Batch, deleted: list[str]) -> None:
        """Failed tasks are held until the end; unsent ones are handed back at once."""
        for task, error in sent.failed:
            assert task.name is not None
            self._failed[task.name] = f"{type(error).__name__}: {error}"
            if batch.leased:
                self._held[task.name] = task
        if batch.leased:
            self.report.released += self._release(sent.unsent)
        if self.journal is not None:
            if batch.leased:
                self.journal.hold_failed([task for task, _ in sent.failed])
            self.journal.settled(batch.number, deleted)
        if sent.error is not None and sent.fatal:
            raise _Stop(sent.error)
        if sent.unsent:
            self._dest_failures += 1
            if self._dest_failures >= MAX_DESTINATION_FAILURES:
                assert sent.error is not None
                raise _Stop(sent.error)
            self.stop.wait(self._errors.next())
        else:
            self._dest_failures = 0

    def _lease_ran_out(self, tasks: list[Task]) -> bool:
        ends = [task.eta_posix for task in tasks if task.eta_posix is not None]
        margin = min(1.0, self.lease_seconds / 10)
        return bool(ends) and min(ends) - margin <= self.source.backend.now()

    def _abandon(self, batch: _Batch, error: Exception | None) -> None:
        """Hand a batch back untouched (leased while the writer failed, or its lease ran out)."""
        if batch.leased:
            self.report.released += self._release(batch.tasks)
        if self.journal is not None:
            self.journal.settled(batch.number)

    def _release(self, tasks: Iterable[Task]) -> int:
        """Hand leases back to the source (0 seconds); count those handed back."""
        count = 0
        for task in tasks:
            try:
                self.source.modify_lease(task, 0)
                count += 1
            except _LEASE_GONE:
                pass
            except Error:
                continue
        return count

    def _delete(self, tasks: list[Task], *, leased: bool, count: bool = True) -> list[str]:
        """Delete confirmed tasks from the source (leased ones by lease, listed ones by name);
        return the names deleted. `count` False: tasks this run already counted as moved.

        A task whose lease ended first (Pub/Sub refuses that delete) stays in the source as
        written; it comes back to a later lease, and the journal has it deleted then.
        """
        if not tasks:
            return []
        items = tasks if leased else [Task(name=task.name) for task in tasks]
        pending = items
        stuck: list[Task] = []
        backoff = Backoff(0.1, 2.0)
        for attempt in range(DELETE_ATTEMPTS):
            try:
                self.source.delete(pending)
                break
            except TaskLeaseExpiredError:
                stuck = [task for task in pending if not task.was_deleted]
                break
            except TransientError:
                pending = [task for task in pending if not task.was_deleted]
                if attempt == DELETE_ATTEMPTS - 1:
                    stuck = pending
                    break
                time.sleep(backoff.next())
            except Error as exc:
                unsure = [task for task in pending if not task.was_deleted]
                self._count_deleted(items, unsure, count=count)
                raise _Stop(exc) from exc
        return self._count_deleted(items, stuck, count=count)

    def _count_deleted(self, items: list[Task], stuck: list[Task], *, count: bool) -> list[str]:
        stuck_names = [task.name for task in stuck if task.name]
        if self.journal is not None:
            self.journal.mark_undeleted(stuck_names)
        deleted: list[str] = []
        for item in items:
            if item.was_deleted:
                if count:
                    self.report.deleted += 1
                self._undeleted.discard(item.name or "")
                deleted.append(item.name or "")
            elif item.name in stuck_names:
                self._undeleted.add(item.name or "")
            elif count:
                self.report.gone_from_source += 1
        return deleted

    # --- future ETAs ---------------------------------------------------------------------

    def _move_future(self) -> int:
        """Copy tasks whose ETA is still ahead (not leasable yet) from the source's listing;
        return how many moved.

        Each is added to the destination with its ETA, then deleted from the source by name.
        A worker that leases it meanwhile (its ETA passed) can at worst make it run twice.
        """
        backend = self.source.backend
        assert isinstance(backend, ListingBackend)
        now = backend.now()
        future = [
            task
            for task in backend.list_tasks(self.source.name)
            if task.retry_count == 0 and task.eta_posix is not None and task.eta_posix > now
        ]
        before = self._moved
        for start in range(0, len(future), self.batch_size):
            if self.stop.is_set():
                break
            self._pipeline.reserve()
            self._pipeline.submit(
                self._prepare(future[start : start + self.batch_size], leased=False)
            )
        self._pipeline.flush()
        return self._moved - before

    # --- the end -------------------------------------------------------------------------

    def _time_to_wait(self) -> float | None:
        """Seconds to wait before leasing again, or None when the drain is done."""
        now = self.source.backend.now()
        if now < self._hold_until:
            return self._hold_until - now
        if self.wait_budget <= 0:
            return None
        if self._undeleted:
            return min(1.0, self.wait_budget)  # written tasks whose lease ended: due back
        try:
            stats = self.source.stats()
        except TransientError:
            return min(1.0, self.wait_budget)
        if stats.tasks - len(self._held) <= 0 or stats.oldest_eta is None:
            return None
        held_ends = [task.eta_posix for task in self._held.values() if task.eta_posix]
        if held_ends and min(held_ends) <= stats.oldest_eta:
            return None  # the oldest ETA is a lease this run holds: the others are unknown
        due_in = stats.oldest_eta - now
        if due_in > self.wait_budget:
            return None
        return min(max(due_in, 0.05), self.wait_budget)

    def _finish(self) -> None:
        self._release(self._held.values())
        self._held.clear()
        try:
            account_remaining(
                self.source,
                self.report,
                failed=set(self._failed),
                listing=self.listing,
                emptied=self.report.stopped == EMPTY,
            )
        except Error as exc:
            self.report.error = self.report.error or f"could not check what is left: {exc}"
        self.report.failed = 0
        self.report.failures = []
        for name, error in self._failed.items():
            self.report.add_failure(name, error)
        self.report.not_deleted = len(self._undeleted)
        self.report.elapsed = time.monotonic() - self._clock_start
        if self.journal is not None:
            report = self.report
            left = report.still_waiting or report.unexplained or report.failed
            self.journal.finish_run(
                report.to_dict(),
                source_empty=report.stopped == EMPTY and not left and not report.not_deleted,
            )
        self._notify()
