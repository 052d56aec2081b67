"""A one-thread pipeline: the drain leases the next batch while the last one is being written.

At most `depth` batches are in flight (leased and not yet settled); the writer handles them in
order, and an error it meets is raised in the caller's thread at the next call, so the lease
loop stops as soon as writing cannot go on.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Pipeline(Generic[T]):
    """Hands items to a writer thread that calls `handle(item)` on each, in order.

    After the writer failed, later items go to `abandon(item, error)` instead (to hand leases
    back). A BaseException that is not an Exception (a crash stand-in, KeyboardInterrupt) is
    re-raised as is, and nothing is abandoned: that is what a killed process does.
    """

    def __init__(
        self,
        handle: Callable[[T], None],
        abandon: Callable[[T, Exception | None], None],
        *,
        depth: int = 2,
    ) -> None:
        self._handle = handle
        self._abandon = abandon
        self._depth = depth
        self._slots = threading.Semaphore(depth)
        self._items: queue.SimpleQueue[T | None] = queue.SimpleQueue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="migrate-writer", daemon=True)
        self._thread.start()

    def reserve(self) -> None:
        """Wait for room for one more batch in flight; raise the writer's error, if any."""
        self._slots.acquire()
        if self._error is not None:
            self._slots.release()
            self.check()

    def unreserve(self) -> None:
        """Give back a reservation that got no batch (an empty lease)."""
        self._slots.release()

    def submit(self, item: T) -> None:
        """Hand a batch to the writer (after reserve())."""
        self._items.put(item)

    def flush(self) -> None:
        """Wait until every batch handed over is handled; raise the writer's error, if any."""
        for _ in range(self._depth):
            self._slots.acquire()
        for _ in range(self._depth):
            self._slots.release()
        self.check()

    def check(self) -> None:
        """Raise the error the writer met, if any."""
        if self._error is not None:
            raise self._error

    def close(self, *, wait: bool = True) -> None:
        """Stop the writer once it is done with what it has (and wait for that, if `wait`)."""
        self._items.put(None)
        if wait:
            self._thread.join()

    def _run(self) -> None:
        while (item := self._items.get()) is not None:
            try:
                if self._error is None:
                    self._handle(item)
                elif isinstance(self._error, Exception):
                    self._abandon(item, self._error)
            except BaseException as exc:
                if self._error is None:
                    self._error = exc
            finally:
                self._slots.release()
