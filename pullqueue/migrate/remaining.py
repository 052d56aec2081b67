"""What a drain leaves in the source, explained: waiting on an ETA, leased elsewhere, or not.

The report's `still_waiting` (explained, with ETAs as far as the source can tell) and
`unexplained` (available now, yet not moved) come from here, once the drain has stopped.
"""

from __future__ import annotations

from collections.abc import Sequence

from pullqueue.adapters.base import ListingBackend
from pullqueue.migrate.report import MAX_LISTED, MigrationReport, Waiting, iso
from pullqueue.queue import Queue
from pullqueue.task import Task

STOPPED_EARLY = "not moved: the drain stopped before the source was empty (run it again)"


def account_remaining(
    source: Queue, report: MigrationReport, *, failed: set[str], listing: bool, emptied: bool
) -> None:
    """Fill report.waiting, still_waiting and unexplained from what the source still holds.

    `failed` names tasks the report already explains; `emptied` is False when the drain stopped
    before the source went quiet (then tasks available now are explained by the stop).
    """
    backend = source.backend
    now = backend.now()
    if listing and isinstance(backend, ListingBackend):
        listed = list(backend.list_tasks(source.name))
        report.left_in_source = len(listed)
        left = [t for t in listed if t.name not in failed]
        future = [t for t in left if t.eta_posix and t.eta_posix > now and not t.retry_count]
        held = [t for t in left if t.eta_posix and t.eta_posix > now and t.retry_count]
        waiting = {t.name for t in future} | {t.name for t in held}
        available = [t for t in left if t.name not in waiting]
        _add(report, "with a future ETA (not copied yet)", future)
        _add(report, "leased by another holder (ETA = lease end)", held)
        if emptied:
            report.unexplained = len(available)
        else:
            _add(report, STOPPED_EARLY, available)
        return
    stats = source.stats()
    report.left_in_source = stats.tasks if stats.whole_queue else None
    others = stats.tasks - len(failed)
    if others <= 0:
        return
    if not emptied:
        reason = STOPPED_EARLY
    elif stats.oldest_eta is not None and stats.oldest_eta > now:
        reason = (
            "not available yet: future ETA or leased by another holder (the source cannot list"
            " them; its statistics give the oldest ETA)"
        )
    elif stats.approximate:
        reason = "reported by approximate statistics (check again later)"
    else:
        report.unexplained = others
        return
    report.still_waiting += others
    report.waiting.append(Waiting(reason, others, oldest_eta=iso(stats.oldest_eta)))


def _add(report: MigrationReport, reason: str, tasks: Sequence[Task]) -> None:
    if not tasks:
        return
    etas = [t.eta_posix for t in tasks if t.eta_posix is not None]
    report.still_waiting += len(tasks)
    report.waiting.append(
        Waiting(
            reason,
            len(tasks),
            oldest_eta=iso(min(etas)) if etas else None,
            tasks=[{"name": t.name, "eta": iso(t.eta_posix)} for t in tasks[:MAX_LISTED]],
        )
    )
