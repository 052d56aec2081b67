"""`pullqueue tasks QUEUE`: look at a queue's tasks without taking them, as a table or as JSON.

A backend that can list (memory://, the legacy queue) lists exactly; on Pub/Sub a look is a pull
given back at once, which counts as a delivery attempt: docs/operations.md says what that costs.
"""

from __future__ import annotations

import json
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
from pullqueue.inspection import (
    PREVIEW_BYTES,
    PUBSUB_NOTE,
    TaskRow,
    iso,
    listed_rows,
    preview,
    pubsub_rows,
    safe,
)
from pullqueue.queue import validate_queue_name

__all__ = ["PREVIEW_BYTES", "TaskRow", "iso", "open_backend", "preview", "safe", "tasks"]


def open_backend(queue_name: str, url: str | None) -> Backend:
    """The backend for --url (or the configured one), after checking the queue's name."""
    try:
        validate_queue_name(queue_name)
    except Error as exc:
        raise click.BadParameter(str(exc), param_hint="QUEUE") from exc
    return connect_backend(url, shared=True, memory_warning=True)


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
