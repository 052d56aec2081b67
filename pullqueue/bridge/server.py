"""Running a Bridge: in the foreground until SIGTERM (`pullqueue bridge`), or on a thread (tests).

On SIGTERM or SIGINT the server stops accepting connections, lets the calls in flight finish
(up to `grace` seconds), then closes the backend so what the process holds goes back to the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Callable

from aiohttp import web

from pullqueue.bridge.app import Bridge

DEFAULT_LISTEN = "127.0.0.1:10001"


async def _start(bridge: Bridge, host: str, port: int) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(
        bridge.application(), access_log=None, handle_signals=False, shutdown_timeout=30.0
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    return runner, int(runner.addresses[0][1])


def serve(
    bridge: Bridge,
    host: str,
    port: int,
    *,
    on_ready: Callable[[int], None] | None = None,
    grace: float = 30.0,
) -> bool:
    """Serve until SIGTERM/SIGINT, then drain and return whether every call in flight finished
    within `grace` seconds (the caller closes the backend either way)."""

    async def main() -> bool:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        runner, bound = await _start(bridge, host, port)
        if on_ready is not None:
            on_ready(bound)
        await stop.wait()
        bridge.draining = True
        # cleanup() closes the listening socket first, then waits for the calls in flight.
        try:
            await asyncio.wait_for(runner.cleanup(), grace)
        except asyncio.TimeoutError:
            return False
        return True

    return asyncio.run(main())


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
            _start(self.bridge, self.host, self.port), self._loop
        )
        self._runner, self.port = future.result(30)
        return self.port

    def stop(self) -> None:
        """Stop accepting, finish the calls in flight, stop the thread."""
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(60)
            self._runner = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        with contextlib.suppress(RuntimeError):
            self._loop.close()
