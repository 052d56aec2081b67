"""Writing a batch to the destination: copies in adds of up to 100, with per-task outcomes.

Each outcome decides what the drain may do next with the source task: delete it (confirmed, or
a duplicate the destination dropped), hold it (refused), or hand it back (not sent, perhaps in
doubt), so a task never leaves the source before the destination has it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from pullqueue import limits
from pullqueue.errors import Error, TaskAlreadyExistsError, TombstonedTaskError, TransientError
from pullqueue.queue import Queue
from pullqueue.task import Task
from pullqueue.worker.backoff import Backoff

_DUPLICATE = (TaskAlreadyExistsError, TombstonedTaskError)


@dataclass
class Sent:
    """What writing some tasks to the destination came to, per source task."""

    confirmed: list[Task] = field(default_factory=list)
    duplicates: list[Task] = field(default_factory=list)
    """The destination already had the name (or its tombstone): dropped there, not an error."""
    failed: list[tuple[Task, Error]] = field(default_factory=list)
    """Refused for good (the error names the task)."""
    unsent: list[Task] = field(default_factory=list)
    """Not confirmed: retries ran out, the drain is stopping, or a fatal error."""
    possible_duplicates: int = 0
    """What the `uncertain` callback counted for the adds that ended without a known outcome."""
    error: BaseException | None = None
    fatal: bool = False
    """The error stops the drain (permission, missing topic, not a pullqueue error)."""

    def merge(self, other: Sent) -> None:
        self.confirmed += other.confirmed
        self.duplicates += other.duplicates
        self.failed += other.failed
        self.unsent += other.unsent
        self.possible_duplicates += other.possible_duplicates
        if other.error is not None and (self.error is None or other.fatal):
            self.error = other.error
        self.fatal = self.fatal or other.fatal


def copy_task(task: Task, keep_eta: bool) -> Task:
    """The destination's copy: same payload, name and tag; the ETA when not yet due; the retry
    limit less the attempts already made (the drain's own lease is not one)."""
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


class Sender:
    """Adds tasks to the destination queue, `threads` adds at a time.

    `uncertain(names)` is called, from the adding thread, each time an add ends without a known
    outcome for those tasks (each may have left a copy), before any retry; it returns the
    possible duplicates that makes (the drain records them in the journal at once).
    """

    def __init__(
        self,
        dest: Queue,
        *,
        threads: int,
        retry_seconds: float,
        stop: threading.Event,
        uncertain: Callable[[list[str]], int],
    ) -> None:
        self.dest = dest
        self.retry_seconds = retry_seconds
        self.stop = stop
        self.uncertain = uncertain
        self._pool = (
            ThreadPoolExecutor(threads, thread_name_prefix="migrate-add") if threads > 1 else None
        )

    def send(self, tasks: list[Task], *, keep_eta: bool) -> Sent:
        """Write copies of tasks (with their ETA if `keep_eta`); say what became of each."""
        step = limits.MAX_TASKS_PER_ADD
        chunks = [tasks[i : i + step] for i in range(0, len(tasks), step)]
        total = Sent()
        if self._pool is None or len(chunks) <= 1:
            results: Iterable[Sent] = (self._send_chunk(c, keep_eta) for c in chunks)
        else:
            results = self._pool.map(lambda c: self._send_chunk(c, keep_eta), chunks)
        for result in results:
            total.merge(result)
        return total

    def _send_chunk(self, chunk: list[Task], keep_eta: bool) -> Sent:
        """Add up to 100 tasks, retrying transient failures for retry_seconds at most.

        `Queue.add` raises one error after adding what it could; `was_added` on each copy says
        which made it. A duplicate error means every other failure was a duplicate too; a
        non-transient error names its task; anything else leaves the outcome unknown.
        """
        sent = Sent()
        pending = chunk
        deadline = time.monotonic() + self.retry_seconds
        backoff = Backoff(0.05, 2.0)
        while pending:
            copies = [copy_task(task, keep_eta) for task in pending]
            error: BaseException | None = None
            try:
                self.dest.add(copies)
            except Exception as exc:
                error = exc
            still: list[Task] = []
            for task, copy in zip(pending, copies, strict=True):
                if copy.was_added:
                    sent.confirmed.append(task)
                else:
                    still.append(task)
            if error is None or not still:
                break
            if isinstance(error, _DUPLICATE):
                sent.duplicates += still
                break
            if isinstance(error, Error) and not isinstance(error, TransientError):
                bad = [task for task in still if task.name == error.task]
                if bad:
                    sent.failed.append((bad[0], error))
                    pending = [task for task in still if task is not bad[0]]
                    continue
            sent.possible_duplicates += self.uncertain([t.name for t in still if t.name])
            if not isinstance(error, TransientError):
                sent.unsent += still
                sent.error, sent.fatal = error, True
                break
            delay = backoff.next()
            if time.monotonic() + delay > deadline or self.stop.wait(delay):
                sent.unsent += still
                sent.error = error
                break
            pending = still
        return sent

    def close(self, *, wait: bool = True) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=wait)
