"""`pullqueue tasks QUEUE`: look at a queue's tasks without taking them, as a table or as JSON.

A backend that can list (memory://, the legacy queue) lists exactly; on Pub/Sub a look is a pull
given back at once, which counts as a delivery attempt: docs/operations.md says what that costs.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from pullqueue.adapters.base import Backend, ListingBackend
from pullqueue.cli.base import (
    EXIT_STATUS_HELP,
    Command,
    Count,
    connect_backend,
    fail,
    json_option,
    url_option,
)
from pullqueue.errors import Error
from pullqueue.queue import validate_queue_name

PREVIEW_BYTES = 64
PUBSUB_NOTE = (
    "Pub/Sub has no listing: these are the tasks one look could pull (each pulled and given back"
    " at once, which counts as a delivery attempt); tasks leased by a worker or waiting for a"
    " future ETA are hidden from a pull and not shown"
)


@dataclass(frozen=True)
class TaskRow:
    """One task as `tasks` shows it."""

    name: str | None
    tag: str | None
    eta: float | None
    state: str | None
    age: float | None
    retry_count: int | None
    payload: bytes
    subscription: str | None = None


def open_backend(queue_name: str, url: str | None) -> Backend:
    """The backend for --url (or the configured one), after checking the queue's name."""
    try:
        validate_queue_name(queue_name)
    except Error as exc:
        raise click.BadParameter(str(exc), param_hint="QUEUE") from exc
    return connect_backend(url, shared=True, memory_warning=True)


def iso(posix: float | None) -> str | None:
    if posix is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(posix))


def preview(payload: bytes, size: int = PREVIEW_BYTES) -> str:
    """The payload's first bytes as text safe for a terminal: control characters escaped."""
    text = payload[:size].decode("utf-8", errors="backslashreplace")
    safe = "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)
    return safe + ("..." if len(payload) > size else "")


def safe(text: str | None) -> str | None:
    """A name or tag from a foreign publisher, with control characters escaped."""
    if text is None:
        return None
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def listed_rows(backend: ListingBackend, queue: str, tag: str | None, limit: int) -> list[TaskRow]:
    """Every task of the queue (of `tag`), oldest ETA first, at most `limit`."""
    now = backend.now()
    rows: list[TaskRow] = []
    for task in backend.list_tasks(queue):
        if tag is not None and task.tag != tag:
            continue
        eta = task.eta_posix
        if eta is None or eta <= now:
            state = "available"
        elif task.retry_count:
            state = "leased"
        else:
            state = "scheduled"
        rows.append(TaskRow(task.name, task.tag, eta, state, None, task.retry_count, task.payload))
    rows.sort(key=lambda r: (r.eta if r.eta is not None else now, r.name or ""))
    return rows[:limit]


def pubsub_rows(backend: Backend, queue: str, tag: str | None, limit: int) -> list[TaskRow]:
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
            )
        )
    return rows


def row_json(row: TaskRow, with_payload: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": row.name,
        "tag": row.tag,
        "eta": iso(row.eta),
        "eta_posix": row.eta,
        "state": row.state,
        "age_seconds": None if row.age is None else round(row.age, 1),
        "retry_count": row.retry_count,
        "payload_bytes": len(row.payload),
        "subscription": row.subscription,
    }
    if with_payload:
        out["payload_preview"] = preview(row.payload)
    return out


def _cell(value: object) -> Text:
    return Text("-" if value is None else str(value))


@click.command(
    "tasks",
    cls=Command,
    epilog="""\b
Examples:
  pullqueue tasks counters --url memory://
  pullqueue tasks counters --url pubsub://my-project --tag user-42 --limit 50
  pullqueue tasks counters --url pubsub://my-project --payload --json

"""
    + EXIT_STATUS_HELP,
)
@click.argument("queue_name", metavar="QUEUE")
@url_option()
@click.option("--tag", help="Only tasks with this tag.")
@click.option(
    "--limit",
    type=Count(1, 1000),
    default=20,
    show_default=True,
    help="Show at most this many tasks.",
)
@click.option(
    "--payload",
    "with_payload",
    is_flag=True,
    help=f"Also show the first {PREVIEW_BYTES} bytes of each payload (control characters escaped).",
)
@json_option()
def tasks(
    queue_name: str,
    url: str | None,
    tag: str | None,
    limit: int,
    with_payload: bool,
    as_json: bool,
) -> None:
    """Look at the tasks of pull queue QUEUE without taking them: name, tag, ETA, age, retry
    count and payload size.

    memory:// and the legacy queue list every task exactly. On Pub/Sub a look pulls tasks and
    gives each back at once: it adds 1 to their retry_count and shows what one look could pull
    (not leased tasks, not tasks waiting for a future ETA); a task two attempts from the
    dead-letter limit is republished fresh instead, so looking never dead-letters a task.
    """
    backend = open_backend(queue_name, url)
    try:
        if isinstance(backend, ListingBackend):
            rows = listed_rows(backend, queue_name, tag, limit)
            complete, note = True, "listed without leasing"
        elif backend.url.startswith("pubsub://"):
            rows = pubsub_rows(backend, queue_name, tag, limit)
            complete, note = False, PUBSUB_NOTE
        else:
            fail(f"{backend.url} cannot show tasks without leasing them")
    finally:
        backend.close()
    if as_json:
        click.echo(
            json.dumps(
                {
                    "backend": backend.url,
                    "queue": queue_name,
                    "complete": complete,
                    "shown": len(rows),
                    "note": note,
                    "tasks": [row_json(row, with_payload) for row in rows],
                }
            )
        )
        return
    table = Table(title=f"tasks of {queue_name!r} on {backend.url}", caption=note)
    for heading in ("name", "tag", "state", "ETA", "age", "retries", "bytes"):
        table.add_column(heading, justify="right" if heading in ("retries", "bytes") else "left")
    if with_payload:
        table.add_column("payload")
    for row in rows:
        cells = [
            _cell(safe(row.name)),
            _cell(safe(row.tag)),
            _cell(row.state),
            _cell(iso(row.eta)),
            _cell(None if row.age is None else f"{row.age:,.0f} s"),
            _cell(row.retry_count),
            _cell(len(row.payload)),
        ]
        if with_payload:
            cells.append(Text(preview(row.payload)))
        table.add_row(*cells)
    Console().print(table)
    if not rows:
        click.echo("no tasks found" + ("" if complete else " by this look"))
