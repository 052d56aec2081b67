"""Fixtures for the task-name registry tests: a movable clock and each registry kind to test.

The Firestore registry runs against the real Firestore emulator (started once per session);
every test gets its own collection so tests never see each other's names.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterator

import pytest

from pullqueue.dedupe import connect_registry
from pullqueue.dedupe.base import NameRegistry
from tests.support.emulators import shared_emulator_host

TOMBSTONE_SECONDS = 60.0
_queues = itertools.count(1)


class FakeClock:
    """A clock tests move by hand (POSIX seconds)."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture(scope="session")
def firestore_host() -> str:
    """host:port of the session's Firestore emulator (FIRESTORE_EMULATOR_HOST is set)."""
    return shared_emulator_host("firestore")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def queue_name() -> str:
    return f"dedupe-{next(_queues)}"


@pytest.fixture
def firestore_url(firestore_host: str) -> str:
    """A registry URL on the emulator with a collection of its own."""
    return f"firestore://pullqueue-test?collection=names-{uuid.uuid4().hex[:12]}"


RegistryFactory = Callable[..., NameRegistry]


@pytest.fixture(params=["memory", "firestore"])
def make_registry(request: pytest.FixtureRequest, clock: FakeClock) -> Iterator[RegistryFactory]:
    """Builds registries of one kind sharing one store (one Firestore collection)."""
    url = "memory://"
    if request.param == "firestore":
        url = request.getfixturevalue("firestore_url")
    made: list[NameRegistry] = []
    shared: list[NameRegistry] = []

    def make() -> NameRegistry:
        """Another handle on the same names: a new Firestore client, or the one memory object."""
        if request.param == "memory" and shared:
            return shared[0]
        registry = connect_registry(url, tombstone_seconds=TOMBSTONE_SECONDS, clock=clock)
        made.append(registry)
        if not shared:
            shared.append(registry)
        return registry

    yield make
    for registry in made:
        registry.close()


@pytest.fixture
def registry(make_registry: RegistryFactory) -> NameRegistry:
    return make_registry()
