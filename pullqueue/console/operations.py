"""The console's queue-wide actions beyond delete and purge: pause and resume a queue.

Each takes the posted form and returns the sentence the result page shows; the console's route
calls them only after the CSRF check and the typed queue name, never under --read-only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from pullqueue import pause as pausing
from pullqueue.adapters.base import Backend
from pullqueue.inspection import iso

Operation = Callable[[Backend, str, Mapping[str, str]], str]


def pause_queue(backend: Backend, queue: str, form: Mapping[str, str]) -> str:
    """Pause the queue; says whether it already was, and how soon workers see it."""
    before = pausing.paused_since(backend, queue, fresh=True)
    if before is not None:
        return f"queue {queue!r} was already paused (since {iso(before)}); nothing changed"
    pausing.pause(backend, queue)
    return (
        f"paused queue {queue!r}: leases answer as an empty queue, adds are still accepted;"
        f" {pausing.reach(backend)}"
    )


def resume_queue(backend: Backend, queue: str, form: Mapping[str, str]) -> str:
    """Resume the queue; says whether it was paused."""
    before = pausing.paused_since(backend, queue, fresh=True)
    if before is None:
        return f"queue {queue!r} was not paused; nothing changed"
    pausing.resume(backend, queue)
    return f"resumed queue {queue!r}: leases hand out tasks again; {pausing.reach(backend)}"


OPERATIONS: dict[str, Operation] = {
    "pause": pause_queue,
    "resume": resume_queue,
}
"""Action name (the last part of the POST's path) -> what it does."""
