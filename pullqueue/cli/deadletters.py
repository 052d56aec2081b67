"""`pullqueue dead-letters QUEUE`: the tasks Pub/Sub set aside, why, and putting them back.

Listing leaves them where they are; `--redrive` publishes them back to the queue (names, tags
and ETAs kept, safe to kill and rerun); `--purge` deletes them after a confirmation.
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from pullqueue.adapters.base import Backend
from pullqueue.cli.base import (
    EXIT_INTERRUPTED,
    EXIT_STATUS_HELP,
    Command,
    Count,
    json_option,
    url_option,
)
from pullqueue.cli.tasks import open_backend
from pullqueue.inspection import NO_DEAD_LETTERS, dead_letter_rows, safe


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM stops the command as Ctrl-C does (KeyboardInterrupt: exit 130, work reported)."""

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _listing(backend: Backend, queue: str, tag: str | None, limit: int) -> list[dict[str, Any]]:
    return dead_letter_rows(backend, queue, tag, limit)


def _print_listing(queue: str, url: str, rows: list[dict[str, Any]]) -> None:
    table = Table(
        title=f"dead letters of {queue!r} on {url}",
        caption="attempts: deliveries before Pub/Sub set the task aside; last error: the"
        " handler's, when the worker could record it (else see its logs, event=failed)",
    )
    for heading in ("name", "tag", "attempts", "dead-lettered", "last error", "bytes"):
        table.add_column(heading)
    for row in rows:
        table.add_row(
            *(
                Text("-" if value is None else str(value))
                for value in (
                    safe(row["name"]),
                    safe(row["tag"]),
                    row["attempts"],
                    row["dead_lettered_at"],
                    safe(row["last_error"]),
                    row["payload_bytes"],
                )
            )
        )
    Console().print(table)
    if not rows:
        click.echo("no dead letters")


@click.command(
    "dead-letters",
    cls=Command,
    epilog="""\b
Examples:
  pullqueue dead-letters counters --url pubsub://my-project
  pullqueue dead-letters counters --url pubsub://my-project --tag user-42 --json
  pullqueue dead-letters counters --url pubsub://my-project --redrive
  pullqueue dead-letters counters --url pubsub://my-project --purge --yes

"""
    + EXIT_STATUS_HELP
    + "\nHere 130 reports what was redriven or purged before the interruption.",
)
@click.argument("queue_name", metavar="QUEUE")
@url_option()
@click.option("--tag", help="Only dead letters with this tag.")
@click.option(
    "--limit",
    type=Count(1, 10_000_000),
    default=None,
    help="List, redrive or purge at most this many [default: 20 listed; all redriven or purged].",
)
@click.option("--redrive", is_flag=True, help="Put them back on the queue, names, tags, ETAs kept.")
@click.option("--purge", is_flag=True, help="Delete them (asks first; --yes to skip the question).")
@click.option("--yes", "-y", is_flag=True, help="Do not ask before --purge.")
@json_option()
def dead_letters(
    queue_name: str,
    url: str | None,
    tag: str | None,
    limit: int | None,
    redrive: bool,
    purge: bool,
    yes: bool,
    as_json: bool,
) -> None:
    """List the dead letters of pull queue QUEUE: tasks Pub/Sub set aside after the maximum
    delivery attempts, with how many attempts they had and, where the worker recorded it, the
    handler's last error.

    --redrive publishes each back to the queue with its name, tag and ETA (a fresh task with a
    full set of attempts), then deletes the dead letter; it is safe to interrupt or kill and run
    again: nothing is lost or published twice. --purge deletes them (after a question on a
    terminal, or with --yes).
    """
    if redrive and purge:
        raise click.UsageError("give --redrive or --purge, not both")
    if purge and not yes and not sys.stdin.isatty():
        raise click.UsageError("--purge deletes dead letters for good: add --yes to confirm")
    backend = open_backend(queue_name, url)
    try:
        if not backend.url.startswith("pubsub://"):
            _no_dead_letters(backend, as_json, redrive, purge)
            return
        if purge:
            _purge(backend, queue_name, tag, limit, yes, as_json)
        elif redrive:
            _redrive(backend, queue_name, tag, limit, as_json)
        else:
            rows = _listing(backend, queue_name, tag, limit or 20)
            if as_json:
                click.echo(
                    json.dumps({"backend": backend.url, "queue": queue_name, "dead_letters": rows})
                )
            else:
                _print_listing(queue_name, backend.url, rows)
    finally:
        backend.close()


