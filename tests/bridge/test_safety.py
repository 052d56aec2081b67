"""The bridge under hostile input, with a ticket, and stopped by SIGTERM in a real process.

1,000 malformed, truncated, oversized, wrong-typed, wrongly ticketed and invalid calls each get an
error answer and change nothing; the bridge keeps serving and a normal worker then runs exact.
Payloads never reach the logs. SIGTERM finishes the calls in flight, gives back the leases the
process holds and exits 0.
"""

from __future__ import annotations

import http.client
import logging
import math
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from typing import Any

import pytest

from pullqueue import connect
from pullqueue.adapters.memory import MemoryBackend
from pullqueue.bridge.app import MAX_BODY_BYTES
from pullqueue.bridge.proto import taskqueue_service_pb2 as pb
from pullqueue.bridge.proto.remote_api_pb2 import Request, Response
from pullqueue.listen import free_port
from tests.bridge.support import (
    TICKET,
    running_bridge,
    sdk_through_bridge,
    use_ticket_in_this_thread,
)
from tests.support.emulators import shared_emulator_host

PULLQUEUE = [sys.executable, "-c", "from pullqueue.cli import main; main()"]
"""The `pullqueue` command, run as its console script runs it."""
SECRET = b"SECRET-PAYLOAD-7f3a"
"""In every payload sent: it must never appear in a log line."""


def _envelope(
    method: str, request: bytes, ticket: str = TICKET, service: str = "taskqueue"
) -> bytes:
    return bytes(
        Request(
            service_name=service, method=method, request=request, request_id=ticket
        ).SerializeToString()
    )


def _add(queue: str = "hostile", **fields: Any) -> bytes:
    bulk = pb.TaskQueueBulkAddRequest()
    add = bulk.add_request.add()
    add.queue_name = queue.encode()
    add.task_name = fields.pop("task_name", b"")
    add.eta_usec = fields.pop("eta_usec", int(time.time() * 1e6))
    add.body = fields.pop("body", SECRET)
    add.mode = fields.pop("mode", pb.TaskQueueMode.PULL)
    for key, value in fields.items():
        setattr(add, key, value)
    return bytes(bulk.SerializeToString())


def _lease(queue: str = "hostile", **fields: Any) -> bytes:
    ask = pb.TaskQueueQueryAndOwnTasksRequest(
        queue_name=queue.encode(),
        lease_seconds=fields.pop("lease_seconds", 60.0),
        max_tasks=fields.pop("max_tasks", 10),
        **fields,
    )
    return bytes(ask.SerializeToString())


def _hostile(rng: random.Random) -> tuple[str, bytes, dict[str, str]]:
    """(http method, body, headers) of one hostile request."""
    octet = {"Content-Type": "application/octet-stream"}
    valid = _envelope("BulkAdd", _add())
    kind = rng.randrange(16)
    if kind == 0:
        return "POST", rng.randbytes(rng.randrange(1, 2000)), octet
    if kind == 1:
        return "POST", valid[: rng.randrange(1, len(valid))], octet
    if kind == 2:
        return "POST", valid, {"Content-Type": rng.choice(["text/plain", "application/json", ""])}
    if kind == 3:
        return "GET", b"", {}
    if kind == 4:
        return "POST", _envelope("BulkAdd", _add(), ticket="wrong-ticket"), octet
    if kind == 5:
        return "POST", _envelope("PurgeQueue", b"", ticket=""), octet
    if kind == 6:
        return "POST", _envelope("BulkAdd", rng.randbytes(50)), octet
    if kind == 7:
        return "POST", _envelope("BulkAdd", _add(mode=pb.TaskQueueMode.PUSH)), octet
    if kind == 8:
        return "POST", _envelope("BulkAdd", _add(eta_usec=-5)), octet
    if kind == 9:
        return "POST", _envelope("BulkAdd", _add(tag=b"\xff\xfe")), octet
    if kind == 10:
        return "POST", _envelope("QueryAndOwnTasks", _lease(lease_seconds=math.nan)), octet
    if kind == 11:
        return "POST", _envelope("QueryAndOwnTasks", _lease(max_tasks=10**12)), octet
    if kind == 12:
        return "POST", _envelope("FetchQueues", b""), octet
    if kind == 13:
        return "POST", _envelope("Get", b"\x0a\x01k", service="memcache"), octet
    if kind == 14:
        # service_name (field 2) not UTF-8, then method, request and request_id.
        return "POST", b"\x12\x02\xff\xfe\x1a\x01x\x22\x00\x2a\x01t", octet
    headers = {**octet, "X-Google-RPC-Service-Deadline": rng.choice(["nan", "-1", "abc", "inf"])}
    return "POST", _envelope("BulkAdd", _add(queue="bad queue name!")), headers


