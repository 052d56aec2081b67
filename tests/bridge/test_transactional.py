"""Transactional adds through the bridge, by Google's unmodified Python SDK (ndb and db).

The upstream is real Google code: the SDK's own datastore stub served over /rpc_http
(tests/support/datastore_server.py). The app's datastore_v3 calls go through the bridge to it, as
an app's calls go to the App Engine API; the bridge stages the tasks in the app's transaction and
publishes them when the upstream commits it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from google.appengine.api import apiproxy_stub_map
from google.appengine.api import taskqueue as sdk_taskqueue
from google.appengine.ext import db, ndb
from google.appengine.runtime import default_api_stub

from pullqueue.adapters.memory import MemoryBackend
from pullqueue.errors import TransientError
from pullqueue.outbox import sweep
from pullqueue.outbox.appengine import AppEngineStore
from pullqueue.outbox.layout import KIND
from tests.bridge.support import running_bridge, sdk_through_bridge
from tests.support.datastore_server import APP_ID, DatastoreServer, ids_of


class Order(ndb.Model):
    number = ndb.IntegerProperty()


class Flaky(MemoryBackend):
    """memory://, whose adds fail while `failing` (a publish lost after the commit)."""

    failing = False
    slow = 0.0
    """Seconds each add takes (a Pub/Sub or registry slower than the app's call)."""

    def add(self, queue: str, tasks: Any) -> Any:
        if self.failing:
            raise TransientError("publish lost")
        time.sleep(self.slow)
        return super().add(queue, tasks)


@pytest.fixture
def app() -> Iterator[tuple[Flaky, DatastoreServer]]:
    """The SDK with every service (taskqueue and datastore_v3) at a bridge whose upstream is the
    datastore server; ndb without caches, as each call must reach the datastore."""
    server = DatastoreServer().start()
    backend = Flaky()
    saved = os.environ.get("APPLICATION_ID")
    os.environ["APPLICATION_ID"] = APP_ID
    try:
        with (
            running_bridge(backend, upstream=server.host) as bridge,
            sdk_through_bridge(bridge.port) as stub,
        ):
            apiproxy_stub_map.apiproxy.RegisterStub("datastore_v3", stub)
            context = ndb.get_context()
            context.set_cache_policy(False)
            context.set_memcache_policy(False)
            yield backend, server
    finally:
        ndb.tasklets._state.clear_all_pending()
        ndb.tasklets.set_context(None)
        if saved is None:
            os.environ.pop("APPLICATION_ID", None)
        else:
            os.environ["APPLICATION_ID"] = saved
        server.stop()


def leased(backend: MemoryBackend) -> list[bytes]:
    return sorted(task.payload for task in backend.lease("pulls", 60, 100))


def staged(server: DatastoreServer) -> int:
    from google.appengine.datastore import datastore_pb

    result = datastore_pb.QueryResult()
    query = datastore_pb.Query(app=APP_ID, kind=KIND, keys_only=True)
    server.stub.MakeSyncCall("datastore_v3", "RunQuery", query, result)
    return len(result.result)


def test_ndb_adds_commit_with_the_transaction_and_roll_back_with_it(
    app: tuple[Flaky, DatastoreServer],
) -> None:
    backend, server = app
    queue = sdk_taskqueue.Queue("pulls")

    def place(number: int, fail: bool) -> Any:
        # The add before the entity: the group is known only at the commit (not cross-group).
        task = queue.add(
            sdk_taskqueue.Task(payload=b"%d" % number, method="PULL"), transactional=True
        )
        Order(id=number, number=number).put()
        if fail:
            raise db.Rollback()
        return task

    task = ndb.transaction(lambda: place(1, False))
    ndb.transaction(lambda: place(2, True))
    assert task.name.startswith("tx-") and task.was_enqueued
    assert ids_of(server, "Order") == {1}
    assert leased(backend) == [b"1"]
    assert staged(server) == 0


