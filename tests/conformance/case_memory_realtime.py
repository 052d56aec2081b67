"""The in-memory backend on the real clock: proves the suite holds where time cannot be faked.

`advance()` sleeps, as it must for Pub/Sub or the legacy queue, so a test that depends on a fake
clock fails here first; the short lease is kept small to keep the sleeps short.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from pullqueue.adapters.memory import MemoryBackend
from tests.conformance.harness import BackendCase, Harness


@contextmanager
def _open() -> Iterator[Harness]:
    backend = MemoryBackend()
    try:
        yield Harness(backend=backend, advance=time.sleep, short_lease=0.2, prefix="memrt")
    finally:
        backend.close()


CASE = BackendCase(name="memory-realtime", open=_open)
