"""The task and queue-statistics values every backend speaks in.

A `Task` is what a producer adds and a worker leases; once leased it carries its retry count,
its lease expiry (the legacy ETA) and an opaque lease token only the backend that issued it reads.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from pullqueue.errors import InvalidEtaError, InvalidTagError, InvalidTaskError
from pullqueue.limits import bad_number

USEC = 1_000_000


def to_usec(seconds: float) -> int:
    """Seconds since the epoch to whole microseconds, as the legacy service keeps ETAs."""
    return round(seconds * USEC)


def eta_to_posix(eta: dt.datetime) -> float:
    """A datetime to POSIX seconds; a naive datetime is UTC, as in the legacy API."""
    if eta.tzinfo is None:
        eta = eta.replace(tzinfo=dt.timezone.utc)
    return eta.timestamp()


class Task:
    """A pull task: payload bytes, an optional unique name, an optional tag and an ETA.

    `eta` (a datetime) and `countdown` (seconds from when the task is added) are exclusive;
    with neither the task is available at once. Fields set by the queue: `name` (chosen by the
    backend when not given), `eta_posix`, `retry_count`, `lease_token`, `queue_name`,
    `was_added`, `was_deleted`. `retry_limit` (legacy `task_retry_limit`) caps how many times
    the task may be leased; a backend that honours it deletes the task instead of leasing it again.
    `_legacy_options` (never set here) holds what the legacy-shaped `compat.taskqueue.Task` keeps
    beside these fields (its TaskRetryOptions): the slot lives here so a backend's task can be
    re-labelled as the legacy class in place.
    """

    __slots__ = (
        "_countdown",
        "_eta",
        "_legacy_options",
        "eta_posix",
        "lease_token",
        "name",
        "payload",
        "queue_name",
        "retry_count",
        "retry_limit",
        "tag",
        "was_added",
        "was_deleted",
    )

    def __init__(
        self,
        payload: bytes | str = b"",
        *,
        name: str | None = None,
        tag: str | bytes | None = None,
        eta: dt.datetime | None = None,
        countdown: float | None = None,
        retry_limit: int | None = None,
    ) -> None:
        if type(payload) is not bytes:
            if isinstance(payload, str):
                payload = payload.encode("utf-8")
            elif isinstance(payload, bytes | bytearray):
                payload = bytes(payload)
            else:
                raise InvalidTaskError(
                    f"payload must be bytes or str, not {type(payload).__name__}", task=name
                )
        if eta is not None or countdown is not None:
            if eta is not None and countdown is not None:
                raise InvalidTaskError("give eta or countdown, not both", task=name)
            if eta is not None and not isinstance(eta, dt.datetime):
                raise InvalidEtaError(
                    f"eta must be a datetime, not {type(eta).__name__}", task=name
                )
            if countdown is not None and (
                bad_number(countdown) or not isinstance(countdown, int | float)
            ):
                raise InvalidEtaError(
                    f"countdown must be a finite number of seconds, not {countdown!r}", task=name
                )
        if tag is not None and type(tag) is not str:
            if not isinstance(tag, bytes | bytearray | str):
                raise InvalidTagError(f"tag must be str or bytes, not {type(tag).__name__}")
            try:
                tag = bytes(tag).decode("utf-8") if not isinstance(tag, str) else str(tag)
            except UnicodeDecodeError as exc:
                raise InvalidTagError("tag bytes must be UTF-8", task=name) from exc
        self.payload: bytes = payload
        self.name: str | None = name
        self.tag: str | None = tag
        self._eta = eta
        self._countdown = countdown
        self.eta_posix: float | None = eta_to_posix(eta) if eta is not None else None
        if retry_limit is not None and (
            bad_number(retry_limit) or not isinstance(retry_limit, int) or retry_limit < 0
        ):
            raise InvalidTaskError("retry_limit must be a whole number >= 0", task=name)
        self.retry_count: int = 0
        self.retry_limit: int | None = retry_limit
        self.lease_token: str | None = None
        self.queue_name: str | None = None
        self.was_added: bool = False
        self.was_deleted: bool = False

    @classmethod
    def restore(
        cls,
        *,
        payload: bytes,
        name: str,
        tag: str | None,
        eta_posix: float,
        retry_count: int = 0,
        lease_token: str | None = None,
        queue_name: str | None = None,
    ) -> Task:
        """Rebuild a task as a backend returns it from a lease or a listing.

        The values come from the backend, already valid, so the constructor's checks are skipped:
        leasing a thousand tasks should cost a thousand attribute copies, not a thousand checks.
        """
        task = cls.__new__(cls)
        task.payload = payload
        task.name = name
        task.tag = tag
        task._eta = None
        task._countdown = None
        task.eta_posix = eta_posix
        task.retry_count = retry_count
        task.retry_limit = None
        task.lease_token = lease_token
        task.queue_name = queue_name
        task.was_added = True
        task.was_deleted = False
        return task

    def resolve_eta(self, now: float) -> float:
        """The ETA in POSIX seconds, resolving a countdown against the backend's clock."""
        if self.eta_posix is None:
            self.eta_posix = now + (self._countdown or 0.0)
        return self.eta_posix

    @property
    def eta(self) -> dt.datetime | None:
        """The ETA (or, for a leased task, the lease expiry) as an aware UTC datetime."""
        if self.eta_posix is None:
            return None
        return dt.datetime.fromtimestamp(self.eta_posix, tz=dt.timezone.utc)

    @property
    def lease_expires(self) -> float | None:
        """When the current lease ends (POSIX seconds); None when the task is not leased."""
        return self.eta_posix if self.lease_token is not None else None

    @property
    def size(self) -> int:
        """Bytes counted against the pull-task size limit (payload and tag)."""
        return len(self.payload) + (len(self.tag.encode("utf-8")) if self.tag else 0)

    def __repr__(self) -> str:
        return (
            f"Task(name={self.name!r}, tag={self.tag!r}, eta_posix={self.eta_posix!r}, "
            f"retry_count={self.retry_count}, payload={len(self.payload)} bytes)"
        )


@dataclass(frozen=True)
class QueueStats:
    """What a backend can tell about a queue; `approximate` says the counts are estimates."""

    queue: str
    tasks: int
    oldest_eta: float | None = None
    leased: int | None = None
    executed_last_minute: int | None = None
    executed_last_hour: int | None = None
    """Tasks leased in the last hour, where the backend keeps it (memory://); None elsewhere."""
    approximate: bool = False
    whole_queue: bool = True
    """False when the counts cover only what this process holds (Pub/Sub, whose API counts no
    backlog): for the queue as a whole they are unknown, not zero."""
