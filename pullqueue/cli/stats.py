"""`pullqueue stats QUEUE`: what the backend can tell about a queue, as a table or as JSON.

It is the operator's first look before and after a migration or a worker run: how many tasks
wait, how many are leased, how old the oldest is, and whether the counts are estimates.
"""

from __future__ import annotations

import datetime as dt
import json
import time

import click
from rich.console import Console
from rich.table import Table

from pullqueue.cli.base import Command
from pullqueue.errors import ConfigurationError, Error
from pullqueue.queue import Queue
from pullqueue.registry import connect, default_backend
from pullqueue.task import QueueStats

APPROXIMATE_NOTE = (
    "approximate: the backend estimates these counts; on Pub/Sub they cover only this"
    " process, so read the backlog from Cloud Monitoring (num_undelivered_messages)"
)


def stats_rows(stats: QueueStats, now: float) -> list[tuple[str, str]]:
    """(label, value) pairs describing stats, unknown values shown as 'unknown'."""

    def known(value: int | None) -> str:
        return "unknown" if value is None else f"{value:,}"

    if stats.oldest_eta is None:
        oldest = "none" if stats.tasks == 0 and not stats.approximate else "unknown"
    else:
        when = dt.datetime.fromtimestamp(stats.oldest_eta, tz=dt.timezone.utc)
        age = now - stats.oldest_eta
        relative = f"{age:,.0f} s ago" if age >= 0 else f"in {-age:,.0f} s"
        oldest = f"{when.isoformat(timespec='seconds')} ({relative})"
    return [
        ("tasks", known(stats.tasks) + (" (approximate)" if stats.approximate else "")),
        ("leased", known(stats.leased)),
        ("oldest ETA", oldest),
        ("leased in the last minute", known(stats.executed_last_minute)),
    ]


@click.command("stats", cls=Command)
@click.argument("queue_name", metavar="QUEUE")
@click.option(
    "--url",
    help="Backend URL: memory://, pubsub://PROJECT, cloudtasks://PROJECT/LOCATION, appengine://"
    " [default: env PULLQUEUE_URL, else memory://].",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
def stats(queue_name: str, url: str | None, as_json: bool) -> None:
    """Show how many tasks pull queue QUEUE holds, how many are leased and the oldest ETA.

    Counts marked approximate are estimates (Pub/Sub, the legacy queue); memory is exact.
    """
    try:
        backend = connect(url) if url else default_backend()
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc), param_hint="--url") from exc
    try:
        result = Queue(queue_name, backend).stats()
    except Error as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        backend.close()
    if as_json:
        click.echo(json.dumps({"backend": backend.url, **result.__dict__}))
        return
    table = Table(
        title=f"queue {queue_name!r} on {backend.url}",
        caption=APPROXIMATE_NOTE if result.approximate else None,
        show_header=False,
    )
    table.add_column(style="bold")
    table.add_column(justify="right")
    for label, value in stats_rows(result, time.time()):
        table.add_row(label, value)
    Console().print(table)
