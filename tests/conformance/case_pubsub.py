"""The pubsub:// adapter in the conformance suite, on the real Pub/Sub emulator and real time.

Names are made unique by an in-memory name registry, as a service would with PULLQUEUE_DEDUPE_URL;
what Pub/Sub cannot express is listed in `differs`, documented in docs/pubsub.md and tested as
documented in tests/pubsub/test_differences.py.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from pullqueue import Settings
from pullqueue.adapters.pubsub import PubSubBackend
from pullqueue.dedupe.memory import MemoryNameRegistry
from tests.conformance.harness import BackendCase, Harness
from tests.support.emulators import shared_emulator_host


@contextmanager
def _open() -> Iterator[Harness]:
    shared_emulator_host("pubsub")
    backend = PubSubBackend(
        f"conf-{uuid.uuid4().hex[:12]}",
        settings=Settings(),
        auto_create=True,
        names=MemoryNameRegistry(),
    )
    try:
        yield Harness(backend=backend, advance=time.sleep, short_lease=1.0, prefix="ps")
    finally:
        backend.close()


CASE = BackendCase(
    name="pubsub",
    open=_open,
    differs={
        "exact_eta_order": "Pub/Sub hands messages out in no set order; a lease sorts what its"
        " pulls brought (oldest ETA, else publish time, first), not the whole queue",
        "oldest_tag": "lease_tasks_by_tag(tag=None) follows the oldest task among those in hand"
        " (held ones, else one pull round), which need not be the queue's oldest",
        "stats_exact": "Pub/Sub's API counts no backlog; stats() reports this process's leases"
        " and held tasks with approximate=True",
        "stats_leased": "leased counts this process's current leases only, not other workers'",
        "executed_last_minute": "Pub/Sub does not report it (None)",
    },
)
