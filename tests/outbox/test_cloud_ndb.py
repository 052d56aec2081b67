"""Transactional adds in google-cloud-ndb transactions, on the Datastore emulator (Firestore in
Datastore mode, started by the tests), through pullqueue.compat on memory:// and Pub/Sub.

Apps that left App Engine keep `add(..., transactional=True)` inside `ndb.transaction` of
google-cloud-ndb: the tasks are put in the transaction, published after the commit, never after a
rollback, and swept from Cloud Datastore (`datastore://PROJECT`) after a crash.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from google.cloud import datastore, ndb

from pullqueue.adapters.memory import MemoryBackend
from pullqueue.compat import taskqueue as compat
from pullqueue.outbox import KIND, sweep
from pullqueue.outbox.cloud import CloudDatastoreStore
from tests.outbox.conftest import pubsub_backend
from tests.outbox.test_compat import FailingAdds
from tests.support.emulators import shared_emulator_host


class Order(ndb.Model):
    number = ndb.IntegerProperty()


@pytest.fixture
def project() -> Iterator[str]:
    os.environ["DATASTORE_EMULATOR_HOST"] = shared_emulator_host("datastore")
    yield f"pq-{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=["memory", "pubsub"])
def queue(request: pytest.FixtureRequest, project: str) -> Iterator[Any]:
    backend = MemoryBackend() if request.param == "memory" else pubsub_backend()
    client = ndb.Client(project=project)
    try:
        with client.context(cache_policy=False, global_cache_policy=False):
            yield compat.Queue("pulls", backend=backend)
    finally:
        backend.close()


def staged(project: str) -> list[Any]:
    return list(datastore.Client(project=project).query(kind=KIND).fetch())


def payloads(queue: Any) -> list[bytes]:
    leased: list[Any] = []
    for _ in range(3):
        more = queue.lease_tasks(60, 100)
        leased += more
        if not more and leased:
            break
    return sorted(task.payload for task in leased)


def test_a_commit_publishes_and_a_rollback_does_not(queue: Any, project: str) -> None:
    def place(number: int, fail: bool) -> Any:
        task = queue.add(compat.Task(payload=b"%d" % number, method="PULL"), transactional=True)
        Order(id=number, number=number).put()
        if fail:
            raise RuntimeError("roll back")
        return task

    task = ndb.transaction(lambda: place(1, False))
    with pytest.raises(RuntimeError):
        ndb.transaction(lambda: place(2, True))
    assert task.name.startswith("tx-") and task.was_enqueued
    assert Order.get_by_id(1) is not None and Order.get_by_id(2) is None
    assert payloads(queue) == [b"1"]
    assert staged(project) == []


def test_the_legacy_limits_hold_at_the_call(queue: Any) -> None:
    def six() -> None:
        queue.add(
            [compat.Task(payload=b"%d" % i, method="PULL") for i in range(3)], transactional=True
        )
        queue.add([compat.Task(payload=b"x", method="PULL") for _ in range(3)], transactional=True)

    with pytest.raises(compat.DatastoreError):
        ndb.transaction(six)

    def named() -> None:
        queue.add(compat.Task(payload=b"a", name="n", method="PULL"), transactional=True)

    with pytest.raises(compat.InvalidTaskNameError):
        ndb.transaction(named)
    assert payloads(queue) == []


def test_a_publish_lost_after_the_commit_is_swept_from_cloud_datastore(
    queue: Any, project: str
) -> None:
    failing = FailingAdds(queue.backend)

    def place() -> None:
        compat.Queue("pulls", backend=failing).add(
            compat.Task(payload=b"late", method="PULL", tag="t"), transactional=True
        )
        Order(id=3, number=3).put()

    ndb.transaction(place)
    assert len(staged(project)) == 1 and payloads(queue) == []
    store = CloudDatastoreStore(f"datastore://{project}")
    assert sweep(store, queue.backend, grace_seconds=60).found == 0
    report = sweep(store, queue.backend, grace_seconds=0)
    assert (report.found, report.published) == (1, 1)
    [task] = queue.lease_tasks(60, 10)
    assert (task.payload, task.tag) == (b"late", "t")
    assert staged(project) == []


def test_pullqueue_sweep_reads_cloud_datastore(project: str) -> None:
    client = ndb.Client(project=project)
    failing = FailingAdds(MemoryBackend())
    with client.context(cache_policy=False, global_cache_policy=False):
        ndb.transaction(
            lambda: compat.Queue("pulls", backend=failing).add(
                compat.Task(payload=b"cli", method="PULL"), transactional=True
            )
        )
    env = {
        **os.environ,
        "PUBSUB_EMULATOR_HOST": shared_emulator_host("pubsub"),
        "PULLQUEUE_AUTO_CREATE": "1",
        "PULLQUEUE_DEDUPE_URL": "memory://",
    }
    done = subprocess.run(
        [sys.executable, "-c", "from pullqueue.cli import main; main()", "sweep", "--url",
         f"pubsub://{project}", "--datastore", f"datastore://{project}", "--grace", "0", "--json"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert '"published": 1' in done.stdout
    assert staged(project) == []