def _no_dead_letters(backend: Backend, as_json: bool, redrive: bool, purge: bool) -> None:
    note = NO_DEAD_LETTERS.format(url=backend.url)
    if as_json:
        out: dict[str, Any] = {"backend": backend.url, "note": note}
        if redrive:
            out.update(redriven=0, resumed=0, unresolved=0)
        elif purge:
            out["purged"] = 0
        else:
            out["dead_letters"] = []
        click.echo(json.dumps(out))
    else:
        click.echo(note)


def _purge(
    backend: Backend, queue: str, tag: str | None, limit: int | None, yes: bool, as_json: bool
) -> None:
    from pullqueue.adapters.pubsub import PubSubBackend
    from pullqueue.adapters.pubsub.deadletters import purge_dead_letters

    assert isinstance(backend, PubSubBackend)
    if not yes:
        which = f" with tag {tag!r}" if tag is not None else ""
        click.confirm(
            f"Delete {'up to ' + str(limit) if limit else 'every'} dead letter{which} of"
            f" {queue!r} for good?",
            abort=True,
        )
    purged = purge_dead_letters(backend, queue, tag=tag, limit=limit or sys.maxsize)
    if as_json:
        click.echo(json.dumps({"backend": backend.url, "queue": queue, "purged": purged}))
    else:
        click.echo(f"purged {purged} dead letters of {queue!r}")


def _redrive(
    backend: Backend, queue: str, tag: str | None, limit: int | None, as_json: bool
) -> None:
    from pullqueue.adapters.pubsub import PubSubBackend
    from pullqueue.adapters.pubsub.deadletters import Redrive, redrive

    assert isinstance(backend, PubSubBackend)
    progress = Redrive()

    def on_batch(report: Redrive) -> None:
        progress.redriven, progress.resumed = report.redriven, report.resumed
        if not as_json:
            click.echo(f"redriven {report.redriven}", err=True)

    try:
        with _sigterm_interrupts():
            done = redrive(backend, queue, tag=tag, limit=limit or sys.maxsize, on_batch=on_batch)
    except KeyboardInterrupt:
        message = (
            f"interrupted: {progress.redriven} dead letters put back so far; run the same"
            " command again to finish (nothing is lost or published twice)"
        )
        if as_json:
            click.echo(
                json.dumps(
                    {
                        "backend": backend.url,
                        "queue": queue,
                        "interrupted": True,
                        "redriven": progress.redriven,
                        "resumed": progress.resumed,
                        "unresolved": None,
                    }
                )
            )
        click.echo(message, err=True)
        raise click.exceptions.Exit(EXIT_INTERRUPTED) from None
    if as_json:
        click.echo(
            json.dumps(
                {
                    "backend": backend.url,
                    "queue": queue,
                    "interrupted": False,
                    "redriven": done.redriven,
                    "resumed": done.resumed,
                    "unresolved": done.unresolved,
                }
            )
        )
        return
    resumed = f" ({done.resumed} more had been put back by an interrupted run)"
    click.echo(
        f"put {done.redriven} dead letters back on {queue!r}" + (resumed if done.resumed else "")
    )
    if done.unresolved:
        click.echo(
            f"{done.unresolved} copies from an interrupted run wait for their dead letter (a"
            " --tag or --limit left it): run the redrive again without them"
        )
