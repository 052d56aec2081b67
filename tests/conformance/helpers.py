"""Small helpers the conformance tests share: ticking past an ETA, ETAs in the past, draining.

They only use `Harness.advance` and the backend's own clock, so they hold on fake and real clocks.
"""

from __future__ import annotations

import datetime as dt

from pullqueue import Queue, Task
from tests.conformance.harness import Harness

TICK = 0.01
"""A moment: legacy availability is `eta < now`, so a task added now is leasable a tick later."""


def tick(h: Harness) -> None:
    """Let a tick pass so tasks added with an ETA of now become available."""
    h.advance(TICK)


def expire(h: Harness) -> None:
    """Let a lease of h.short_lease seconds run out, with a margin."""
    h.advance(h.short_lease * 1.5 + TICK)


def ago(h: Harness, seconds: float) -> dt.datetime:
    """An aware UTC datetime `seconds` before the backend's now."""
    return dt.datetime.fromtimestamp(h.backend.now() - seconds, tz=dt.timezone.utc)


def drain(queue: Queue, lease_seconds: float = 600) -> list[Task]:
    """Lease everything available (several calls of 1000) and return it."""
    leased: list[Task] = []
    while True:
        batch = queue.lease(lease_seconds, 1000)
        if not batch:
            return leased
        leased.extend(batch)


def names(tasks: list[Task]) -> list[str | None]:
    """The tasks' names, in order."""
    return [task.name for task in tasks]