def _post(port: int, method: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(method, "/rpc_http", body=body, headers=headers)
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


def _cut_mid_body(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(
            b"POST /rpc_http HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
            b"Content-Length: 5000\r\n\r\n" + SECRET
        )


def _drain_with_threads(
    tq: Any, queue: str, threads: int = 4
) -> tuple[Counter[bytes], list[set[str]]]:
    seen: Counter[bytes] = Counter()
    batches: list[set[str]] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def worker() -> None:
        use_ticket_in_this_thread()
        empty = 0
        try:
            while empty < 3:
                tasks = tq.Queue(queue).lease_tasks_by_tag(60, 50)
                if not tasks:
                    empty += 1
                    time.sleep(0.1)
                    continue
                empty = 0
                with lock:
                    seen.update(t.payload for t in tasks)
                    batches.append({t.tag for t in tasks})
                tq.Queue(queue).delete_tasks(tasks)
        except BaseException as exc:
            errors.append(exc)

    running = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join(120)
    assert not errors
    return seen, batches


def test_1000_hostile_requests_then_a_worker_runs_exact(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    rng = random.Random(21)
    backend = MemoryBackend()
    with running_bridge(backend, ticket=TICKET) as server:
        answers: Counter[str] = Counter()
        for _ in range(1000):
            method, body, headers = _hostile(rng)
            status, content = _post(server.port, method, body, headers)
            if status == 200:
                answer = Response.FromString(content)
                assert (
                    answer.HasField("rpc_error")
                    or answer.HasField("application_error")
                    or (
                        pb.TaskQueueBulkAddResponse.FromString(answer.response).taskresult[0].result
                        != 0
                    )
                )
                answers["error answer"] += 1
            else:
                assert status in (400, 405, 413, 415), status
                answers[f"http {status}"] += 1
        for _ in range(3):
            _cut_mid_body(server.port)
            status, _ = _post(
                server.port,
                "POST",
                b"\0" * (MAX_BODY_BYTES + 1),
                {"Content-Type": "application/octet-stream"},
            )
            assert status == 413
        assert backend.stats("hostile").tasks == 0, "a refused call changed the queue"
        assert answers["error answer"] > 500 and answers["http 415"] and answers["http 405"]

        with sdk_through_bridge(server.port):
            from google.appengine.api import taskqueue as tq

            queue = tq.Queue("after")
            for start in range(0, 500, 100):
                queue.add(
                    [
                        tq.Task(payload=SECRET + str(i).encode(), method="PULL", tag=f"t{i % 10}")
                        for i in range(start, start + 100)
                    ]
                )
            seen, batches = _drain_with_threads(tq, "after")
        with urllib_health(server.port) as health:
            assert health == (200, b"ok\n")
    assert seen == Counter(SECRET + str(i).encode() for i in range(500))
    assert all(len(tags) == 1 for tags in batches)
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert SECRET.decode() not in logged


class urllib_health:
    """GET /healthz as a probe would."""

    def __init__(self, port: int) -> None:
        self.port = port

    def __enter__(self) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        connection.request("GET", "/healthz")
        answer = connection.getresponse()
        result = (answer.status, answer.read())
        connection.close()
        return result

    def __exit__(self, *exc: Any) -> None:
        return None


def _bridge_process(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*PULLQUEUE, "bridge", *args],
        env={**os.environ, **(env or {})},
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _wait_ready(process: subprocess.Popen[str]) -> str:
    assert process.stderr is not None
    line = process.stderr.readline()
    assert "serving taskqueue" in line, line
    return line


def test_a_non_loopback_listen_needs_a_ticket(tmp_path: Any) -> None:
    refused = subprocess.run(
        [*PULLQUEUE, "bridge", "--listen", "0.0.0.0:0"],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "PULLQUEUE_BRIDGE_TICKET"},
    )
    assert refused.returncode == 2
    assert "ticket" in refused.stderr and "Traceback" not in refused.stderr
    ticket = tmp_path / "ticket"
    ticket.write_text("s3cret\n")
    port = free_port()
    process = _bridge_process("--listen", f"0.0.0.0:{port}", "--ticket-file", str(ticket))
    try:
        _wait_ready(process)
        status, content = _post(
            port,
            "POST",
            _envelope("BulkAdd", _add(), ticket="guess"),
            {"Content-Type": "application/octet-stream"},
        )
        assert status == 200
        assert (
            Response.FromString(content).application_error.code
            == pb.TaskQueueServiceError.PERMISSION_DENIED
        )
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    port = free_port()
    process = _bridge_process(
        "--listen", f"0.0.0.0:{port}", env={"PULLQUEUE_BRIDGE_TICKET": "from-the-env"}
    )
    try:
        _wait_ready(process)
        status, content = _post(
            port,
            "POST",
            _envelope("FetchQueueStats", b"\x12\x01q", ticket="from-the-env"),
            {"Content-Type": "application/octet-stream"},
        )
        assert not Response.FromString(content).HasField("application_error")
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0


def _answered(response: http.client.HTTPResponse) -> Response:
    assert response.status == 200, response.status
    answer = Response.FromString(response.read())
    assert not answer.HasField("application_error"), answer
    assert not answer.HasField("rpc_error"), answer
    return answer


def test_sigterm_answers_calls_begun_and_closes_kept_alive_connections() -> None:
    """A call begun before the signal is answered even if its body comes after it; a call sent
    on a kept-alive connection while the bridge drains is answered and closes its connection;
    an idle connection does not hold the exit."""
    port = free_port()
    process = _bridge_process("--listen", f"127.0.0.1:{port}")
    headers = {"Content-Type": "application/octet-stream"}
    kept = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    sockets: list[socket.socket] = []
    try:
        _wait_ready(process)
        slow, idle = (socket.create_connection(("127.0.0.1", port), timeout=30) for _ in "ab")
        sockets += [slow, idle]
        kept.request("POST", "/rpc_http", body=_envelope("BulkAdd", _add("kept")), headers=headers)
        first = kept.getresponse()
        _answered(first)
        assert not first.will_close
        body = _envelope("BulkAdd", _add("slow"))
        slow.sendall(
            b"POST /rpc_http HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body[:10]
        )
        time.sleep(0.5)
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        kept.request("POST", "/rpc_http", body=_envelope("BulkAdd", _add("kept")), headers=headers)
        second = kept.getresponse()
        _answered(second)
        assert second.will_close
        time.sleep(0.5)
        slow.sendall(body[10:])
        _answered(_read_response(slow))
        code = process.wait(30)
        took = time.monotonic() - signalled
        assert process.stderr is not None
        said = process.stderr.read()
        assert code == 0, said[-2000:]
        assert "stopped" in said
        # Not held for aiohttp's shutdown timeout by the idle connection (load allows 10 s).
        assert took < 10, took
    finally:
        for sock in sockets:
            sock.close()
        kept.close()
        if process.poll() is None:
            process.kill()


def _read_response(sock: socket.socket) -> http.client.HTTPResponse:
    response = http.client.HTTPResponse(sock)
    response.begin()
    return response


def test_sigterm_finishes_calls_in_flight_gives_leases_back_and_exits_0(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shared_emulator_host("pubsub")
    project = f"bridge-term-{uuid.uuid4().hex[:8]}"
    port = free_port()
    process = _bridge_process(
        "--url",
        f"pubsub://{project}",
        "--listen",
        f"127.0.0.1:{port}",
        env={"PULLQUEUE_AUTO_CREATE": "1"},
    )
    outcomes: Counter[str] = Counter()
    try:
        _wait_ready(process)
        with sdk_through_bridge(port):
            from google.appengine.api import taskqueue as tq

            queue = tq.Queue("held")
            queue.add([tq.Task(payload=f"held-{i}", method="PULL") for i in range(50)])
            held: list[Any] = []
            deadline = time.monotonic() + 30
            while len(held) < 50 and time.monotonic() < deadline:
                held += queue.lease_tasks(3600, 50)
            assert len(held) == 50
            stop = threading.Event()

            def adder() -> None:
                use_ticket_in_this_thread()
                while not stop.is_set():
                    try:
                        tq.Queue("busy").add(
                            [tq.Task(payload="x", method="PULL") for _ in range(20)]
                        )
                        outcomes["added"] += 1
                    except tq.Error as exc:
                        outcomes[f"taskqueue error {type(exc).__name__}"] += 1
                    except Exception as exc:
                        # After the listening socket closed: the connection is refused.
                        outcomes[f"refused {type(exc).__name__}"] += 1
                        time.sleep(0.05)

            adders = [threading.Thread(target=adder, daemon=True) for _ in range(4)]
            for thread in adders:
                thread.start()
            # Calls are in flight when the signal comes: wait for the adders' first answers
            # (under load the first call of a thread can take longer than a fixed pause).
            started = time.monotonic() + 30
            while outcomes["added"] < len(adders) and time.monotonic() < started:
                time.sleep(0.05)
            time.sleep(0.5)
            process.send_signal(signal.SIGTERM)
            try:
                code = process.wait(60)
            finally:
                stop.set()
                for thread in adders:
                    thread.join(30)
            assert process.stderr is not None
            said = process.stderr.read()
            assert code == 0, said[-2000:]
    finally:
        if process.poll() is None:
            process.kill()
    assert outcomes["added"] > 0
    assert not [k for k in outcomes if k.startswith("taskqueue error")], outcomes
    assert "stopped" in said
    # The leases the bridge held (3,600 s) were given back: another process leases them now,
    # not once Pub/Sub's ack deadline on them runs out (about a minute later; 40 s allows for load).
    backend = connect(f"pubsub://{project}", auto_create=True)
    try:
        again: list[Any] = []
        deadline = time.monotonic() + 40
        while len(again) < 50 and time.monotonic() < deadline:
            again += backend.lease("held", 60, 50)
        assert sorted(t.payload for t in again) == sorted(f"held-{i}".encode() for i in range(50))
    finally:
        backend.close()


def test_metrics_port_serves_the_bridges_calls() -> None:
    import urllib.request

    port, metrics_port = free_port(), free_port()
    process = _bridge_process("--listen", f"127.0.0.1:{port}", "--metrics-port", str(metrics_port))
    try:
        assert f"metrics at :{metrics_port}/metrics" in _wait_ready(process)
        for _ in range(3):
            _post(
                port,
                "POST",
                _envelope("BulkAdd", _add(queue="counted")),
                {"Content-Type": "application/octet-stream"},
            )
        _post(port, "POST", b"junk", {"Content-Type": "application/octet-stream"})
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as page:
            text = page.read().decode()
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    calls = [line for line in text.splitlines() if line.startswith("pullqueue_bridge_calls")]
    assert any(
        'rpc_method="BulkAdd"' in line and 'outcome="ok"' in line and line.endswith(" 3.0")
        for line in calls
    ), calls
    assert any('outcome="parse_error"' in line for line in calls), calls