def test_a_group_read_before_the_add_is_the_staging_group(
    app: tuple[Flaky, DatastoreServer],
) -> None:
    """ndb reads the entity (the call carrying the handle comes before any add), then adds and
    writes it back: the staging must join that group (not cross-group)."""
    backend, server = app
    parent = Order(id=9, number=9).put()

    def place() -> None:
        order = parent.get()
        sdk_taskqueue.Queue("pulls").add(
            sdk_taskqueue.Task(payload=b"read first", method="PULL"), transactional=True
        )
        order.number = 10
        order.put()

    ndb.transaction(place)
    assert parent.get().number == 10
    assert leased(backend) == [b"read first"] and staged(server) == 0


def test_db_adds_in_an_existing_entity_group_and_the_five_task_limit(
    app: tuple[Flaky, DatastoreServer],
) -> None:
    backend, _server = app
    queue = sdk_taskqueue.Queue("pulls")
    parent = Order(id=7, number=7).put()

    def place() -> str:
        assert parent.get() is not None
        queue.add(
            [sdk_taskqueue.Task(payload=b"%d" % i, method="PULL") for i in range(3)],
            transactional=True,
        )
        try:
            queue.add(
                [sdk_taskqueue.Task(payload=b"x", method="PULL") for _ in range(3)],
                transactional=True,
            )
        except sdk_taskqueue.Error as exc:
            Order(parent=parent, number=1).put()
            return type(exc).__name__
        return "no error"

    assert db.run_in_transaction(place) in ("DatastoreError", "JointException", "BadRequestError")
    assert leased(backend) == [b"0", b"1", b"2"]


def test_a_publish_lost_after_the_commit_is_swept(app: tuple[Flaky, DatastoreServer]) -> None:
    backend, server = app
    backend.failing = True

    def place() -> None:
        sdk_taskqueue.Queue("pulls").add(
            sdk_taskqueue.Task(payload=b"late", method="PULL"), transactional=True
        )
        Order(id=3, number=3).put()

    ndb.transaction(place)
    assert ids_of(server, "Order") == {3} and staged(server) == 1
    backend.failing = False
    default_api_stub.DefaultApiStub.SetUseRequestSecurityTicketForThread(True)
    report = sweep(
        AppEngineStore(f"appengine://{server.host}?app={APP_ID}"), backend, grace_seconds=0
    )
    assert report.published == 1
    assert leased(backend) == [b"late"] and staged(server) == 0


def test_a_publish_outlasting_the_commits_deadline_goes_on_after_the_commit_is_answered(
    app: tuple[Flaky, DatastoreServer],
) -> None:
    """The Commit has committed: the app gets its answer within the call's deadline (not a
    DeadlineExceededError it would retry the transaction on), and the publish finishes after."""
    backend, server = app
    backend.slow = 4.0

    def place() -> None:
        sdk_taskqueue.Queue("pulls").add(
            sdk_taskqueue.Task(payload=b"slow", method="PULL"), transactional=True
        )
        Order(id=4, number=4).put()

    began = time.monotonic()
    ndb.transaction(place, deadline=1.0)
    assert time.monotonic() - began < 3.0
    assert ids_of(server, "Order") == {4}
    ends = time.monotonic() + 15
    while staged(server) and time.monotonic() < ends:
        time.sleep(0.1)
    assert staged(server) == 0, "published and its staging deleted once the add returned"
    assert leased(backend) == [b"slow"]


def test_a_transaction_begun_before_the_bridge_restarted_is_run_again_not_committed_taskless(
    app: tuple[Flaky, DatastoreServer],
) -> None:
    """The adds of a transaction are kept by the bridge until its Commit: a Commit reaching a
    bridge that did not see the transaction begin (the first was restarted) must not commit the
    entity without its task. It is refused as contention, and ndb runs the transaction again."""
    backend, server = app
    attempts = 0
    with running_bridge(backend, upstream=server.host) as restarted:

        def place() -> None:
            nonlocal attempts
            attempts += 1
            sdk_taskqueue.Queue("pulls").add(
                sdk_taskqueue.Task(payload=b"once", method="PULL"), transactional=True
            )
            # The app's calls reach another bridge from here on (as after a restart).
            os.environ["API_PORT"] = str(restarted.port)
            Order(id=5, number=5).put()

        ndb.transaction(place, retries=3)
    assert attempts == 2
    assert ids_of(server, "Order") == {5}
    assert leased(backend) == [b"once"] and staged(server) == 0


