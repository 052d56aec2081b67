"""Fixtures of the fault suite: the shared Pub/Sub emulator and a working directory per scenario."""

from __future__ import annotations

import pytest

from tests.support.emulators import shared_emulator_host


@pytest.fixture(scope="session")
def emulator() -> str:
    """host:port of the Pub/Sub emulator (started once; the session fails if it cannot start)."""
    return shared_emulator_host("pubsub")
