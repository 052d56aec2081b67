"""The console's actions: delete a task, purge a queue, redrive or purge its dead letters.

Each returns a sentence saying what it did, counted where the backend can count, so the page
reports the change itself rather than "done"; the routes call these only after the user typed
the queue's name, never under --read-only.
"""

from __future__ import annotations

import sys

from pullqueue.adapters.base import Backend
from pullqueue.console.listing import is_pubsub
from pullqueue.errors import Error
from pullqueue.queue import Queue


class ActionRefused(Error):
    """The action cannot be done here (the message says why); nothing was changed."""


def delete_task(
    backend: Backend,
    queue: str,
    name: str,
    *,
    subscription: str | None = None,
    message_id: str | None = None,
) -> str:
    """Delete one task by name (on Pub/Sub: the message a look showed, by its id)."""
    if is_pubsub(backend):
        if not subscription or not message_id:
            raise ActionRefused(
                "on Pub/Sub a task is deleted from a look: look at the tasks, then delete one",
                queue=queue,
                task=name,
            )
        found = _delete_seen(backend, queue, subscription, message_id)
    else:
        found = Queue(queue, backend).delete_by_name(name)[0].was_deleted
    if found:
        return f"deleted task {name!r} from queue {queue!r}"
    return (
        f"task {name!r} was not found in queue {queue!r}: it was done, deleted or leased"
        " meanwhile; nothing was deleted"
    )


def _delete_seen(backend: Backend, queue: str, subscription_id: str, message_id: str) -> bool:
    """Pull the subscription until the message shows, acknowledge it, give the rest back."""
    from pullqueue.adapters.pubsub import PubSubBackend
    from pullqueue.adapters.pubsub.peek import give_back, pull_all

    assert isinstance(backend, PubSubBackend)
    topology = backend.topology(queue)
    path = backend.rpc.subscription_path(subscription_id)
    if path not in topology.sources:
        raise ActionRefused(
            f"{subscription_id!r} is not a subscription of the queue; nothing was deleted",
            queue=queue,
        )
    kept, others = pull_all(backend, queue, path, 1, lambda d: d.message_id == message_id)
    try:
        if kept:
            backend.rpc.ack(path, [d.ack_id for d in kept], queue=queue)
    finally:
        give_back(backend, queue, topology, others)
    return bool(kept)


def purge_queue(backend: Backend, queue: str) -> str:
    """Remove every task of the queue; says how many where the backend counts them."""
    target = Queue(queue, backend)
    before = target.stats()
    target.purge()
    if before.whole_queue and not before.approximate:
        return f"purged queue {queue!r}: {before.tasks:,} tasks removed"
    if is_pubsub(backend):
        return (
            f"purged queue {queue!r}: every subscription was sought to now, so every task"
            " published before the purge is gone (Pub/Sub does not say how many)"
        )
    return f"purged queue {queue!r} (about {before.tasks:,} tasks; the backend estimates)"


def redrive_dead_letters(backend: Backend, queue: str, tag: str | None = None) -> str:
    """Put every dead letter back on the queue (only those of `tag` when given), names, tags
    and ETAs kept."""
    from pullqueue.adapters.pubsub import PubSubBackend
    from pullqueue.adapters.pubsub.deadletters import redrive

    if not isinstance(backend, PubSubBackend):
        raise ActionRefused(f"{backend.url} keeps no dead letters", queue=queue)
    done = redrive(backend, queue, tag=tag, limit=sys.maxsize)
    which = "" if tag is None else f" with tag {tag!r}"
    said = f"put {done.redriven:,} dead letters{which} back on queue {queue!r}"
    if done.resumed:
        said += f" ({done.resumed:,} more had been put back by an interrupted run)"
    if done.unresolved:
        said += f"; {done.unresolved:,} copies from an interrupted run wait for their dead letter"
    return said


def purge_dead_letters(backend: Backend, queue: str) -> str:
    """Delete every dead letter of the queue for good."""
    from pullqueue.adapters.pubsub import PubSubBackend
    from pullqueue.adapters.pubsub.deadletters import purge_dead_letters as purge

    if not isinstance(backend, PubSubBackend):
        raise ActionRefused(f"{backend.url} keeps no dead letters", queue=queue)
    purged = purge(backend, queue, tag=None, limit=sys.maxsize)
    return f"purged {purged:,} dead letters of queue {queue!r}"
