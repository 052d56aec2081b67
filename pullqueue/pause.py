"""Pausing a queue: while paused every lease answers as an empty queue, adds are still accepted.

The state lives with the backend (memory:// in its object, Pub/Sub in a marker topic beside the
queue topic), so every worker process sees it and a console restart keeps it; backends without
a pause of their own refuse with PauseNotSupportedError (docs/console.md, "Pause and resume").
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from pullqueue.adapters.base import Backend
from pullqueue.errors import Error


class PauseNotSupportedError(Error):
    """The backend cannot pause a queue (the message says why and what to use instead)."""


@runtime_checkable
class PausingBackend(Protocol):
    """A backend that keeps a pause per queue, read by its own lease."""

    def set_paused(self, queue: str, paused: bool) -> None:
        """Pause (True) or resume (False) the queue for every process using the backend."""
        ...

    def paused_since(self, queue: str, *, fresh: bool = False) -> float | None:
        """When the queue was paused (POSIX seconds), None while it runs. `fresh` reads the
        stored state now instead of the process's cached copy."""
        ...


def _pausing(backend: Backend, queue: str) -> PausingBackend:
    """backend (or the backend a wrapper delegates to) when it can pause, else the error."""
    current: object = backend
    while not isinstance(current, PausingBackend):
        inner = getattr(current, "inner", None)
        if inner is None:
            raise PauseNotSupportedError(
                f"{backend.url} cannot pause a queue: pause the legacy queue in the Cloud"
                " console (or `gcloud tasks queues pause`), or pause it on its Pub/Sub"
                " destination once migrated",
                queue=queue,
            )
        current = inner
    return current


def pause(backend: Backend, queue: str) -> None:
    """Pause the queue: leases answer [] in every process within the backend's bound."""
    _pausing(backend, queue).set_paused(queue, True)


def resume(backend: Backend, queue: str) -> None:
    """Resume the queue: leases hand out tasks again."""
    _pausing(backend, queue).set_paused(queue, False)


def paused_since(backend: Backend, queue: str, *, fresh: bool = False) -> float | None:
    """When the queue was paused, None while it runs (PauseNotSupportedError if it cannot be)."""
    return _pausing(backend, queue).paused_since(queue, fresh=fresh)


def can_pause(backend: Backend) -> bool:
    """Whether the backend (or the one it wraps) keeps pauses."""
    current: object = backend
    while current is not None:
        if isinstance(current, PausingBackend):
            return True
        current = getattr(current, "inner", None)
    return False


def reach(backend: Backend) -> str:
    """How soon every process using the backend sees a change of pause, in words."""
    settings = getattr(backend, "settings", None)
    check = getattr(settings, "pubsub_pause_check", None)
    if backend.url.startswith("pubsub://") and check is not None:
        return (
            f"every worker process sees it within {check:g} s (PULLQUEUE_PUBSUB_PAUSE_CHECK)"
            " plus one lease call in flight"
        )
    return "every lease through this backend sees it at once"
