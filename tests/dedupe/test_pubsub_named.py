"""Named tasks through `pullqueue.Queue` on `pubsub://` with the Firestore registry, end to end.

Both emulators are real: these are the legacy guarantees a producer notices (one task per name
however many producers race, tombstones after delete, nothing published when the registry is
down) and the failure paths around publishing.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import firestore
from google.pubsub_v1 import PublisherClient

import pullqueue
from pullqueue import (
    InvalidTaskNameError,
    NotProvisionedError,
    Queue,
    Settings,
    Task,
    TaskAlreadyExistsError,
    TombstonedTaskError,
    TransientError,
)
from pullqueue.adapters.pubsub import PubSubBackend
from pullqueue.compat import taskqueue
from pullqueue.dedupe import MemoryNameRegistry
from pullqueue.dedupe.firestore import FirestoreNameRegistry
from tests.support.emulators import free_port, shared_emulator_host


@pytest.fixture(scope="module")
def emulators() -> None:
    shared_emulator_host("pubsub")
    shared_emulator_host("firestore")


@pytest.fixture
def collection() -> str:
    return f"names-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def project(emulators: None) -> str:
    return f"pq-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def connect(project: str, collection: str) -> Iterator[Any]:
    """connect(**settings) -> a pubsub:// backend whose registry is this test's collection."""
    made: list[pullqueue.Backend] = []

    def make(**fields: Any) -> pullqueue.Backend:
        fields.setdefault("dedupe_url", f"firestore://pullqueue-test?collection={collection}")
        backend = pullqueue.connect(
            f"pubsub://{project}", settings=Settings(**fields), auto_create=True
        )
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.close()


def _lease_everything(queue: Queue, quiet: float = 2.0) -> list[Task]:
    """Lease until the queue has given nothing for `quiet` seconds."""
    leased: list[Task] = []
    last = time.monotonic()
    while time.monotonic() - last < quiet:
        got = queue.lease(300, 1000, deadline=1.0)
        if got:
            leased += got
            last = time.monotonic()
    return leased


def _registry_docs(collection: str) -> list[dict[str, Any]]:
    client = firestore.Client(project="pullqueue-test")
    docs = [d.to_dict() or {} for d in client.collection(collection).stream()]
    client.close()  # type: ignore[no-untyped-call]
    return docs


