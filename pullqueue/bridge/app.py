"""The bridge's HTTP side: `POST /rpc_http` as the App Engine service bridge answers it, `/healthz`.

aiohttp serves the calls and forwards other services upstream; the taskqueue calls themselves,
which block on the backend, run on a thread pool so one slow lease never holds the others up.
Python 2.7's remote_api_stub is served too: `/_ah/remote_api` as an alias, its `GET ?rtok=`
handshake, and its errors as the pickled Python 2 exceptions it reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

from aiohttp import ClientError, ClientSession, ClientTimeout, web
from opentelemetry import metrics as otel

from pullqueue import metrics
from pullqueue.adapters.base import Backend
from pullqueue.adapters.memory import MemoryBackend
from pullqueue.bridge import wire
from pullqueue.bridge.codes import Code
from pullqueue.bridge.proto.remote_api_pb2 import RpcError
from pullqueue.bridge.taskqueue import TaskQueueService

logger = logging.getLogger("pullqueue.bridge")

RPC_PATH = "/rpc_http"
REMOTE_API_PATH = "/_ah/remote_api"
"""The remote_api handler's path in App Engine apps' configuration: an alias of RPC_PATH."""
HEALTH_PATH = "/healthz"
MAX_BODY_BYTES = 32 * 2**20
"""The largest request body read; a larger one is refused without being read."""
DEADLINE_HEADER = "X-Google-RPC-Service-Deadline"
DEFAULT_DEADLINE = 60.0
"""Seconds a call may take when the request names no deadline (the 1.9.x SDK's RemoteStub never
names one; the other SDKs always do)."""
DEFAULT_APP_ID = "pullqueue-bridge"
MAX_DEADLINE = 3600.0
_FORWARDED_HEADERS = (
    "Content-Type",
    DEADLINE_HEADER,
    "X-Google-RPC-Service-Endpoint",
    "X-Google-RPC-Service-Method",
    "X-Google-DapperTraceInfo",
    "X-Cloud-Trace-Context",
)

_meter = otel.get_meter("pullqueue")
_calls = _meter.create_counter(
    "pullqueue.bridge.calls", "{call}", "Calls the bridge answered, by service, method, outcome."
)
_duration = _meter.create_histogram(
    "pullqueue.bridge.call.duration",
    "s",
    "Time the bridge took to answer a call.",
    explicit_bucket_boundaries_advisory=metrics.DURATION_BUCKETS,
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Bridge:
    """The service bridge over one backend: answers /rpc_http calls, forwards other services.

    `ticket`, when set, is the only request_id accepted; `upstream` (HOST:PORT) receives the
    calls of other services unchanged (and stages transactional adds, bridge/outbox.py);
    `threads` bounds the taskqueue calls served at once; `sweep_period` (seconds, 0: never) is
    how often the outbox of the app seen adding transactionally is swept through the upstream;
    `default_deadline` (seconds) applies to a call whose request names none (Python 2.7's
    RemoteStub); `app_id` is what the remote_api handshake answers.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        ticket: str | None = None,
        upstream: str | None = None,
        threads: int = 64,
        sweep_period: float = 0.0,
        default_deadline: float = DEFAULT_DEADLINE,
        app_id: str = DEFAULT_APP_ID,
    ) -> None:
        self.service = TaskQueueService(backend, upstream=upstream, sweep_period=sweep_period)
        self.ticket = ticket
        self.upstream = upstream
        if isinstance(default_deadline, bool) or not (
            math.isfinite(default_deadline) and 0 < default_deadline <= MAX_DEADLINE
        ):
            raise ValueError(
                f"default_deadline must be above 0 and at most {MAX_DEADLINE:g} seconds,"
                f" not {default_deadline!r}"
            )
        self.default_deadline = float(default_deadline)
        self.app_id = app_id
        self.draining = False
        self._in_flight = 0
        """Calls being answered now (body read, served or answer written); the loop's thread
        alone changes it, as it does `_serving`, those among them past reading their body."""
        self._serving = 0
        # The memory backend itself (not a wrapper, which may block) never waits on I/O: a hop
        # to the thread pool would cost more than its calls (about 0.4 ms of 1.8 per lease).
        self._inline = type(backend) is MemoryBackend
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="pullqueue-bridge")
        self._session: ClientSession | None = None

    def application(self) -> web.Application:
        """The aiohttp application serving /rpc_http and /healthz."""
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_route("*", RPC_PATH, self._rpc)
        app.router.add_route("*", REMOTE_API_PATH, self._rpc)
        app.router.add_get(HEALTH_PATH, self._health)
        app.on_cleanup.append(self._close)
        return app

    async def _close(self, _app: web.Application) -> None:
        await asyncio.to_thread(self.service.outbox.close)
        if self._session is not None:
            await self._session.close()
        # Off the loop, so the drain's grace period can still end a call that runs on.
        await asyncio.to_thread(self._pool.shutdown, True)

    async def _health(self, _request: web.Request) -> web.Response:
        if self.draining:
            return web.Response(status=503, text="draining\n")
        return web.Response(text="ok\n")

    async def calls_finished(self, timeout: float, *, reading: bool = True) -> bool:
        """Wait up to `timeout` seconds until no call is being answered (with `reading` false:
        none past reading its body); whether none is."""
        ends = time.monotonic() + timeout

        def busy() -> int:
            return self._in_flight if reading else self._serving

        # A call received a moment ago starts on a later turn of the loop: let it in first.
        await asyncio.sleep(0.01)
        while busy() and time.monotonic() < ends:
            await asyncio.sleep(0.01)
        return not busy()

    async def _rpc(self, request: web.Request) -> web.Response:
        self._in_flight += 1
        try:
            response = await self._answer_rpc(request)
        finally:
            self._in_flight -= 1
        if self.draining:
            # A keep-alive connection carries no further call once the bridge drains.
            response.force_close()
        return response

    async def _answer_rpc(self, request: web.Request) -> web.Response:
        remote_stub = wire.REMOTE_STUB_HEADER in request.headers
        if request.method == "GET" and remote_stub:
            return self._app_info(request)
        if request.method != "POST":
            return _refuse(405, f"{request.path} takes POST, not {request.method}")
        # The header as sent (aiohttp's content_type reads a missing one as octet-stream).
        sent = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if sent != wire.PROTOCOL_CONTENT_TYPE:
            return _refuse(
                415, f"content type must be {wire.PROTOCOL_CONTENT_TYPE}, not {sent or 'none'}"
            )
        if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
            return _refuse(413, f"the body is over {MAX_BODY_BYTES} bytes")
        started = time.monotonic()
        deadline = started + _deadline(request.headers.get(DEADLINE_HEADER), self.default_deadline)
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return _refuse(413, f"the body is over {MAX_BODY_BYTES} bytes")
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            return _refuse(400, "the body ended before its announced length")
        service, method, outcome = "", "", "ok"
        try:
            call = wire.decode_call(body)
            service, method = call.service, call.method
            if self.ticket is not None and not hmac.compare_digest(
                call.ticket.encode("utf-8"), self.ticket.encode("utf-8")
            ):
                outcome = "refused"
                return _answer(_refused(call, python2=remote_stub))
            if service != "taskqueue":
                with self._serving_call():
                    return await self._other_service(request, call, body, deadline)
            with self._serving_call():
                answer = await self._serve(call, deadline)
        except wire.RpcFailure as failure:
            outcome = RpcError.ErrorCode.Name(failure.code).lower()
            logger.info("call refused: %s.%s: %s", service or "?", method or "?", failure.detail)
            answer = wire.rpc_error(failure.code, failure.detail, python2=remote_stub)
        except wire.ApplicationFailure as failure:
            outcome = _outcome(failure.code)
            answer = wire.application_error(failure.code, failure.detail, python2=remote_stub)
        finally:
            attributes = {"rpc.service": service or "?", "rpc.method": method or "?"}
            _calls.add(1, {**attributes, "outcome": outcome})
            _duration.record(time.monotonic() - started, attributes)
        return _answer(answer)

    def _app_info(self, request: web.Request) -> web.Response:
        """The remote_api handler's answer to `GET ?rtok=TOKEN`: the app id and the token, in
        the YAML flow mapping `ConfigureRemoteApi(None, ...)` reads before its first call."""
        rtok = request.query.get("rtok", "0")
        if not rtok.isascii() or len(rtok) > 256:
            return _refuse(400, "rtok must be ASCII, at most 256 characters")
        info = json.dumps({"app_id": self.app_id, "rtok": rtok}, ensure_ascii=True)
        return web.Response(text=info + "\n", content_type="text/plain")

    @contextlib.contextmanager
    def _serving_call(self) -> Iterator[None]:
        self._serving += 1
        try:
            yield
        finally:
            self._serving -= 1

    async def _serve(self, call: wire.Call, deadline: float) -> bytes:
        try:
            if self._inline:
                return wire.ok(self.service.call(call.method, call.request, deadline))
            work = asyncio.get_running_loop().run_in_executor(
                self._pool, self.service.call, call.method, call.request, deadline
            )
            response = await asyncio.wait_for(work, max(deadline - time.monotonic(), 0) + 0.05)
        except asyncio.TimeoutError:
            raise wire.RpcFailure(
                RpcError.DEADLINE_EXCEEDED,
                f"taskqueue.{call.method} did not finish within the call's deadline",
            ) from None
        except (wire.ApplicationFailure, wire.RpcFailure):
            raise
        except Exception as exc:
            logger.exception("taskqueue.%s failed", call.method)
            raise wire.ApplicationFailure(
                Code.INTERNAL_ERROR,
                f"taskqueue.{call.method} failed in the bridge: {type(exc).__name__}",
            ) from None
        return wire.ok(response)

    async def _other_service(
        self, request: web.Request, call: wire.Call, body: bytes, deadline: float
    ) -> web.Response:
        if self.upstream is None:
            raise wire.RpcFailure(
                RpcError.CALL_NOT_FOUND,
                f"the {call.service} service is not served here: pullqueue bridge serves the"
                " taskqueue service only (start it with --upstream HOST:PORT to forward the"
                " other services to the App Engine API)",
            )
        if call.service == "datastore_v3" and self.service.outbox.enabled:
            # Transactional adds stage their tasks in the app's transaction (bridge/outbox.py).
            async def post(data: bytes) -> bytes:
                answer = await self._post_upstream(request, call, data, deadline)
                if answer.status != 200 or not isinstance(answer.body, bytes):
                    raise wire.RpcFailure(
                        RpcError.UNKNOWN,
                        f"{call.service}.{call.method}: the upstream {self.upstream} answered"
                        f" HTTP {answer.status}",
                    )
                return answer.body

            outbox = self.service.outbox
            return _answer(
                await outbox.forward(call.method, call.ticket, body, call.request, post, deadline)
            )
        return await self._post_upstream(request, call, body, deadline)

    async def _post_upstream(
        self, request: web.Request, call: wire.Call, body: bytes, deadline: float
    ) -> web.Response:
        if self._session is None:
            self._session = ClientSession()
        headers = {k: request.headers[k] for k in _FORWARDED_HEADERS if k in request.headers}
        try:
            async with self._session.post(
                f"http://{self.upstream}{RPC_PATH}",
                data=body,
                headers=headers,
                timeout=ClientTimeout(total=max(deadline - time.monotonic(), 0.001) + 1),
            ) as upstream:
                content = await upstream.read()
                if wire.REMOTE_STUB_HEADER in request.headers and upstream.status == 200:
                    content = wire.for_python2(content)
                return web.Response(
                    status=upstream.status,
                    body=content,
                    content_type=upstream.content_type,
                )
        except asyncio.TimeoutError:
            raise wire.RpcFailure(
                RpcError.DEADLINE_EXCEEDED,
                f"{call.service}.{call.method}: the upstream {self.upstream} did not answer"
                " within the call's deadline",
            ) from None
        except ClientError as exc:
            raise wire.RpcFailure(
                RpcError.UNKNOWN,
                f"{call.service}.{call.method}: the upstream {self.upstream} failed: {exc}",
            ) from None


