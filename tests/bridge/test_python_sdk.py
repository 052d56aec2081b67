"""Google's Python SDK, unchanged, through the bridge: on memory://, on the Pub/Sub emulator and
on the emulator behind the realistic layer (tests/support/realpubsub.py).

`google.appengine.api.taskqueue` with its HTTP API stub posts to the bridge as it posts to the
App Engine service bridge; the legacy docs' calls work and each failure is the SDK's own error.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from google.appengine.runtime import apiproxy_errors

from pullqueue.adapters.delegating import DelegatingBackend
from pullqueue.adapters.memory import MemoryBackend
from tests.bridge.conftest import Served
from tests.bridge.support import running_bridge, sdk_through_bridge, use_ticket_in_this_thread


def test_the_legacy_docs_calls(served: Served) -> None:
    tq = served.taskqueue
    q = tq.Queue("pull-queue")
    q.add(tq.Task(payload="hello world", method="PULL", tag="render"))
    q.add([tq.Task(payload=f"p{i}", method="PULL", tag="other") for i in range(3)])
    tasks = q.lease_tasks_by_tag(3600, 100, "render")
    assert [(t.payload, t.tag, t.retry_count) for t in tasks] == [(b"hello world", "render", 1)]
    oldest = q.lease_tasks_by_tag(3600, 100)
    assert sorted(t.payload for t in oldest) == [b"p0", b"p1", b"p2"]
    assert {t.tag for t in oldest} == {"other"}
    before = tasks[0].eta_posix
    q.modify_task_lease(tasks[0], 60)
    assert tasks[0].eta_posix < before
    assert all(t.was_deleted for t in q.delete_tasks(tasks + oldest))
    assert q.lease_tasks(60, 100) == []
    assert q.fetch_statistics().tasks == 0


def test_names_and_their_errors(served: Served) -> None:
    tq = served.taskqueue
    q = tq.Queue("named")
    q.add(tq.Task(payload="a", name="job-1", method="PULL"))
    with pytest.raises(tq.TaskAlreadyExistsError):
        q.add(tq.Task(payload="b", name="job-1", method="PULL"))
    [task] = q.lease_tasks(60, 10)
    assert task.name == "job-1" and task.payload == b"a"
    q.delete_tasks(task)
    assert task.was_deleted
    with pytest.raises(tq.TombstonedTaskError):
        q.add(tq.Task(payload="c", name="job-1", method="PULL"))
    again = q.delete_tasks_by_name(["job-1", "never-added"])
    assert [t.was_deleted for t in again] == [False, False]


def test_a_stale_lease_is_the_sdks_lease_expired_error(served: Served) -> None:
    tq = served.taskqueue
    q = tq.Queue("leases")
    q.add(tq.Task(payload="x", method="PULL"))
    [task] = q.lease_tasks(30, 1)
    stale = tq.Task(payload="x", name=task.name, method="PULL")
    stale._Task__eta_posix = task.eta_posix - 5
    with pytest.raises(tq.TaskLeaseExpiredError):
        q.modify_task_lease(stale, 30)
    q.modify_task_lease(task, 0)
    [again] = q.lease_tasks(30, 1)
    assert again.name == task.name and again.retry_count == 2
    q.delete_tasks(again)


def test_a_push_task_is_the_sdks_invalid_queue_mode_error(served: Served) -> None:
    tq = served.taskqueue
    q = tq.Queue("pull-queue")
    with pytest.raises(tq.InvalidQueueModeError):
        q.add(tq.Task(payload="x", url="/work"))
    assert q.lease_tasks(60, 10) == []


def test_async_calls_and_several_queues_at_once(served: Served) -> None:
    tq = served.taskqueue
    queues = [tq.Queue(f"queue-{i}") for i in range(3)]
    adds = [
        q.add_async([tq.Task(payload=f"{q.name}-{i}", method="PULL") for i in range(5)])
        for q in queues
    ]
    for rpc in adds:
        rpc.get_result()
    stats = tq.QueueStatistics.fetch(queues)
    assert [s.queue.name for s in stats] == [q.name for q in queues]
    if served.backend.url.startswith("memory"):
        assert [s.tasks for s in stats] == [5, 5, 5]
    leases = [q.lease_tasks_async(60, 100) for q in queues]
    got = [sorted(t.payload for t in rpc.get_result()) for rpc in leases]
    assert got == [sorted(f"{q.name}-{i}".encode() for i in range(5)) for q in queues]


def test_threads_lease_and_delete_every_task_once(served: Served) -> None:
    tq = served.taskqueue
    q = tq.Queue("threads")
    tags = [f"t{i}" for i in range(10)]
    for start in range(0, 400, 100):
        q.add(
            [
                tq.Task(payload=str(i), method="PULL", tag=tags[i % 10])
                for i in range(start, start + 100)
            ]
        )
    seen: Counter[bytes] = Counter()
    batches: list[set[str]] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def worker() -> None:
        # Until every task came and three leases in a row were empty since (a task handed out
        # twice would then be seen twice), or nothing came for 30 s (a task lost).
        use_ticket_in_this_thread()
        empty, last = 0, time.monotonic()
        try:
            while time.monotonic() - last < 30:
                tasks = tq.Queue("threads").lease_tasks_by_tag(60, 25)
                if not tasks:
                    empty += 1
                    with lock:
                        if empty >= 3 and sum(seen.values()) >= 400:
                            return
                    time.sleep(0.2)
                    continue
                empty, last = 0, time.monotonic()
                with lock:
                    seen.update(t.payload for t in tasks)
                    batches.append({t.tag for t in tasks})
                tq.Queue("threads").delete_tasks(tasks)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors
    assert seen == Counter(str(i).encode() for i in range(400))
    assert all(len(tags_of_batch) == 1 for tags_of_batch in batches)


class _SlowLease(DelegatingBackend):
    def lease(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(2)
        return self.inner.lease(*args, **kwargs)


def test_the_calls_deadline_is_honoured() -> None:
    backend = _SlowLease(MemoryBackend())
    with running_bridge(backend) as server, sdk_through_bridge(server.port):
        from google.appengine.api import taskqueue as tq

        rpc = tq.create_rpc(deadline=0.5)
        started = time.monotonic()
        with pytest.raises(apiproxy_errors.DeadlineExceededError):
            tq.Queue("slow").lease_tasks_async(60, 10, rpc=rpc).get_result()
        assert time.monotonic() - started < 1.5


def test_a_wrong_ticket_is_refused_and_changes_nothing() -> None:
    backend = MemoryBackend()
    with running_bridge(backend, ticket="the-right-one") as server:
        with sdk_through_bridge(server.port, ticket="the-right-one"):
            from google.appengine.api import taskqueue as tq

            tq.Queue("guarded").add(tq.Task(payload="kept", method="PULL"))
        with sdk_through_bridge(server.port, ticket="a-wrong-one"):
            with pytest.raises(tq.PermissionDeniedError):
                tq.Queue("guarded").purge()
            with pytest.raises(tq.PermissionDeniedError):
                tq.Queue("guarded").lease_tasks(60, 10)
            with pytest.raises(tq.PermissionDeniedError):
                tq.Queue("guarded").add(tq.Task(payload="smuggled", method="PULL"))
    assert [t.payload for t in backend.lease("guarded", 60, 10)] == [b"kept"]


def test_another_service_is_an_error_naming_it() -> None:
    with running_bridge(MemoryBackend()) as server, sdk_through_bridge(server.port) as stub:
        from google.appengine.api import apiproxy_stub_map
        from google.appengine.api.memcache import memcache_service_pb2

        apiproxy_stub_map.apiproxy.RegisterStub("memcache", stub)
        request = memcache_service_pb2.MemcacheGetRequest(key=[b"k"])
        response = memcache_service_pb2.MemcacheGetResponse()
        with pytest.raises(
            apiproxy_errors.CallNotFoundError, match="memcache service is not served here"
        ):
            apiproxy_stub_map.MakeSyncCall("memcache", "Get", request, response)


def test_other_services_are_forwarded_byte_for_byte_to_the_upstream() -> None:
    from aiohttp import web

    from pullqueue.bridge.proto.remote_api_pb2 import Response
    from pullqueue.bridge.server import BackgroundBridge

    received: list[tuple[bytes, dict[str, str]]] = []
    memcache_answer = b"\x0b\x12\x01k\x1a\x05value\x0c"  # MemcacheGetResponse: one item k=value

    async def upstream_rpc(request: web.Request) -> web.Response:
        received.append((await request.read(), dict(request.headers)))
        body = Response(response=memcache_answer).SerializeToString()
        return web.Response(body=body, content_type="application/octet-stream")

    class Upstream:
        """Served as a BackgroundBridge is: its app, and nothing to drain."""

        draining = False

        async def calls_finished(self, timeout: float, *, reading: bool = True) -> bool:
            return True

        def application(self) -> web.Application:
            app = web.Application()
            app.router.add_post("/rpc_http", upstream_rpc)
            return app

    upstream = BackgroundBridge(Upstream())  # type: ignore[arg-type]
    upstream.start()
    try:
        with (
            running_bridge(MemoryBackend(), upstream=f"127.0.0.1:{upstream.port}") as server,
            sdk_through_bridge(server.port) as stub,
        ):
            from google.appengine.api import apiproxy_stub_map
            from google.appengine.api.memcache import memcache_service_pb2
            from google.appengine.ext.remote_api import remote_api_bytes_pb2

            apiproxy_stub_map.apiproxy.RegisterStub("memcache", stub)
            request = memcache_service_pb2.MemcacheGetRequest(key=[b"k"])
            response = memcache_service_pb2.MemcacheGetResponse()
            apiproxy_stub_map.MakeSyncCall("memcache", "Get", request, response)
            from google.appengine.api import taskqueue as tq

            tq.Queue("still-served").add(tq.Task(payload="x", method="PULL"))
    finally:
        upstream.stop()
    assert [(item.key, item.value) for item in response.item] == [(b"k", b"value")]
    [(body, headers)] = received
    sent = remote_api_bytes_pb2.Request.FromString(body)
    assert (sent.service_name, sent.method) == ("memcache", "Get")
    assert sent.request == request.SerializeToString()
    assert body == sent.SerializeToString()
    assert headers["X-Google-RPC-Service-Deadline"] and headers["Content-Type"] == (
        "application/octet-stream"
    )
