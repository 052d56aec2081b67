"""The states a registered task name can be in, and the legacy error each state means on re-add.

Every registry decides the same way (live blocks, an unexpired tombstone blocks, an expired one
does not), so that decision and its error messages live here once.
"""

from __future__ import annotations

import datetime as dt

from pullqueue.errors import Error, TaskAlreadyExistsError, TombstonedTaskError

LIVE = "live"
"""The name's task was claimed (and published): a re-add is TaskAlreadyExistsError."""
TOMBSTONE = "tombstone"
"""The name's task was deleted: a re-add is TombstonedTaskError until the tombstone expires."""


def blocking_error(
    queue: str, name: str, state: object, expire_at: float | None, now: float
) -> Error | None:
    """The error a re-add of `name` gets in this state, or None when the name is free again.

    An expired tombstone is free even while its record still exists: Firestore's TTL sweeper
    deletes expired documents lazily (up to a day late), so expiry is always checked here.
    """
    if state == LIVE:
        return TaskAlreadyExistsError(
            "a task with this name is already in the queue; choose another name, or treat the"
            " task as added if this is a retry",
            queue=queue,
            task=name,
        )
    if state == TOMBSTONE and (expire_at is None or expire_at > now):
        until = (
            dt.datetime.fromtimestamp(expire_at, tz=dt.timezone.utc).isoformat(timespec="seconds")
            if expire_at is not None
            else "further notice"
        )
        return TombstonedTaskError(
            f"this name belonged to a deleted task and is tombstoned until {until}; choose"
            " another name",
            queue=queue,
            task=name,
        )
    return None
