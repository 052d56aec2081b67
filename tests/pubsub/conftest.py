"""Fixtures for the Pub/Sub adapter tests: the real emulator, a fresh project per test, backends.

Every test gets its own project id on the shared emulator, so topics and subscriptions never
leak between tests; backends made through `make_backend` are closed when the test ends.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials
from google.pubsub_v1 import PublisherClient, SubscriberClient

from pullqueue import Queue, Settings, Task
from pullqueue.adapters.pubsub import PubSubBackend
from pullqueue.adapters.pubsub.layout import shard_of
from tests.support.emulators import shared_emulator_host
from tests.support.realpubsub import Knobs, RealisticPubSub, start_as_on_the_service

MakeBackend = Callable[..., PubSubBackend]


def service_layer(emulator: str, rtt: float) -> Iterator[RealisticPubSub]:
    """A layer answering like the service (every knob on, `rtt` s round trips, seeded), for a
    module's `layer` fixture: `yield from service_layer(emulator, RTT)`."""
    with RealisticPubSub(emulator, Knobs.service(rtt), seed=7) as made:
        yield made


def backend_on(layer: RealisticPubSub, project: str) -> PubSubBackend:
    """A backend on `project` through `layer` (provisioned as on the emulator)."""
    with layer.as_emulator():
        return PubSubBackend(project, settings=Settings(), auto_create=True)


def backend_behind(layer: RealisticPubSub, prefix: str) -> Iterator[PubSubBackend]:
    """A backend on a fresh project through `layer`, closed after the test:
    `yield from backend_behind(layer, "svc")` in a `backend` fixture."""
    made = backend_on(layer, f"{prefix}-{uuid.uuid4().hex[:12]}")
    yield made
    made.close()


def backend_as_on_the_service(layer: RealisticPubSub, prefix: str) -> Iterator[PubSubBackend]:
    """backend_behind, taking empty pulls as held from the start (start_as_on_the_service), as a
    client of Pub/Sub itself does: `yield from backend_as_on_the_service(layer, "svc")`."""
    for made in backend_behind(layer, prefix):
        start_as_on_the_service(made.rpc)
        yield made


def add_in_order(queue: Queue, tags: list[str], per_tag: int) -> None:
    """per_tag tasks of each tag, the tags oldest first (a pause between tags, and one after)."""
    for tag in tags:
        queue.add([Task(b"w", tag=tag) for _ in range(per_tag)])
        time.sleep(0.02)
    time.sleep(0.3)


def tags_on_shard_of(tag: str, count: int) -> list[str]:
    """`count` tags other than `tag` that hash onto its shard (of the default 16)."""
    found = (f"t-{i}" for i in range(100_000) if shard_of(f"t-{i}") == shard_of(tag))
    return [next(found) for _ in range(count)]


@pytest.fixture(scope="session")
def emulator() -> str:
    """host:port of the Pub/Sub emulator (started once; the session fails if it cannot start)."""
    return shared_emulator_host("pubsub")


@pytest.fixture
def project(emulator: str) -> str:
    """A project id no other test uses."""
    return f"pq-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def make_backend(project: str, request: pytest.FixtureRequest) -> Iterator[MakeBackend]:
    """Backends on this test's project: make_backend(names=, auto_create=, **settings fields).

    Without a registry a named add is refused; a test marked `unchecked_names` (names are
    labels there, or the test is about duplicates) gets backends that accept duplicate names.
    """
    made: list[PubSubBackend] = []
    if request.node.get_closest_marker("unchecked_names") is not None:
        defaults: dict[str, Any] = {"accept_duplicate_names": True}
    else:
        defaults = {}

    def make(
        *, auto_create: bool = True, names: Any = None, project_id: str | None = None, **fields: Any
    ) -> PubSubBackend:
        backend = PubSubBackend(
            project_id or project,
            settings=Settings(**{**defaults, **fields}),
            auto_create=auto_create,
            names=names,
        )
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.close()


@pytest.fixture
def raw(emulator: str) -> Iterator[tuple[PublisherClient, SubscriberClient]]:
    """Plain Google clients on the emulator, to look at subscriptions behind the adapter's back."""
    publisher = PublisherClient(credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
    subscriber = SubscriberClient(credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
    yield publisher, subscriber
    publisher.transport.close()  # type: ignore[no-untyped-call]
    subscriber.transport.close()  # type: ignore[no-untyped-call]


def raw_pull(subscriber: SubscriberClient, path: str, max_messages: int = 1000) -> list[Any]:
    """Everything a subscription hands out right now (and left un-acked: it comes back)."""
    found: list[Any] = []
    while True:
        response = subscriber.pull(
            request={"subscription": path, "max_messages": max_messages}, timeout=1.0
        )
        if not response.received_messages:
            return found
        found.extend(response.received_messages)
