"""How long a failed task waits before it is handed out again: the legacy queue's retry parameters.

A handler failing through a downstream outage must not spend its delivery attempts in seconds
(Pub/Sub dead-letters after a fixed number of them), so a failed task is released with a lease of
this delay: min_backoff_seconds doubled max_doublings times, then growing linearly, up to
max_backoff_seconds, as queue.yaml's retry_parameters spaced attempts, with jitter.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from pullqueue import limits
from pullqueue.errors import Error, InvalidTaskRetryOptionsError

DEFAULT_MIN_BACKOFF_SECONDS = 1.0
DEFAULT_MAX_BACKOFF_SECONDS = 600.0
DEFAULT_MAX_DOUBLINGS = 16
_MAX_EXPONENT = 64
"""Beyond 2**64 any minimum backoff is past the one-week limit: the exponent stops there."""


@dataclass(frozen=True)
class RetryParameters:
    """The spacing of a failing task's attempts (queue.yaml `retry_parameters`).

    Interval before attempt n+1 (n = the task's retry_count, 1 after the first failure):
    min_backoff_seconds * 2**(n-1) for the first max_doublings + 1 intervals, then growing by
    min_backoff_seconds * 2**max_doublings per attempt, never above max_backoff_seconds. The delay
    used is the interval times a factor from 0.5 to 1 ("equal jitter"), so the tasks of one
    outage do not all come back in the same second.
    """

    min_backoff_seconds: float = DEFAULT_MIN_BACKOFF_SECONDS
    max_backoff_seconds: float = DEFAULT_MAX_BACKOFF_SECONDS
    max_doublings: int = DEFAULT_MAX_DOUBLINGS

    def __post_init__(self) -> None:
        for field_name in ("min_backoff_seconds", "max_backoff_seconds", "max_doublings"):
            value = getattr(self, field_name)
            if limits.bad_number(value) or not isinstance(value, int | float) or value < 0:
                raise InvalidTaskRetryOptionsError(
                    f"{field_name} must be a finite number >= 0, got {value!r}"
                )
        if not isinstance(self.max_doublings, int):
            raise InvalidTaskRetryOptionsError(
                f"max_doublings must be a whole number, got {self.max_doublings!r}"
            )
        if self.max_backoff_seconds < self.min_backoff_seconds:
            raise InvalidTaskRetryOptionsError(
                f"max_backoff_seconds {self.max_backoff_seconds} is below min_backoff_seconds"
                f" {self.min_backoff_seconds}"
            )
        if self.max_backoff_seconds > limits.MAX_LEASE_SECONDS:
            raise InvalidTaskRetryOptionsError(
                f"max_backoff_seconds {self.max_backoff_seconds} is over the longest lease,"
                f" {limits.MAX_LEASE_SECONDS} s"
            )

    @classmethod
    def given(
        cls,
        min_backoff_seconds: float | None = None,
        max_backoff_seconds: float | None = None,
        max_doublings: int | None = None,
    ) -> RetryParameters:
        """The parameters a queue.yaml gives, the others defaulted around them (a minimum above
        the default maximum raises the maximum to it, and the other way round)."""
        low = DEFAULT_MIN_BACKOFF_SECONDS if min_backoff_seconds is None else min_backoff_seconds
        high = DEFAULT_MAX_BACKOFF_SECONDS if max_backoff_seconds is None else max_backoff_seconds
        if min_backoff_seconds is None and max_backoff_seconds is not None:
            low = min(low, max_backoff_seconds)
        if max_backoff_seconds is None and min_backoff_seconds is not None:
            high = max(high, min_backoff_seconds)
        return cls(low, high, DEFAULT_MAX_DOUBLINGS if max_doublings is None else max_doublings)

    def interval(self, retry_count: int) -> float:
        """The legacy interval (seconds) after the attempt numbered retry_count failed."""
        n = max(retry_count, 1) - 1
        doublings = min(n, self.max_doublings, _MAX_EXPONENT)
        interval = self.min_backoff_seconds * 2.0**doublings
        if n > doublings and doublings == self.max_doublings:
            interval *= 1 + n - doublings
        return min(interval, self.max_backoff_seconds)

    def delay(self, retry_count: int, jitter: float | None = None) -> float:
        """The delay before the next attempt: the interval times `jitter`, a factor from 0.5 to 1
        drawn at random when not given ("equal jitter")."""
        factor = random.uniform(0.5, 1.0) if jitter is None else jitter
        return self.interval(retry_count) * factor

    def describe(self) -> str:
        """Short form for logs, e.g. `1s..600s x2^16`."""
        return (
            f"{self.min_backoff_seconds:g}s..{self.max_backoff_seconds:g}s x2^{self.max_doublings}"
        )


def queue_retry_parameters(backend: object, queue: str) -> RetryParameters:
    """The queue's retry parameters where its backend knows them (on Pub/Sub, the labels
    `pullqueue plan` writes from queue.yaml on its worker subscription), else the defaults."""
    known = getattr(backend, "retry_parameters", None)
    if known is None:
        return RetryParameters()
    try:
        found: RetryParameters | None = known(queue)
    except Error:
        return RetryParameters()  # the first lease reports what is wrong with the queue
    return found or RetryParameters()
