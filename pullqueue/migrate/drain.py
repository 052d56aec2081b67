"""drain(): move every task of a source queue into a destination queue, with nothing lost.

A task leaves the source only after the destination confirmed it, and the journal lets a rerun
after a crash finish the job without re-sending what the destination already confirmed.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from pullqueue import limits
from pullqueue.adapters.base import ListingBackend
from pullqueue.config import Settings
from pullqueue.errors import (
    BadTaskStateError,
    ConfigurationError,
    Error,
    TaskAlreadyExistsError,
    TaskLeaseExpiredError,
    TombstonedTaskError,
    TransientError,
)
from pullqueue.migrate.journal import IN_DOUBT, WRITTEN, CrashedRun, Journal
from pullqueue.migrate.report import MAX_LISTED, DryRun, MigrationReport, Waiting, iso
from pullqueue.queue import Queue
from pullqueue.ratelimit import shared_limiter
from pullqueue.task import QueueStats, Task
from pullqueue.worker.backoff import Backoff

DEFAULT_LEASE_SECONDS = 60.0
DEFAULT_QUIET_PERIOD = 10.0
DEFAULT_WRITE_THREADS = 8
LEASE_CLOCK_SLACK = 2.0
"""Seconds added to a lease's end when waiting it out: the source's clock may run ahead."""
MAX_DESTINATION_FAILURES = 3
"""Batches in a row the destination may fail (after retries) before the drain stops."""
DELETE_ATTEMPTS = 5

EMPTY = "the source stayed empty"
STOPPED_EARLY = "not moved: the drain stopped before the source was empty (run it again)"

ProgressCallback = Callable[[MigrationReport], None]
_DUPLICATE = (TaskAlreadyExistsError, TombstonedTaskError)
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
class _Sent:
    """What one write of tasks to the destination came to."""

    confirmed: list[Task] = field(default_factory=list)
    duplicates: list[Task] = field(default_factory=list)
    failed: list[tuple[Task, Error]] = field(default_factory=list)
    unsent: list[Task] = field(default_factory=list)
    uncertain: set[str] = field(default_factory=set)
    """Names whose add ended without a known outcome (they may be in the destination)."""
    resent_in_doubt: int = 0
    error: BaseException | None = None
    fatal: bool = False

    def merge(self, other: _Sent) -> None:
        self.confirmed += other.confirmed
        self.duplicates += other.duplicates
        self.failed += other.failed
        self.unsent += other.unsent
        self.uncertain |= other.uncertain
        self.resent_in_doubt += other.resent_in_doubt
        if other.error is not None and (self.error is None or other.fatal):
            self.error = other.error
        self.fatal = self.fatal or other.fatal


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
    (called with the report after each batch), `stop` (an Event that ends the drain cleanly).
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
        ).run(dry_run=dry_run)
    finally:
        if opened is not None:
            opened.close()


class _Drain:
    """One run of drain(): the lease loop, the listing pass, the end check, the report."""

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
        self.source = source
        self.dest = dest
        self.journal = journal
        self.follow = follow
        self.batch_size = batch_size
        self.lease_seconds = float(lease_seconds)
        rate = Settings().lease_requests_per_second if lease_rate is None else lease_rate
        if rate <= 0:
            raise ConfigurationError(f"lease_rate must be above zero (math.inf: none), got {rate}")
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
        self._hold_until = 0.0
        self._batch = 0
        self._pool: ThreadPoolExecutor | None = None
        self._dest_failures = 0
        self._empty = Backoff(0.05, 1.0)
        self._errors = Backoff(0.1, 10.0)

    # --- the run -------------------------------------------------------------------------

    def run(self, *, dry_run: bool) -> MigrationReport:
        self._clock_start = time.monotonic()
        self.report.started_at = time.time()
        self._preflight()
        if dry_run:
            self.report.dry_run = True
            self._dry_run()
            self.report.stopped = "dry run: nothing changed"
            self.report.elapsed = time.monotonic() - self._clock_start
            return self.report
        if self.journal is not None:
            self._resume(self.journal.start_run(self.lease_seconds))
        clean = False
        if self.write_threads > 1:
            self._pool = ThreadPoolExecutor(self.write_threads, thread_name_prefix="migrate")
        try:
            self._loop()
            clean = True
        except _Stop as stop:
            self.report.error = f"{type(stop.error).__name__}: {stop.error}"
            self.report.stopped = "error"
            clean = True
        finally:
            if self._pool is not None:
                self._pool.shutdown()
            if clean:
                self._finish()
        return self.report

    def _preflight(self) -> None:
        same_store = self.source.backend is self.dest.backend or (
            self.source.backend.url == self.dest.backend.url
            and not self.source.backend.url.startswith("memory:")
        )
        if same_store and self.source.name == self.dest.name:
            raise ConfigurationError(
                "the source and the destination are the same queue; give another --to URL or"
                " --to-queue NAME",
                queue=self.source.name,
            )
        self.report.source_tasks_at_start = self._probe(self.source, "source").tasks
        self._probe(self.dest, "destination")

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

    def _resume(self, crashed: list[CrashedRun]) -> None:
        """Hand back what killed earlier runs held; else wait out their leases at the end."""
        if not crashed or self.journal is None:
            return
        held = self.journal.held_leases([run.run for run in crashed], self.source.backend.now())
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
            tasks = self._lease()
            if tasks is None:
                continue
            if tasks:
                quiet_since = None
                self._empty.reset()
                self._move(tasks, leased=True)
                self._notify()
                continue
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
        self.report.stopped = "stop requested"

    def _wait(self, seconds: float) -> None:
        if seconds > 0:
            self.stop.wait(seconds)
            self._notify()

    def _notify(self) -> None:
        if self.progress is not None:
            self.report.elapsed = time.monotonic() - self._clock_start
            self.progress(self.report)

    # --- leasing -------------------------------------------------------------------------

    def _lease(self) -> list[Task] | None:
        """One paced lease call: the tasks (maybe none), or None after a transient error."""
        while (delay := self.limiter.try_acquire()) > 0:
            if self.stop.wait(delay):
                return None
        if self.journal is not None:
            self._batch = self.journal.lease_starting(
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

    def _move(self, tasks: list[Task], *, leased: bool) -> int:
        """Write tasks to the destination, record them, delete them from the source; return
        how many are now in the destination (written now, earlier, or already there)."""
        if leased:
            self.report.leased += len(tasks)
        else:
            self.report.listed += len(tasks)
        named = [task for task in tasks if task.name is not None]
        for _ in range(len(tasks) - len(named)):
            self._failed[f"(unnamed #{len(self._failed) + 1})"] = (
                "the source returned a task without a name; it stays in the source"
            )
        known: dict[str, int] = {}
        if self.journal is not None:
            record = self.journal.record_leases if leased else self.journal.record_listed
            known = record(named)
        already = [task for task in named if known.get(task.name or "") == WRITTEN]
        in_doubt = {name for name, state in known.items() if state == IN_DOUBT}
        to_send = [task for task in named if known.get(task.name or "") != WRITTEN]
        sent = self._send(to_send, keep_eta=not leased, in_doubt=in_doubt)
        done = sent.confirmed + sent.duplicates
        if self.journal is not None:
            self.journal.mark_written([task.name for task in done if task.name])
        self.report.written += len(sent.confirmed)
        self.report.skipped_duplicates += len(sent.duplicates)
        self.report.possible_duplicates += sent.resent_in_doubt
        self.report.already_written += len(already)
        for task in done:
            if task.name in self._failed:
                del self._failed[task.name]
                self._held.pop(task.name, None)
        self._delete(already + done, leased=leased)
        self._settle_unmoved(sent, leased=leased)
        return len(already) + len(done)

    def _settle_unmoved(self, sent: _Sent, *, leased: bool) -> None:
        """Failed tasks are held until the end; unsent ones are handed back at once."""
        failed_names = [task.name for task, _ in sent.failed if task.name]
        for task, error in sent.failed:
            assert task.name is not None
            self._failed[task.name] = f"{type(error).__name__}: {error}"
            if leased:
                self._held[task.name] = task
        unsure = [t.name for t in sent.unsent if t.name and t.name in sent.uncertain]
        sure = [t.name for t in sent.unsent if t.name and t.name not in sent.uncertain]
        if leased:
            self.report.released += self._release(sent.unsent)
        if self.journal is not None:
            if leased:
                self.journal.mark_failed(failed_names)
                self.journal.forget(sure)
            else:
                self.journal.forget(failed_names + sure)
            self.journal.mark_in_doubt(unsure)
            if leased:
                self.journal.settled(self._batch)
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

    # --- writing -------------------------------------------------------------------------

    def _send(self, tasks: list[Task], *, keep_eta: bool, in_doubt: set[str]) -> _Sent:
        step = limits.MAX_TASKS_PER_ADD
        chunks = [tasks[i : i + step] for i in range(0, len(tasks), step)]
        total = _Sent()
        if self._pool is None or len(chunks) <= 1:
            results: Iterable[_Sent] = (self._send_chunk(c, keep_eta, in_doubt) for c in chunks)
        else:
            results = self._pool.map(lambda c: self._send_chunk(c, keep_eta, in_doubt), chunks)
        for result in results:
            total.merge(result)
        return total

    def _send_chunk(self, chunk: list[Task], keep_eta: bool, in_doubt: set[str]) -> _Sent:
        """Add up to 100 tasks, retrying transient failures while the lease allows."""
        sent = _Sent()
        pending = chunk
        deadline = time.monotonic() + self.lease_seconds / 2
        backoff = Backoff(0.05, 2.0)
        while pending:
            copies = [self._copy(task, keep_eta) for task in pending]
            error: BaseException | None = None
            try:
                self.dest.add(copies)
            except Exception as exc:
                error = exc
            still: list[Task] = []
            for task, copy in zip(pending, copies, strict=True):
                if copy.was_added:
                    sent.confirmed.append(task)
                    if task.name in in_doubt or task.name in sent.uncertain:
                        sent.resent_in_doubt += 1
                else:
                    still.append(task)
            if error is None or not still:
                break
            if isinstance(error, _DUPLICATE):
                sent.duplicates += still
                break
            if not isinstance(error, Error):
                sent.uncertain.update(task.name for task in still if task.name)
                sent.unsent += still
                sent.error, sent.fatal = error, True
                break
            if not isinstance(error, TransientError):
                bad = [task for task in still if task.name == error.task]
                if not bad:
                    sent.uncertain.update(task.name for task in still if task.name)
                    sent.unsent += still
                    sent.error, sent.fatal = error, True
                    break
                sent.failed.append((bad[0], error))
                pending = [task for task in still if task is not bad[0]]
                continue
            sent.uncertain.update(task.name for task in still if task.name)
            delay = backoff.next()
            if time.monotonic() + delay > deadline or self.stop.wait(delay):
                sent.unsent += still
                sent.error = error
                break
            pending = still
        return sent

    @staticmethod
    def _copy(task: Task, keep_eta: bool) -> Task:
        """The destination's copy: same payload, name and tag; the ETA when not yet due; the
        retry limit less the attempts already made (the drain's own lease is not one)."""
        limit = task.retry_limit
        if limit is not None:
            attempts = task.retry_count if keep_eta else task.retry_count - 1
            limit = max(1, limit - max(attempts, 0))
        return Task(
            task.payload,
            name=task.name,
            tag=task.tag,
            eta=task.eta if keep_eta else None,
            retry_limit=limit,
        )

    def _delete(self, tasks: list[Task], *, leased: bool) -> None:
        """Delete confirmed tasks from the source (leased ones by lease, listed ones by name).

        A task whose lease ended first (Pub/Sub refuses that delete) stays in the source as
        written; it comes back to a later lease, and the journal has it deleted then.
        """
        if not tasks:
            return
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
                self._count_deleted(items, [task for task in pending if not task.was_deleted])
                raise _Stop(exc) from exc
        self._count_deleted(items, stuck)

    def _count_deleted(self, items: list[Task], stuck: list[Task]) -> None:
        stuck_names = {task.name for task in stuck}
        for item in items:
            if item.was_deleted:
                self.report.deleted += 1
                self._undeleted.discard(item.name or "")
            elif item.name in stuck_names:
                self._undeleted.add(item.name or "")
            else:
                self.report.gone_from_source += 1

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
        moved = 0
        for start in range(0, len(future), self.batch_size):
            if self.stop.is_set():
                break
            moved += self._move(future[start : start + self.batch_size], leased=False)
            self._notify()
        return moved

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
            self._account_remaining()
        except Error as exc:
            self.report.error = self.report.error or f"could not check what is left: {exc}"
        self.report.failed = 0
        self.report.failures = []
        for name, error in self._failed.items():
            self.report.add_failure(name, error)
        self.report.not_deleted = len(self._undeleted)
        self.report.elapsed = time.monotonic() - self._clock_start
        if self.journal is not None:
            self.journal.finish_run(self.report.to_dict())
        self._notify()

    def _account_remaining(self) -> None:
        """Explain every task still in the source: failed, waiting (with ETAs), or neither."""
        backend = self.source.backend
        now = backend.now()
        failed = set(self._failed)
        stopped_early = self.report.stopped != EMPTY
        if self.listing:
            assert isinstance(backend, ListingBackend)
            left = [t for t in backend.list_tasks(self.source.name) if t.name not in failed]
            future = [t for t in left if t.eta_posix and t.eta_posix > now and not t.retry_count]
            held = [t for t in left if t.eta_posix and t.eta_posix > now and t.retry_count]
            waiting = {t.name for t in future} | {t.name for t in held}
            available = [t for t in left if t.name not in waiting]
            self._add_waiting("with a future ETA (not copied yet)", future)
            self._add_waiting("leased by another holder (ETA = lease end)", held)
            if stopped_early:
                self._add_waiting(STOPPED_EARLY, available)
            else:
                self.report.unexplained = len(available)
            return
        stats = self.source.stats()
        others = stats.tasks - len(failed)
        if others <= 0:
            return
        if stopped_early:
            self.report.still_waiting += others
            self.report.waiting.append(Waiting(STOPPED_EARLY, others, iso(stats.oldest_eta)))
        elif stats.oldest_eta is not None and stats.oldest_eta > now:
            self.report.still_waiting += others
            self.report.waiting.append(
                Waiting(
                    "not available yet: future ETA or leased by another holder (the source"
                    " cannot list them; its statistics give the oldest ETA)",
                    others,
                    oldest_eta=iso(stats.oldest_eta),
                )
            )
        elif stats.approximate:
            self.report.still_waiting += others
            self.report.waiting.append(
                Waiting("reported by approximate statistics (check again later)", others)
            )
        else:
            self.report.unexplained = others

    def _add_waiting(self, reason: str, tasks: Sequence[Task]) -> None:
        if not tasks:
            return
        etas = [t.eta_posix for t in tasks if t.eta_posix is not None]
        self.report.still_waiting += len(tasks)
        self.report.waiting.append(
            Waiting(
                reason,
                len(tasks),
                oldest_eta=iso(min(etas)) if etas else None,
                tasks=[{"name": t.name, "eta": iso(t.eta_posix)} for t in tasks[:MAX_LISTED]],
            )
        )

    # --- dry run -------------------------------------------------------------------------

    def _dry_run(self) -> None:
        backend = self.source.backend
        if not self.listing:
            stats = self.source.stats()
            self.report.dry = DryRun(
                listed=False,
                tasks=stats.tasks,
                leased_elsewhere=stats.leased or 0,
                oldest_eta=iso(stats.oldest_eta),
                note=(
                    "the source cannot list tasks without leasing them, and a lease adds 1 to"
                    " each task's retry_count and hides it from workers, so this dry run read"
                    " the queue's statistics only: no sample, no tags, no ETAs beyond the"
                    " oldest" + (" (the counts are approximate)" if stats.approximate else "")
                ),
            )
            return
        assert isinstance(backend, ListingBackend)
        now = backend.now()
        dry = DryRun(listed=True, note="read from the source's listing; no task was leased")
        tags: Counter[str] = Counter()
        batch: list[str] = []
        oldest: float | None = None
        for task in backend.list_tasks(self.source.name):
            dry.tasks += 1
            dry.payload_bytes += len(task.payload)
            eta = task.eta_posix or now
            oldest = eta if oldest is None else min(oldest, eta)
            if eta <= now:
                dry.available += 1
            elif task.retry_count:
                dry.leased_elsewhere += 1
            else:
                dry.future_eta += 1
            tags[task.tag if task.tag is not None else "(untagged)"] += 1
            if len(dry.sample) < self.sample_size:
                dry.sample.append(
                    {
                        "name": task.name,
                        "tag": task.tag,
                        "eta": iso(task.eta_posix),
                        "bytes": len(task.payload),
                        "retry_count": task.retry_count,
                    }
                )
            if self.journal is not None and task.name is not None:
                batch.append(task.name)
                if len(batch) >= 900:
                    dry.already_written += self._count_written(batch)
                    batch = []
        if batch:
            dry.already_written += self._count_written(batch)
        dry.oldest_eta = iso(oldest)
        dry.by_tag = dict(tags.most_common(20))
        self.report.dry = dry

    def _count_written(self, names: list[str]) -> int:
        assert self.journal is not None
        return sum(1 for state in self.journal.states(names).values() if state == WRITTEN)
