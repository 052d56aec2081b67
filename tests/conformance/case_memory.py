"""The in-memory reference backend on a fake clock: the conformance suite's baseline case.

Time moves only when a test calls `advance()`, so lease expiries and ETAs are exact and the
whole suite runs without sleeping; the backend claims every feature.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pullqueue.adapters.memory import MemoryBackend
from tests.conformance.harness import BackendCase, FakeClock, Harness


@contextmanager
def _open() -> Iterator[Harness]:
    clock = FakeClock()
    backend = MemoryBackend(clock=clock)
    try:
        yield Harness(backend=backend, advance=clock.advance, short_lease=1.0, prefix="mem")
    finally:
        backend.close()


CASE = BackendCase(name="memory", open=_open)
