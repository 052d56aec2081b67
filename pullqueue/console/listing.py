"""What the queue page lists: a page of tasks, the backlog per tag, the dead letters.

A backend that pages (memory://) hands out 100 tasks of 100,000 without copying the queue; one
that only lists is read whole and cut; Pub/Sub is looked at (a pull given back at once, one
delivery attempt per task shown) only when the user asks, as `pullqueue tasks` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pullqueue.adapters.base import Backend, ListingBackend, PagingBackend
from pullqueue.inspection import PUBSUB_NOTE, TaskRow, dead_letter_rows, pubsub_rows, task_row

PAGE_SIZE = 100
LOOK_LIMIT = 100
"""Tasks one look at a Pub/Sub queue shows (each costs a delivery attempt)."""


@dataclass
class TaskPage:
    """One page of a queue's tasks and how to reach the next."""

    rows: list[TaskRow]
    complete: bool
    """True when the listing is exact (every task can be reached by paging)."""
    note: str
    next_cursor: str | None = None
    tag_counts: dict[str | None, int] | None = None
    unsupported: str | None = None


def cursor_of(row: TaskRow) -> str:
    """The paging cursor past a row: its ETA in microseconds and its name."""
    return f"{round((row.eta or 0.0) * 1e6)}~{row.name or ''}"


def can_page(backend: Backend) -> bool:
    return isinstance(backend, ListingBackend)


def is_pubsub(backend: Backend) -> bool:
    return backend.url.startswith("pubsub://")


def task_page(
    backend: Backend,
    queue: str,
    *,
    tag: str | None,
    after: tuple[float, str] | None,
    size: int = PAGE_SIZE,
) -> TaskPage:
    """A page of tasks (of `tag`) in (ETA, name) order past the cursor `after` (see
    `pullqueue.console.params.cursor`)."""
    cursor = after
    now = backend.now()
    if isinstance(backend, PagingBackend):
        tasks = backend.task_page(queue, tag=tag, after=cursor, limit=size + 1)
        counts = backend.tag_counts(queue)
    elif isinstance(backend, ListingBackend):
        everything = [t for t in backend.list_tasks(queue) if tag is None or t.tag == tag]
        everything.sort(key=lambda t: (t.eta_posix or 0.0, t.name or ""))
        if cursor is not None:
            key = (round(cursor[0] * 1e6), cursor[1])
            everything = [
                t for t in everything if (round((t.eta_posix or 0.0) * 1e6), t.name or "") > key
            ]
        tasks = everything[: size + 1]
        counts = None
    else:
        reason = (
            "Pub/Sub lists no tasks: look at them (each look costs a delivery attempt)"
            if is_pubsub(backend)
            else f"{backend.url} cannot show tasks without leasing them"
        )
        return TaskPage([], False, reason, unsupported=reason)
    rows = [task_row(t, now) for t in tasks[:size]]
    more = len(tasks) > size
    return TaskPage(
        rows,
        True,
        "listed without leasing: a look changes nothing",
        next_cursor=cursor_of(rows[-1]) if more and rows else None,
        tag_counts=counts,
    )


def pubsub_look(backend: Backend, queue: str, *, tag: str | None, limit: int) -> TaskPage:
    """One look at a Pub/Sub queue (see `pullqueue tasks`)."""
    rows = pubsub_rows(backend, queue, tag, limit)
    return TaskPage(rows, False, PUBSUB_NOTE)


@dataclass
class DeadLetters:
    """A queue's dead letters, or why it keeps none."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    kept: bool = True
    note: str = ""


def dead_letters(backend: Backend, queue: str, *, limit: int = 100) -> DeadLetters:
    """Up to `limit` dead letters with their last error (Pub/Sub), or why there are none."""
    if not is_pubsub(backend):
        return DeadLetters(
            kept=False,
            note=f"{backend.url} keeps no dead letters: a task over its retry limit is deleted,"
            " as on the legacy queue",
        )
    return DeadLetters(
        dead_letter_rows(backend, queue, None, limit),
        note="looking leaves each dead letter where it was (one delivery attempt on the"
        " dead-letter subscription)",
    )