def test_without_upstream_a_transactional_add_is_refused_saying_to_give_it() -> None:
    backend = MemoryBackend()
    with running_bridge(backend) as bridge, sdk_through_bridge(bridge.port):
        request = sdk_taskqueue.taskqueue_service_bytes_pb2.TaskQueueBulkAddRequest()
        add = request.add_request.add()
        add.queue_name, add.task_name, add.body, add.eta_usec = b"pulls", b"", b"x", 0
        add.mode = 1
        add.transaction.handle, add.transaction.app = 1, APP_ID
        response = sdk_taskqueue.taskqueue_service_bytes_pb2.TaskQueueBulkAddResponse()
        with pytest.raises(Exception, match="--upstream"):
            apiproxy_stub_map.MakeSyncCall("taskqueue", "BulkAdd", request, response)
    assert backend.lease("pulls", 60, 10) == []


def test_a_bridge_process_sweeps_the_outbox_of_the_app_it_serves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`pullqueue bridge --upstream` learns the app from its first transactional add and sweeps
    its outbox through the upstream: a task a crash left staged is published."""
    import subprocess
    import sys
    import time
    import uuid

    from google.appengine.datastore import datastore_pb

    from pullqueue.adapters.pubsub import PubSubBackend
    from pullqueue.listen import free_port
    from pullqueue.outbox.appengine import entity_pb
    from pullqueue.outbox.layout import StagedTask, new_task_name
    from tests.support.emulators import shared_emulator_host

    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", shared_emulator_host("pubsub"))
    monkeypatch.setenv("APPLICATION_ID", APP_ID)
    server = DatastoreServer().start()
    project = f"pq-{uuid.uuid4().hex[:12]}"
    left = StagedTask("pulls", new_task_name(), b"left", None, None, 0)
    put = datastore_pb.PutRequest()
    put.entity.add().CopyFrom(entity_pb(left, APP_ID, None))
    server.stub.MakeSyncCall("datastore_v3", "Put", put, datastore_pb.PutResponse())
    port = free_port()
    env = {
        **os.environ,
        "PULLQUEUE_AUTO_CREATE": "1",
        "PULLQUEUE_DEDUPE_URL": "memory://",
        "PULLQUEUE_SWEEP_GRACE_SECONDS": "0.5",
    }
    bridge = subprocess.Popen(
        [sys.executable, "-c", "from pullqueue.cli import main; main()", "bridge", "--url",
         f"pubsub://{project}", "--listen", f"127.0.0.1:{port}", "--upstream", server.host,
         "--sweep-period", "0.5"],
        env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    backend = PubSubBackend(project, auto_create=True, accept_duplicate_names=True)
    try:
        assert bridge.stderr is not None
        assert "serving taskqueue" in bridge.stderr.readline()
        with sdk_through_bridge(port) as stub:
            apiproxy_stub_map.apiproxy.RegisterStub("datastore_v3", stub)
            context = ndb.get_context()
            context.set_cache_policy(False)
            context.set_memcache_policy(False)

            def place() -> None:
                sdk_taskqueue.Queue("pulls").add(
                    sdk_taskqueue.Task(payload=b"now", method="PULL"), transactional=True
                )
                Order(id=5, number=5).put()

            ndb.transaction(place)
        got: list[bytes] = []
        ends = time.monotonic() + 30
        while sorted(got) != [b"left", b"now"] and time.monotonic() < ends:
            tasks = backend.lease("pulls", 60, 10)
            got += [task.payload for task in tasks]
            if tasks:
                backend.delete("pulls", tasks)
        assert sorted(got) == [b"left", b"now"]
        assert staged(server) == 0
    finally:
        ndb.tasklets._state.clear_all_pending()
        ndb.tasklets.set_context(None)
        bridge.terminate()
        bridge.wait(30)
        backend.close()
        server.stop()