def _outcome(code: int) -> str:
    """A taskqueue code's metric label; DATASTORE_ERROR + n (a transaction's error) as one."""
    if code >= Code.DATASTORE_ERROR:
        return "datastore_error"
    return str(Code.ErrorCode.Name(code)).lower()


def _deadline(header: str | None, default: float) -> float:
    """Seconds the call may take, from the request's deadline header, else `default`."""
    if header is None:
        return default
    try:
        seconds = float(header)
    except ValueError:
        return default
    if not math.isfinite(seconds):
        return default
    return min(seconds, MAX_DEADLINE)


def _refused(call: wire.Call, *, python2: bool) -> bytes:
    detail = (
        "the call's security ticket (request_id) is not this bridge's: set the SDK's ticket"
        " (Python: HTTP_X_APPENGINE_API_TICKET; Go: the GAE_* variables; Python 2.7: the"
        " RemoteStub's request_id, as the bridge's docs say under 'Python 2.7 apps') to the"
        " bridge's --ticket-file / PULLQUEUE_BRIDGE_TICKET"
    )
    if call.service == "taskqueue":
        return wire.application_error(Code.PERMISSION_DENIED, detail, python2=python2)
    return wire.rpc_error(RpcError.SECURITY_VIOLATION, detail, python2=python2)


def _answer(body: bytes) -> web.Response:
    return web.Response(body=body, content_type=wire.PROTOCOL_CONTENT_TYPE)


def _refuse(status: int, text: str) -> web.Response:
    return web.Response(status=status, text=text + "\n")
