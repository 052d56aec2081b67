"""`pullqueue sweep`: one pass of the transactional outbox's sweeper, for cron or by hand.

It publishes the tasks a crash left staged by a transactional add (their transaction committed,
their post-commit publish never happened) and deletes their staging; see docs/semantics.md.
"""

from __future__ import annotations

import json

import click

from pullqueue.cli.base import (
    EXIT_FAILED,
    EXIT_STATUS_HELP,
    Command,
    FiniteFloat,
    connect_backend,
    fail,
    json_option,
    url_option,
)
from pullqueue.config import Settings
from pullqueue.errors import ConfigurationError
from pullqueue.outbox.stores import SCHEMES, connect_store
from pullqueue.outbox.sweep import sweep as sweep_once


@click.command(
    "sweep",
    cls=Command,
    epilog="""\b
Examples:
  pullqueue sweep --url pubsub://my-app --datastore appengine://
  pullqueue sweep --url pubsub://my-app --datastore 'appengine://localhost:8089?app=s~my-app' --json
  pullqueue sweep --url pubsub://my-app --datastore appengine:// --grace 0

"""
    + EXIT_STATUS_HELP
    + "\nHere 1 also means a staged task could not be published (it stays staged).",
)
@url_option()
@click.option(
    "--datastore",
    metavar="URL",
    help=f"Where the app's transactions stage tasks: {SCHEMES}"
    " [default: env PULLQUEUE_OUTBOX_DATASTORE].",
)
@click.option(
    "--grace",
    type=FiniteFloat(0, 86400),
    default=None,
    metavar="SECONDS",
    help="Leave tasks staged less than this long to their own publish"
    " [default: env PULLQUEUE_SWEEP_GRACE_SECONDS, else 60].",
)
@json_option("Print one JSON object: found, published, already_published, failed, errors.")
def sweep(url: str | None, datastore: str | None, grace: float | None, as_json: bool) -> None:
    """Publish the tasks transactional adds left staged by a crash, then delete their staging.

    A staged task belongs to a committed transaction (a rolled-back one leaves nothing); it is
    published under its staged name, so with a task-name registry (PULLQUEUE_DEDUPE_URL) a task
    its own transaction published meanwhile is not published twice.
    """
    settings = Settings()
    try:
        store = connect_store(datastore, settings=settings)
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc), param_hint="'--datastore'") from exc
    backend = connect_backend(url)
    try:
        report = sweep_once(
            store,
            backend,
            grace_seconds=settings.sweep_grace_seconds if grace is None else grace,
            lock_seconds=settings.sweep_lock_seconds,
        )
    finally:
        backend.close()
    if as_json:
        click.echo(json.dumps(report.as_dict()))
    else:
        click.echo(
            f"swept {store.url}: {report.found} staged past the grace period, {report.published}"
            f" published, {report.already} already published, {report.failed} failed"
            f" ({report.seconds:.2f} s)"
        )
    if report.failed:
        fail(
            f"{report.failed} staged task(s) not published, left staged for the next sweep:"
            f" {report.errors[0]}",
            EXIT_FAILED,
        )
