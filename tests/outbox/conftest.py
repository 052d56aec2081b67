"""Fixtures for the transactional outbox: the SDK's testbed datastore, and each queue to compare.

`side` runs a test on the SDK (its taskqueue stub: the oracle), on pullqueue over memory://, and
on pullqueue over the Pub/Sub emulator with a name registry; all on the testbed's datastore_v3.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from google.appengine.api import taskqueue as sdk_taskqueue
from google.appengine.datastore import datastore_stub_util
from google.appengine.ext import ndb, testbed

from pullqueue.adapters.base import Backend
from pullqueue.adapters.memory import MemoryBackend
from pullqueue.compat import taskqueue as compat
from pullqueue.config import Settings
from pullqueue.dedupe import MemoryNameRegistry
from tests.support.emulators import shared_emulator_host

QUEUE = "pulls"


class Order(ndb.Model):
    """The entity a transaction writes with its task."""

    number = ndb.IntegerProperty()


@dataclass
class Side:
    """One implementation: its taskqueue module, a queue named QUEUE, and its backend."""

    name: str
    tq: Any
    queue: Any
    backend: Backend | None = None

    def tasks(self) -> list[bytes]:
        """Payloads of every available task (leased to read them, then released)."""
        leased: list[Any] = []
        for _ in range(3):  # Pub/Sub may answer a first pull with part of what waits
            more = self.queue.lease_tasks(60, 1000)
            leased += more
            if not more and leased:
                break
        for task in leased:
            self.queue.modify_task_lease(task, 0)
        return sorted(task.payload for task in leased)


def pubsub_backend() -> Backend:
    """A Pub/Sub backend on the emulator, on a project of its own, with a name registry."""
    from pullqueue.adapters.pubsub import PubSubBackend

    # The testbed restores the environment it found: point this process at the emulator again.
    os.environ["PUBSUB_EMULATOR_HOST"] = shared_emulator_host("pubsub")
    return PubSubBackend(
        f"pq-{uuid.uuid4().hex[:12]}",
        settings=Settings(),
        auto_create=True,
        names=MemoryNameRegistry(tombstone_seconds=3600),
    )


@pytest.fixture
def bed() -> Iterator[testbed.Testbed]:
    """The SDK's testbed: datastore_v3 (consistent), memcache, and the taskqueue stub."""
    with tempfile.TemporaryDirectory(prefix="outbox-") as root:
        (Path(root) / "queue.yaml").write_text(f"queue:\n- name: {QUEUE}\n  mode: pull\n")
        bed = testbed.Testbed()
        bed.activate()
        try:
            bed.init_datastore_v3_stub(
                consistency_policy=datastore_stub_util.PseudoRandomHRConsistencyPolicy(
                    probability=1
                )
            )
            bed.init_memcache_stub()
            bed.init_taskqueue_stub(root_path=root)
            ndb.get_context().clear_cache()
            yield bed
        finally:
            bed.deactivate()


@pytest.fixture(params=["sdk", "memory", "pubsub"])
def side(request: pytest.FixtureRequest, bed: testbed.Testbed) -> Iterator[Side]:
    if request.param == "sdk":
        yield Side("sdk", sdk_taskqueue, sdk_taskqueue.Queue(QUEUE))
        return
    backend = MemoryBackend() if request.param == "memory" else pubsub_backend()
    try:
        yield Side(request.param, compat, compat.Queue(QUEUE, backend=backend), backend)
    finally:
        backend.close()


@pytest.fixture(params=["memory", "pubsub"])
def ours(request: pytest.FixtureRequest, bed: testbed.Testbed) -> Iterator[Side]:
    """pullqueue alone (the outbox's own behaviour, which the SDK has no counterpart of)."""
    backend = MemoryBackend() if request.param == "memory" else pubsub_backend()
    try:
        yield Side(request.param, compat, compat.Queue(QUEUE, backend=backend), backend)
    finally:
        backend.close()
