"""The dry run: what a drain would move, found without changing anything in either queue.

A lease is not harmless (it adds 1 to each task's retry_count and hides the task from workers),
so a dry run lists the source where the source can list, and otherwise reads its statistics.
"""

from __future__ import annotations

from collections import Counter

from pullqueue.adapters.base import ListingBackend
from pullqueue.migrate.journal import WRITTEN, Journal
from pullqueue.migrate.report import DryRun, iso
from pullqueue.queue import Queue

NOT_LISTABLE = (
    "the source cannot list tasks without leasing them, and a lease adds 1 to each task's"
    " retry_count and hides it from workers, so this dry run read the queue's statistics only:"
    " no sample, no tags, no ETAs beyond the oldest"
)
NOT_COUNTABLE = (
    "the source's API counts no backlog either (Pub/Sub), so the counts are unknown: read them"
    " with `pullqueue stats QUEUE --url pubsub://PROJECT` (Cloud Monitoring)"
)


def dry_run(source: Queue, journal: Journal | None, *, sample_size: int, listing: bool) -> DryRun:
    """Count, classify and sample the source's tasks; nothing is leased, added or deleted."""
    backend = source.backend
    if not listing or not isinstance(backend, ListingBackend):
        stats = source.stats()
        if not stats.whole_queue:
            return DryRun(
                listed=False,
                tasks=None,
                available=None,
                future_eta=None,
                leased_elsewhere=None,
                payload_bytes=None,
                note=NOT_LISTABLE + "; " + NOT_COUNTABLE,
            )
        return DryRun(
            listed=False,
            tasks=stats.tasks,
            available=None,
            future_eta=None,
            leased_elsewhere=stats.leased,
            payload_bytes=None,
            oldest_eta=iso(stats.oldest_eta),
            note=NOT_LISTABLE + (" (the counts are approximate)" if stats.approximate else ""),
        )
    now = backend.now()
    dry = DryRun(listed=True, note="read from the source's listing; no task was leased")
    tags: Counter[str] = Counter()
    names: list[str] = []
    oldest: float | None = None
    count = available = future = elsewhere = size = 0
    for task in backend.list_tasks(source.name):
        count += 1
        size += len(task.payload)
        eta = task.eta_posix if task.eta_posix is not None else now
        oldest = eta if oldest is None else min(oldest, eta)
        if eta <= now:
            available += 1
        elif task.retry_count:
            elsewhere += 1
        else:
            future += 1
        tags[task.tag if task.tag is not None else "(untagged)"] += 1
        if len(dry.sample) < sample_size:
            dry.sample.append(
                {
                    "name": task.name,
                    "tag": task.tag,
                    "eta": iso(task.eta_posix),
                    "bytes": len(task.payload),
                    "retry_count": task.retry_count,
                }
            )
        if journal is not None and task.name is not None:
            names.append(task.name)
            if len(names) >= 1000:
                dry.already_written += _written(journal, names)
                names = []
    if journal is not None and names:
        dry.already_written += _written(journal, names)
    dry.tasks, dry.available, dry.future_eta = count, available, future
    dry.leased_elsewhere, dry.payload_bytes = elsewhere, size
    dry.oldest_eta = iso(oldest)
    dry.by_tag = dict(tags.most_common(20))
    return dry


def _written(journal: Journal, names: list[str]) -> int:
    return sum(1 for state in journal.states(names).values() if state == WRITTEN)
