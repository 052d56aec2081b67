"""`pullqueue pause QUEUE` and `pullqueue resume QUEUE`: stop and restart a queue's leases.

While a queue is paused every lease of it answers as an empty queue, in every worker process,
and adds are still accepted; scripts use these around a deploy or an incident, as operators use
the console's buttons (docs/console.md, "Pause and resume").
"""

from __future__ import annotations

import json
import time

import click

from pullqueue import pause as pausing
from pullqueue.cli.base import EXIT_STATUS_HELP, Command, json_option, url_option
from pullqueue.cli.tasks import open_backend
from pullqueue.inspection import iso


def _run(queue_name: str, url: str | None, as_json: bool, paused: bool) -> None:
    backend = open_backend(queue_name, url)
    try:
        before = pausing.paused_since(backend, queue_name, fresh=True)
        if paused:
            pausing.pause(backend, queue_name)
        else:
            pausing.resume(backend, queue_name)
        since = pausing.paused_since(backend, queue_name)
        changed = (before is None) == paused
        if as_json:
            click.echo(
                json.dumps(
                    {
                        "backend": backend.url,
                        "queue": queue_name,
                        "paused": since is not None,
                        "paused_since": since,
                        "changed": changed,
                        "reach": pausing.reach(backend),
                    }
                )
            )
            return
        if paused and not changed:
            click.echo(
                f"queue {queue_name!r} on {backend.url} was already paused"
                f" (since {iso(before) if before else 'an unknown time'}); nothing changed"
            )
        elif paused:
            click.echo(
                f"paused queue {queue_name!r} on {backend.url}: leases answer as an empty queue,"
                f" adds are still accepted; {pausing.reach(backend)}"
            )
        elif not changed:
            click.echo(f"queue {queue_name!r} on {backend.url} was not paused; nothing changed")
        else:
            click.echo(
                f"resumed queue {queue_name!r} on {backend.url} (paused for"
                f" {max(time.time() - (before or time.time()), 0):,.0f} s): leases hand out"
                f" tasks again; {pausing.reach(backend)}"
            )
    finally:
        backend.close()


_EPILOG = """\b
Examples:
  pullqueue {name} emails --url pubsub://my-project
  pullqueue {name} emails --url pubsub://my-project --json

""" + EXIT_STATUS_HELP.replace(
    "1 failed (the message says what)",
    "1 failed (e.g. a backend that cannot pause)",
)


@click.command("pause", cls=Command, epilog=_EPILOG.format(name="pause"))
@click.argument("queue_name", metavar="QUEUE")
@url_option()
@json_option()
def pause(queue_name: str, url: str | None, as_json: bool) -> None:
    """Pause pull queue QUEUE: every lease of it answers as an empty queue until resumed.

    Adds are still accepted, and tasks already leased can still be deleted or have their lease
    changed. On Pub/Sub the pause is a marker topic QUEUE_TOPIC.paused (role roles/pubsub.editor
    to create or delete it); memory:// keeps it in the process. The legacy queue
    (cloudtasks://, appengine://) is paused in its own console, not here. Pausing a paused
    queue changes nothing and succeeds.
    """
    _run(queue_name, url, as_json, paused=True)


@click.command("resume", cls=Command, epilog=_EPILOG.format(name="resume"))
@click.argument("queue_name", metavar="QUEUE")
@url_option()
@json_option()
def resume(queue_name: str, url: str | None, as_json: bool) -> None:
    """Resume pull queue QUEUE after `pullqueue pause`: its leases hand out tasks again.

    Workers that backed off on empty leases ask again within their backoff (`pullqueue work`:
    at most its --max-backoff, 10 s by default). Resuming a queue that is not paused changes
    nothing and succeeds.
    """
    _run(queue_name, url, as_json, paused=False)
