"""The pubsub:// adapter in the conformance suite through the realistic layer: the emulator
answering like the service (round trips, partial pulls, filters, held empty pulls, the 600 s cap).

Acks are not lost here: a lost ack brings a deleted task back, which Pub/Sub's at-least-once
delivery allows and the conformance suite, written to the legacy contract, does not
(tests/pubsub/test_service.py covers lost acks). Round trips are PULLQUEUE_TEST_RTT_MS (10 ms).

In the default run (about 3.5 minutes); PULLQUEUE_TEST_SERVICE=0 leaves it out (docs/pubsub.md,
"On the service").
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from pullqueue import Settings
from pullqueue.adapters.pubsub import PubSubBackend
from pullqueue.dedupe.memory import MemoryNameRegistry
from tests.conformance.case_pubsub import CASE as PLAIN
from tests.conformance.harness import BackendCase, Harness
from tests.support.emulators import shared_emulator_host
from tests.support.realpubsub import shared_layer


@contextmanager
def _open() -> Iterator[Harness]:
    layer = shared_layer(shared_emulator_host("pubsub"))
    with layer.as_emulator():
        backend = PubSubBackend(
            f"svc-{uuid.uuid4().hex[:12]}",
            settings=Settings(),
            auto_create=True,
            names=MemoryNameRegistry(),
        )
    try:
        yield Harness(backend=backend, advance=time.sleep, short_lease=2.0, prefix="svc")
    finally:
        backend.close()


CASE = (
    BackendCase(name="pubsub-service", open=_open, differs=dict(PLAIN.differs))
    if os.environ.get("PULLQUEUE_TEST_SERVICE", "1") != "0"
    else None
)