def test_eight_producers_adding_the_same_1000_names_make_1000_tasks(connect: Any) -> None:
    producers = [connect() for _ in range(8)]
    Queue("orders", producers[0]).stats()  # provision the topic once, before the race
    names = [f"order-{i}" for i in range(1000)]
    start = threading.Barrier(len(producers))
    added: list[list[str]] = [[] for _ in producers]
    refused: list[int] = [0] * len(producers)
    failures: list[BaseException] = []

    def produce(index: int) -> None:
        queue = Queue("orders", producers[index])
        try:
            start.wait()
            for offset in range(0, len(names), 100):
                tasks = [Task(b"payload", name=n) for n in names[offset : offset + 100]]
                try:
                    queue.add(tasks)
                except TaskAlreadyExistsError:
                    refused[index] += 1
                added[index] += [t.name for t in tasks if t.was_added and t.name]
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(len(producers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
    all_added = [name for names_added in added for name in names_added]
    assert sorted(all_added) == sorted(names)
    assert sum(refused) > 0

    leased = _lease_everything(Queue("orders", connect()))
    assert len(leased) == 1000
    assert sorted(t.name for t in leased if t.name) == sorted(names)


def test_deleted_name_is_tombstoned_then_reusable_after_the_ttl(connect: Any) -> None:
    queue = Queue("mail", connect(tombstone_seconds=2))
    queue.add(Task(b"first", name="welcome-42"))
    with pytest.raises(TaskAlreadyExistsError) as exists:
        queue.add(Task(b"again", name="welcome-42"))
    assert exists.value.queue == "mail" and exists.value.task == "welcome-42"

    (task,) = _lease_everything(queue, quiet=1.0)
    queue.delete(task)
    with pytest.raises(TombstonedTaskError) as tombstoned:
        queue.add(Task(b"again", name="welcome-42"))
    assert tombstoned.value.task == "welcome-42"

    time.sleep(2.2)
    queue.add(Task(b"second", name="welcome-42"))
    (again,) = _lease_everything(queue, quiet=1.0)
    assert (again.name, again.payload) == ("welcome-42", b"second")


def test_bulk_add_adds_the_free_names_and_raises_for_the_taken(connect: Any) -> None:
    queue = Queue("bulk", connect())
    queue.add(Task(b"x", name="taken"))
    tasks = [Task(b"a", name="free-a"), Task(b"b", name="taken"), Task(b"c", name="free-c")]
    with pytest.raises(TaskAlreadyExistsError):
        queue.add(tasks)
    assert [t.was_added for t in tasks] == [True, False, True]
    assert sorted(t.name or "" for t in _lease_everything(queue, quiet=1.0)) == [
        "free-a",
        "free-c",
        "taken",
    ]


def test_compat_layer_raises_the_legacy_errors(connect: Any) -> None:
    queue = taskqueue.Queue("legacy", backend=connect())
    queue.add(taskqueue.Task(payload=b"x", name="job-1", method="PULL"))
    with pytest.raises(taskqueue.TaskAlreadyExistsError):
        queue.add(taskqueue.Task(payload=b"x", name="job-1", method="PULL"))
    leased: list[taskqueue.Task] = []
    deadline = time.monotonic() + 10
    while not leased and time.monotonic() < deadline:
        leased = queue.lease_tasks(60, 10)
    queue.delete_tasks(leased)
    with pytest.raises(taskqueue.TombstonedTaskError):
        queue.add(taskqueue.Task(payload=b"x", name="job-1", method="PULL"))


def test_purged_names_are_tombstoned(connect: Any) -> None:
    queue = Queue("purged", connect())
    queue.add(Task(b"x", name="gone-with-purge"))
    queue.purge()
    with pytest.raises(TombstonedTaskError):
        queue.add(Task(b"x", name="gone-with-purge"))
    queue.add(Task(b"x", name="after-purge"))


def test_unreachable_registry_is_transient_and_publishes_nothing(
    connect: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    observer = Queue("fragile", connect(dedupe_url=None))
    observer.stats()
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", f"127.0.0.1:{free_port()}")
    queue = Queue("fragile", connect(dedupe_url="firestore://pullqueue-test?timeout=1.5"))
    with pytest.raises(TransientError) as caught:
        queue.add(Task(b"x", name="must-not-leak"))
    assert caught.value.queue == "fragile" and caught.value.task == "must-not-leak"
    assert "registry" in str(caught.value) and "retry" in str(caught.value)
    assert _lease_everything(observer, quiet=1.5) == []


@pytest.mark.parametrize("name", ["has space", "x" * 501, "slash/ed"])
def test_malformed_or_long_names_fail_before_anything_is_claimed(
    connect: Any, collection: str, name: str
) -> None:
    queue = Queue("strict", connect())
    with pytest.raises(InvalidTaskNameError) as caught:
        queue.add(Task(b"x", name=name))
    assert caught.value.queue == "strict" and caught.value.task == name
    assert _registry_docs(collection) == []
    assert _lease_everything(queue, quiet=1.0) == []


def test_failed_publish_releases_the_claim(connect: Any, project: str) -> None:
    backend = connect()
    queue = Queue("flaky", backend)
    queue.stats()
    publisher = PublisherClient(credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
    topic = publisher.topic_path(project, "flaky")
    publisher.delete_topic(request={"topic": topic})
    with pytest.raises(NotProvisionedError):
        queue.add(Task(b"x", name="retry-me"))

    publisher.create_topic(request={"name": topic})
    publisher.transport.close()  # type: ignore[no-untyped-call]
    queue.add(Task(b"x", name="retry-me"))
    with pytest.raises(TaskAlreadyExistsError):
        queue.add(Task(b"x", name="retry-me"))


def test_environment_configures_the_registry(
    project: str, collection: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "PULLQUEUE_DEDUPE_URL", f"firestore://pullqueue-test?collection={collection}"
    )
    backend = pullqueue.connect(f"pubsub://{project}", auto_create=True)
    assert isinstance(backend, PubSubBackend)
    assert isinstance(backend.names, FirestoreNameRegistry)
    try:
        Queue("env", backend).add(Task(b"x", name="once"))
        with pytest.raises(TaskAlreadyExistsError):
            Queue("env", backend).add(Task(b"x", name="once"))
    finally:
        backend.close()
    docs = _registry_docs(collection)
    assert [(d["queue"], d["name"], d["state"]) for d in docs] == [("env", "once", "live")]


def test_unnamed_tasks_are_added_without_asking_the_registry(connect: Any, collection: str) -> None:
    queue = Queue("anonymous", connect())
    tasks = queue.add([Task(b"a"), Task(b"b", name="named")])
    assert all(t.name for t in tasks)
    assert [d["name"] for d in _registry_docs(collection)] == ["named"]
    assert len(_lease_everything(queue, quiet=1.0)) == 2


def test_connect_option_overrides_the_environment(
    project: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PULLQUEUE_DEDUPE_URL", "firestore://pullqueue-test")
    with_memory = pullqueue.connect(f"pubsub://{project}", dedupe_url="memory://")
    without = pullqueue.connect(f"pubsub://{project}", dedupe_url=None)
    try:
        assert isinstance(with_memory, PubSubBackend) and isinstance(without, PubSubBackend)
        assert isinstance(with_memory.names, MemoryNameRegistry)
        assert without.names is None
    finally:
        with_memory.close()
        without.close()
