"""`pullqueue stats QUEUE`: what can be known about a queue, as a table, as JSON, or live.

It is the operator's first look: how many tasks wait, how old the oldest is, how many are
leased; on Pub/Sub the backlog comes from Cloud Monitoring, and a count nobody can give is shown
as unknown (null), never as 0.
"""

from __future__ import annotations

import datetime as dt
import json
import time

import click
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from pullqueue import inspection
from pullqueue.adapters.base import Backend
from pullqueue.cli.base import (
    EXIT_STATUS_HELP,
    Command,
    FiniteFloat,
    connect_backend,
    json_option,
    url_option,
)
from pullqueue.inspection import stats_json
from pullqueue.monitoring import Backlog, BacklogReader
from pullqueue.queue import Queue
from pullqueue.task import QueueStats

APPROXIMATE_NOTE = "approximate: the backend estimates these counts"
PROCESS_NOTE = (
    "Pub/Sub's API counts no backlog: the queue's counts come from Cloud Monitoring below"
)


def stats_rows(stats: QueueStats, now: float) -> list[tuple[str, str]]:
    """(label, value) pairs describing stats, unknown values shown as 'unknown'."""

    def known(value: int | None) -> str:
        return "unknown" if value is None or not stats.whole_queue else f"{value:,}"

    if stats.oldest_eta is None:
        exact_empty = stats.tasks == 0 and not stats.approximate and stats.whole_queue
        oldest = "none" if exact_empty else "unknown"
    else:
        when = dt.datetime.fromtimestamp(stats.oldest_eta, tz=dt.timezone.utc)
        age = now - stats.oldest_eta
        relative = f"{age:,.0f} s ago" if age >= 0 else f"in {-age:,.0f} s"
        oldest = f"{when.isoformat(timespec='seconds')} ({relative})"
    approximate = stats.approximate and stats.whole_queue
    return [
        ("tasks", known(stats.tasks) + (" (approximate)" if approximate else "")),
        ("leased", known(stats.leased)),
        ("oldest ETA", oldest),
        ("leased in the last minute", known(stats.executed_last_minute)),
    ]


def backlog_reader(project: str) -> BacklogReader:
    """The Monitoring reader for a project (tests replace this to reach a stand-in)."""
    return BacklogReader(project)


def read_backlog(backend: Backend, queue: str) -> Backlog | None:
    """The queue's backlog from Cloud Monitoring on Pub/Sub; None on other backends."""
    return inspection.read_backlog(backend, queue, backlog_reader)


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    if seconds < 120:
        return f"{seconds:,.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:,.1f} min"
    return f"{seconds / 3600:,.1f} h"


def _count(value: int | None) -> str:
    return "unknown" if value is None else f"{value:,}"


def backlog_table(backlog: Backlog) -> Table:
    """The Monitoring figures: one row per subscription, grouped as the layout groups them."""
    sampled = backlog.data_age
    if backlog.unavailable is not None:
        caption = f"unknown: {backlog.unavailable}"
    elif sampled is None:
        caption = "no samples in the window"
    else:
        caption = (
            f"sampled {_age(sampled)} before this read; Monitoring lags 1-4 min."
            " dead-lettered: moved to the dead-letter topic in the last"
            f" {backlog.window / 60:g} min"
        )
    table = Table(title="backlog (Cloud Monitoring)", caption=caption)
    for heading in ("subscription", "serves", "undelivered", "oldest unacked", "dead-lettered"):
        table.add_column(
            heading, justify="left" if heading in ("subscription", "serves") else "right"
        )
    for row in backlog.subscriptions:
        sub = row.subscription
        serves = {
            "workers": "undeclared tags",
            "tag": f"tag {sub.label!r}",
            "shard": f"shard {sub.label}",
            "dead-letter": "dead letters",
        }.get(sub.role, sub.role)
        table.add_row(
            sub.subscription_id,
            serves,
            _count(row.undelivered),
            _age(row.oldest_unacked_age),
            "" if sub.role == "dead-letter" else _count(row.dead_lettered),
        )
    table.add_section()
    table.add_row(
        "total",
        "",
        _count(backlog.undelivered),
        _age(backlog.oldest_unacked_age),
        _count(backlog.dead_lettered),
        style="bold",
    )
    table.add_row("dead letters waiting", "", _count(backlog.dead_letters), "", "")
    return table


def render(backend: Backend, stats: QueueStats, backlog: Backlog | None) -> Group:
    """The whole terminal view: the backend's figures, then Monitoring's where there is one."""
    caption = None
    if not stats.whole_queue:
        caption = PROCESS_NOTE
    elif stats.approximate:
        caption = APPROXIMATE_NOTE
    table = Table(
        title=f"queue {stats.queue!r} on {backend.url}", caption=caption, show_header=False
    )
    table.add_column(style="bold")
    table.add_column(justify="right")
    for label, value in stats_rows(stats, time.time()):
        table.add_row(label, value)
    table.add_row("paused", inspection.pause_text(backend, stats.queue))
    parts: list[Table] = [table]
    if backlog is not None:
        parts.append(backlog_table(backlog))
    return Group(*parts)


@click.command(
    "stats",
    cls=Command,
    epilog="""\b
Examples:
  pullqueue stats counters --url memory://
  pullqueue stats counters --url pubsub://my-project --json
  pullqueue stats counters --url pubsub://my-project --watch --interval 30

"""
    + EXIT_STATUS_HELP
    + "\nHere 130 is also how --watch ends (Ctrl-C).",
)
@click.argument("queue_name", metavar="QUEUE")
@url_option()
@json_option()
@click.option("--watch", is_flag=True, help="Keep the view on screen, refreshed every --interval.")
@click.option(
    "--interval",
    type=FiniteFloat(0.1, 3600),
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="Seconds between refreshes with --watch (Monitoring samples Pub/Sub once a minute).",
)
def stats(queue_name: str, url: str | None, as_json: bool, watch: bool, interval: float) -> None:
    """Show what can be known about pull queue QUEUE: tasks, leases, the oldest task.

    memory:// counts exactly; the legacy queue estimates. On Pub/Sub, whose API counts nothing,
    the backlog (undelivered tasks, oldest unacknowledged age, dead letters) is read from Cloud
    Monitoring for every subscription of the queue, with the age of the samples (pip install
    'pullqueue[monitoring]'; role roles/monitoring.viewer). Where Monitoring cannot be read
    (the emulator, no permission) the counts are shown as unknown, with the reason.
    """
    if watch and as_json:
        raise click.UsageError("give --watch or --json, not both")
    backend = connect_backend(url, shared=True, memory_warning=True)
    try:
        queue = Queue(queue_name, backend)

        def look() -> tuple[QueueStats, Backlog | None]:
            return queue.stats(), read_backlog(backend, queue_name)

        if as_json:
            click.echo(json.dumps(stats_json(backend, *look())))
            return
        console = Console()
        if not watch:
            console.print(render(backend, *look()))
            return
        with Live(render(backend, *look()), console=console, auto_refresh=False) as live:
            while True:
                time.sleep(interval)
                live.update(render(backend, *look()), refresh=True)
    finally:
        backend.close()
