"""Fixtures for the bridge tests: a bridge over memory://, the Pub/Sub emulator or the emulator
behind the realistic layer, and Google's Python SDK (appengine-python-standard) pointed at it
through its own HTTP API stub."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from pullqueue import connect
from pullqueue.adapters.base import Backend
from pullqueue.adapters.memory import MemoryBackend
from pullqueue.bridge import BackgroundBridge
from tests.bridge.support import running_bridge, sdk_through_bridge
from tests.support.emulators import shared_emulator_host
from tests.support.realpubsub import shared_layer


@dataclass
class Served:
    """A bridge serving backend on port, and the SDK's taskqueue module posting to it."""

    backend: Backend
    server: BackgroundBridge
    taskqueue: Any

    @property
    def port(self) -> int:
        return self.server.port


KINDS = ["memory", "pubsub", "layer"]
"""memory://, the bare Pub/Sub emulator, and the emulator behind tests/support/realpubsub.py
answering as the service (10 ms round trips, partial pulls, filters, held empty pulls, cap)."""


def make_backend(kind: str) -> Backend:
    """memory://, or a Pub/Sub backend on a project of its own on the emulator (bare, or
    through the session's realistic layer)."""
    if kind == "memory":
        return MemoryBackend()
    host = shared_emulator_host("pubsub")
    url = f"pubsub://bridge-{uuid.uuid4().hex[:10]}"
    if kind == "layer":
        with shared_layer(host).as_emulator():
            return connect(url, auto_create=True)
    return connect(url, auto_create=True)


@pytest.fixture(params=KINDS)
def served(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    """The SDK, unchanged, talking to a bridge over each backend."""
    monkeypatch.setenv("PULLQUEUE_DEDUPE_URL", "memory://")
    backend = make_backend(request.param)
    try:
        with running_bridge(backend) as server, sdk_through_bridge(server.port):
            from google.appengine.api import taskqueue

            yield Served(backend, server, taskqueue)
    finally:
        backend.close()
