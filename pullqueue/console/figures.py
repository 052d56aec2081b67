"""The figures the console shows for a queue, each a value or `unknown` with the reason.

They are read where `pullqueue stats` reads them (`pullqueue.inspection.stats_json`: the
backend's counts, Cloud Monitoring on Pub/Sub), so a browser and a terminal never disagree; a
figure nobody can give carries the reason instead of a made-up 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pullqueue.adapters.base import Backend
from pullqueue.inspection import NO_DEAD_LETTERS, read_backlog, stats_json
from pullqueue.monitoring import BacklogReader
from pullqueue.queue import Queue

NO_COUNTS = "{url} counts only the tasks this process holds, not the queue's"
NO_RATES = (
    "{url} counts neither leases nor completions; each worker counts its own: start the console"
    " with --metrics URL for each `pullqueue work --metrics-port` endpoint"
)
"""One reason for both figures, so a page says it once."""
NOT_SAMPLED = "Cloud Monitoring had no sample of every subscription in its window"


@dataclass(frozen=True)
class Figure:
    """A value, or None with the reason nobody can give it."""

    value: float | None
    reason: str | None = None
    exact: bool = True

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "reason": self.reason, "exact": self.exact}


@dataclass(frozen=True)
class QueueFigures:
    """One reading of one queue."""

    queue: str
    read_at: float
    backlog: Figure
    oldest_age: Figure
    """Seconds since the oldest task's ETA (negative: the first ETA is still ahead)."""
    dead_letters: Figure
    leases_per_minute: Figure
    completions_per_minute: Figure
    stats: dict[str, Any]
    """The object `pullqueue stats --json` prints for the queue."""
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "read_at": self.read_at,
            "backlog": self.backlog.as_dict(),
            "oldest_age_seconds": self.oldest_age.as_dict(),
            "dead_letters": self.dead_letters.as_dict(),
            "leases_per_minute": self.leases_per_minute.as_dict(),
            "completions_per_minute": self.completions_per_minute.as_dict(),
            "stats": self.stats,
            "error": self.error,
        }


def read_figures(
    backend: Backend, queue: str, reader: Callable[[str], BacklogReader] = BacklogReader
) -> QueueFigures:
    """The queue's figures now; an error reading them makes every figure unknown, saying why."""
    now = backend.now()
    try:
        stats = Queue(queue, backend).stats()
        backlog = read_backlog(backend, queue, reader)
    except Exception as exc:  # one broken queue must not take the page down
        reason = f"could not read the queue: {exc}"
        unknown = Figure(None, reason)
        return QueueFigures(queue, now, unknown, unknown, unknown, unknown, unknown, {}, reason)
    out = stats_json(backend, stats, backlog)
    url = backend.url
    monitoring_reason = None
    if backlog is not None:
        monitoring_reason = backlog.unavailable or NOT_SAMPLED
    approximate = bool(out["approximate"])

    if out["tasks"] is not None:
        backlog_figure = Figure(out["tasks"], exact=not approximate)
    else:
        backlog_figure = Figure(None, monitoring_reason or NO_COUNTS.format(url=url))

    if backlog is not None:
        age = backlog.oldest_unacked_age
        oldest = Figure(age, exact=False) if age is not None else Figure(None, monitoring_reason)
    elif out["oldest_eta"] is not None:
        oldest = Figure(now - out["oldest_eta"], exact=not approximate)
    elif out["tasks"] == 0 and not approximate:
        oldest = Figure(None, "the queue is empty")
    else:
        oldest = Figure(None, NO_COUNTS.format(url=url))

    if backlog is not None:
        dead = backlog.dead_letters
        dead_figure = (
            Figure(dead, exact=False) if dead is not None else Figure(None, monitoring_reason)
        )
    else:
        dead_figure = Figure(None, NO_DEAD_LETTERS.format(url=url))

    leased = out["executed_last_minute"]
    leases = (
        Figure(leased, exact=not approximate)
        if leased is not None
        else Figure(None, NO_RATES.format(url=url))
    )
    counter = getattr(backend, "completed_last_minute", None)
    if callable(counter):
        completions = Figure(int(counter(queue)))
    else:
        completions = Figure(None, NO_RATES.format(url=url))
    return QueueFigures(queue, now, backlog_figure, oldest, dead_figure, leases, completions, out)
