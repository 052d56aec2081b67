"""Turns at a queue's hand: plain leases side by side, every other server of the hand alone.

A lease by tag must see every task the process holds (none out in another thread's call), so
it serves the hand alone; plain leases only take any tasks, so several threads' run at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class Turns:
    """A lock with shared turns (plain leases) and exclusive ones (leases by tag, the
    keeper's settling). Exclusive turns are re-entrant for their thread, which may also take
    a shared turn inside one; a waiting exclusive turn holds back new shared ones, so leases by
    tag are not starved by a stream of plain leases."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._owner: int | None = None
        self._depth = 0
        self._shared: dict[int, int] = {}
        self._waiting = 0

    def acquire(self, *, shared: bool, timeout: float) -> bool:
        """Take a turn within `timeout` seconds; False when none came by then."""
        me = threading.get_ident()
        end = time.monotonic() + max(timeout, 0.0)
        with self._cond:
            if self._owner == me:
                self._depth += 1
                return True
            if shared:
                if me in self._shared:
                    self._shared[me] += 1
                    return True
                if not self._wait(lambda: self._owner is None and not self._waiting, end):
                    return False
                self._shared[me] = 1
                return True
            if me in self._shared:
                raise RuntimeError("a thread serving the hand in a shared turn asked for it alone")
            self._waiting += 1
            try:
                got = self._wait(lambda: self._owner is None and not self._shared, end)
            finally:
                self._waiting -= 1
                if not self._waiting:
                    self._cond.notify_all()
            if got:
                self._owner, self._depth = me, 1
            return got

    def release(self) -> None:
        """End the calling thread's innermost turn."""
        me = threading.get_ident()
        with self._cond:
            if self._owner == me:
                self._depth -= 1
                if not self._depth:
                    self._owner = None
                    self._cond.notify_all()
                return
            count = self._shared.get(me)
            if count is None:
                raise RuntimeError("release() of a turn this thread does not hold")
            if count > 1:
                self._shared[me] = count - 1
            else:
                del self._shared[me]
                self._cond.notify_all()

    def _wait(self, ready: Callable[[], bool], end: float) -> bool:
        while not ready():
            left = end - time.monotonic()
            if left <= 0:
                return False
            self._cond.wait(left)
        return True
