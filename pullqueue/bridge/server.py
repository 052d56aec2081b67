"""Running a Bridge: in the foreground until SIGTERM (`pullqueue bridge`), or on a thread (tests).

On SIGTERM or SIGINT the server stops accepting connections, lets the calls in flight finish
(up to `grace` seconds), then closes the backend so what the process holds goes back to the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import threading
import time
from collections.abc import Callable

from aiohttp import web

from pullqueue.bridge.app import Bridge
from pullqueue.listen import bind

logger = logging.getLogger("pullqueue.bridge")

DEFAULT_LISTEN = "127.0.0.1:10001"
CLOSE_IDLE = 1.0
"""Seconds aiohttp's own shutdown waits on a connection once the bridge's calls are done: a
connection accepted in the instant the listening socket closed can sit idle (aiohttp drops
what it sends once shutdown began) and would otherwise hold the exit for the whole timeout."""


async def _start(bridge: Bridge, sock: socket.socket) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(
        bridge.application(), access_log=None, handle_signals=False, shutdown_timeout=CLOSE_IDLE
    )
    await runner.setup()
    site = web.SockSite(runner, sock)
    await site.start()
    return runner, int(sock.getsockname()[1])


def serve(
    bridge: Bridge,
    sock: socket.socket,
    *,
    on_ready: Callable[[int], None] | None = None,
    grace: float = 30.0,
) -> bool:
    """Serve on a bound socket (`pullqueue.listen.bind`) until SIGTERM/SIGINT, then drain and
    return whether every call in flight finished within `grace` seconds (the caller closes the
    socket and the backend either way)."""

    async def main() -> bool:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        runner, bound = await _start(bridge, sock)
        if on_ready is not None:
            on_ready(bound)
        await stop.wait()
        return await _drain(bridge, runner, grace)

    return asyncio.run(main())


async def _drain(bridge: Bridge, runner: web.AppRunner, grace: float) -> bool:
    """Stop taking calls, let those begun finish (up to `grace` s), close the server; whether
    every call finished and the server closed in time.

    The bridge counts its calls itself, and closes the idle keep-alive connections only once no
    call is being read: aiohttp drops what a connection sends after that (a call's body too),
    and its shutdown waits as long on a connection that never carries a call as on a call.
    """
    ends = time.monotonic() + grace
    bridge.draining = True
    for site in list(runner.sites):
        await site.stop()
    # No new connection now; a call on a kept-alive one is answered, then its connection closes.
    finished = await bridge.calls_finished(_left(ends))
    if runner.server is not None:
        runner.server.pre_shutdown()
    # A call read in the instant before is served still; one that was being read is dropped
    # unanswered, as nothing of it was done.
    finished = await bridge.calls_finished(_left(ends), reading=False) and finished
    try:
        await asyncio.wait_for(runner.cleanup(), _left(ends) + 2 * CLOSE_IDLE)
    except asyncio.TimeoutError:
        logger.warning("the server did not close within %g s of the signal", grace)
        return False
    return finished


def _left(ends: float) -> float:
    return max(ends - time.monotonic(), 0.0)


class BackgroundBridge:
    """A Bridge served on a thread of this process (for tests and benchmarks): `start()` returns
    the port; `stop()` drains it. The backend stays open: its owner closes it."""

    def __init__(self, bridge: Bridge, host: str = "127.0.0.1", port: int = 0) -> None:
        self.bridge = bridge
        self.host = host
        self.port = port
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    def start(self) -> int:
        """Start serving; returns the port bound."""
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(
            _start(self.bridge, bind(self.host, self.port)), self._loop
        )
        self._runner, self.port = future.result(30)
        return self.port

    def stop(self) -> None:
        """Stop accepting, finish the calls in flight, stop the thread."""
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(
                _drain(self.bridge, self._runner, 30.0), self._loop
            ).result(60)
            self._runner = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        with contextlib.suppress(RuntimeError):
            self._loop.close()
