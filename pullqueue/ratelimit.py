"""A thread-safe request-rate limiter, shared per queue within a process.

The legacy service answered more than 10 lease requests per queue per second with nothing, so
workers (and adapters that call rate-limited APIs) space their calls out here instead.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class RateLimiter:
    """At most `rate` calls per second, `burst` of them back to back (the GCRA algorithm).

    With the default burst of 1 the calls are spaced 1/rate seconds apart, so no one-second
    window ever holds more than `rate` of them, however many threads share the limiter. A slot
    is taken when the caller is running again, not when it starts waiting, so a thread woken
    late cannot crowd the calls after it.
    """

    def __init__(
        self,
        rate: float,
        *,
        burst: int = 1,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        if isinstance(rate, bool) or not rate > 0:
            raise ValueError(f"rate must be above zero, got {rate!r}")
        if burst < 1:
            raise ValueError(f"burst must be at least 1, got {burst}")
        self.rate = float(rate)
        self.burst = burst
        self._interval = 1.0 / self.rate
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._next_free = float("-inf")

    def try_acquire(self) -> float:
        """Take a call slot if one is free now (return 0.0), else return the seconds to wait
        before trying again; nothing is claimed then, so a caller may give up meanwhile."""
        with self._lock:
            now = self._clock()
            theoretical = max(self._next_free, now)
            earliest = theoretical - (self.burst - 1) * self._interval
            if earliest > now:
                return earliest - now
            self._next_free = theoretical + self._interval
            return 0.0

    def acquire(self) -> None:
        """Block until a call may be made, and take its slot."""
        while (delay := self.try_acquire()) > 0:
            self._sleep(delay)


_shared: dict[tuple[str, float, int], RateLimiter] = {}
_shared_lock = threading.Lock()


def shared_limiter(key: str, rate: float, *, burst: int = 1) -> RateLimiter:
    """The process-wide limiter for `key` (e.g. backend URL and queue name) at this rate.

    Every worker thread and every `Worker` of one queue in a process gets the same limiter, so
    together they stay under the per-queue rate.
    """
    with _shared_lock:
        limiter = _shared.get((key, rate, burst))
        if limiter is None:
            limiter = _shared[(key, rate, burst)] = RateLimiter(rate, burst=burst)
        return limiter
