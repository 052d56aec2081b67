"""Looking at a queue without changing it: its figures, its tasks, its dead letters.

`pullqueue stats`, `tasks` and `dead-letters` print what these functions return, and the web
console shows the same values, so a figure reads the same in a terminal and in a browser.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pullqueue import pause as pausing
from pullqueue.adapters.base import Backend, ListingBackend
from pullqueue.config import Settings
from pullqueue.monitoring import Backlog, BacklogReader, layout_subscriptions
from pullqueue.monitoring import iso as iso
from pullqueue.task import QueueStats, Task

PREVIEW_BYTES = 64
PUBSUB_NOTE = (
    "Pub/Sub has no listing: these are the tasks one look could pull (each pulled and given back"
    " at once, which counts as a delivery attempt); tasks leased by a worker or waiting for a"
    " future ETA are hidden from a pull and not shown"
)
NO_DEAD_LETTERS = (
    "{url} keeps no dead letters: a task over its retry_limit is deleted, as on the legacy queue"
)


@dataclass(frozen=True)
class TaskRow:
    """One task as `tasks` and the console show it."""

    name: str | None
    tag: str | None
    eta: float | None
    state: str | None
    age: float | None
    retry_count: int | None
    payload: bytes
    subscription: str | None = None
    message_id: str | None = None


def preview(payload: bytes, size: int = PREVIEW_BYTES) -> str:
    """The payload's first bytes as text safe for a terminal: control characters escaped."""
    text = payload[:size].decode("utf-8", errors="backslashreplace")
    shown = "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)
    return shown + ("..." if len(payload) > size else "")


def safe(text: str | None) -> str | None:
    """A name or tag from a foreign publisher, with control characters escaped."""
    if text is None:
        return None
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def task_state(eta: float | None, retry_count: int | None, now: float) -> str:
    """available (due), leased (not due, leased before) or scheduled (a future ETA)."""
    if eta is None or eta <= now:
        return "available"
    return "leased" if retry_count else "scheduled"


def task_row(task: Task, now: float) -> TaskRow:
    """The row of a task a backend listed (without leasing it)."""
    eta = task.eta_posix
    state = task_state(eta, task.retry_count, now)
    return TaskRow(task.name, task.tag, eta, state, None, task.retry_count, task.payload)


def listed_rows(backend: ListingBackend, queue: str, tag: str | None, limit: int) -> list[TaskRow]:
    """Every task of the queue (of `tag`), oldest ETA first, at most `limit`."""
    now = backend.now()
    rows = [
        task_row(task, now) for task in backend.list_tasks(queue) if tag is None or task.tag == tag
    ]
    rows.sort(key=lambda r: (r.eta if r.eta is not None else now, r.name or ""))
    return rows[:limit]


def pubsub_rows(backend: Backend, queue: str, tag: str | None, limit: int) -> list[TaskRow]:
    """One look at a Pub/Sub queue: the tasks a pull could see, each given back at once."""
    from pullqueue.adapters.pubsub import PubSubBackend
    from pullqueue.adapters.pubsub.peek import look

    assert isinstance(backend, PubSubBackend)
    now = time.time()
    rows = []
    for seen in look(backend, queue, tag=tag, limit=limit):
        d = seen.delivery
        state = "scheduled" if d.eta is not None and d.eta > now else "available"
        rows.append(
            TaskRow(
                d.name,
                d.tag,
                d.order,
                state,
                max(now - d.published, 0.0),
                seen.retry_count,
                d.payload,
                seen.subscription_id,
                d.message_id,
            )
        )
    return rows


def dead_letter_rows(
    backend: Backend, queue: str, tag: str | None, limit: int
) -> list[dict[str, Any]]:
    """Up to `limit` dead letters of a Pub/Sub queue, as `dead-letters --json` prints them."""
    from pullqueue.adapters.pubsub import PubSubBackend
    from pullqueue.adapters.pubsub.deadletters import list_dead_letters

    assert isinstance(backend, PubSubBackend)
    rows = []
    for dead in list_dead_letters(backend, queue, tag=tag, limit=limit):
        d = dead.delivery
        rows.append(
            {
                "name": d.name,
                "tag": d.tag,
                "eta": iso(d.eta),
                "attempts": dead.attempts,
                "last_error": dead.last_error,
                "source_subscription": dead.source_subscription,
                "first_published": iso(dead.first_published),
                "dead_lettered_at": iso(dead.dead_lettered_at),
                "payload_bytes": len(d.payload),
                "payload_preview": preview(d.payload),
                "message_id": d.message_id,
            }
        )
    return rows


def read_backlog(
    backend: Backend, queue: str, reader: Callable[[str], BacklogReader] = BacklogReader
) -> Backlog | None:
    """The queue's backlog from Cloud Monitoring on Pub/Sub; None on other backends."""
    if not backend.url.startswith("pubsub://"):
        return None
    from pullqueue.adapters.pubsub.layout import QueueLayout

    settings = getattr(backend, "settings", None) or Settings()
    project = backend.url.removeprefix("pubsub://")
    topology = getattr(backend, "topology", None)
    if callable(topology):
        layout = topology(queue).layout  # the queue's own shard count, from its topic's label
    else:
        layout = QueueLayout(
            project=project,
            queue=queue,
            prefix=settings.pubsub_prefix,
            declared_tags=tuple(settings.pubsub_declared_tags.get(queue, ())),
        )
    return reader(project).read(queue, layout_subscriptions(layout))


def pause_state(backend: Backend, queue: str) -> tuple[bool | None, float | None]:
    """(paused, since): whether the queue is paused and since when; (None, None) where the
    backend keeps no pause (the legacy adapters)."""
    if not pausing.can_pause(backend):
        return None, None
    since = pausing.paused_since(backend, queue)
    return since is not None, since


def pause_text(backend: Backend, queue: str) -> str:
    """The pause as `stats` and the console word it."""
    paused, since = pause_state(backend, queue)
    if paused is None:
        return f"unknown ({backend.url} keeps no pause)"
    if not paused:
        return "no"
    return f"yes, since {iso(since)}" if since else "yes"


def stats_json(backend: Backend, stats: QueueStats, backlog: Backlog | None) -> dict[str, Any]:
    """The stable `stats --json` object (docs/operations.md lists every field)."""
    paused, since = pause_state(backend, stats.queue)
    whole = stats.whole_queue
    tasks = stats.tasks if whole else None
    if backlog is not None and backlog.undelivered is not None:
        tasks = backlog.undelivered
    out: dict[str, Any] = {
        "backend": backend.url,
        "queue": stats.queue,
        "tasks": tasks,
        "leased": stats.leased if whole else None,
        "oldest_eta": stats.oldest_eta if whole else None,
        "executed_last_minute": stats.executed_last_minute if whole else None,
        "approximate": stats.approximate or backlog is not None,
        "whole_queue": whole,
        "paused": paused,
        "paused_since": since,
    }
    if backlog is not None:
        out["monitoring"] = backlog.as_dict()
    return out
