"""Exponential backoff with jitter, for empty leases and transient errors.

Legacy workers were told to back off when a lease came back empty or failed transiently; the
jitter keeps many workers of one queue from retrying in lockstep.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from pullqueue.limits import bad_number


class Backoff:
    """Delays that double from `initial` up to `maximum`, each drawn from [d/2, d] ("equal jitter").

    `next()` gives the delay before the next attempt and `reset()` starts over after a success.
    """

    def __init__(
        self,
        initial: float = 0.1,
        maximum: float = 10.0,
        multiplier: float = 2.0,
        *,
        uniform: Callable[[float, float], float] = random.uniform,
    ) -> None:
        if any(bad_number(v) for v in (initial, maximum, multiplier)) or not (
            0 < initial <= maximum and multiplier >= 1
        ):
            raise ValueError(
                f"backoff needs 0 < initial <= maximum and multiplier >= 1, got initial={initial},"
                f" maximum={maximum}, multiplier={multiplier}"
            )
        self.initial = initial
        self.maximum = maximum
        self.multiplier = multiplier
        self._uniform = uniform
        self._attempt = 0

    @property
    def attempt(self) -> int:
        """How many delays were handed out since the last reset."""
        return self._attempt

    def next(self) -> float:
        """The delay (seconds) before the next attempt; each call lengthens the following one."""
        ceiling = min(self.maximum, self.initial * self.multiplier**self._attempt)
        if ceiling < self.maximum:
            self._attempt += 1
        return self._uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        """Start again from the initial delay (call after a successful attempt)."""
        self._attempt = 0
