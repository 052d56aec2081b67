"""Serving the console with uvicorn: in the foreground (`pullqueue console`) or in a thread
beside other work (`pullqueue demo --console`, tests driving a real browser).

The caller binds the socket (`pullqueue.listen.bind`) before uvicorn starts, so a port in use is
its one-line error and port 0 gives a free port whose address is known at once.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn

from pullqueue.listen import http_url


def _config(app: Any) -> uvicorn.Config:
    # No access log: request lines are all it would add, and the console logs its actions.
    return uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")


def serve(app: Any, sock: socket.socket) -> None:
    """Serve until Ctrl-C or SIGTERM (uvicorn re-raises the signal once it has shut down)."""
    uvicorn.Server(_config(app)).run(sockets=[sock])


class BackgroundConsole:
    """The console served from a daemon thread; stop() shuts it down and closes the socket."""

    def __init__(self, app: Any, sock: socket.socket) -> None:
        self.url = http_url(sock)
        self.app = app
        self._sock = sock
        self._server = uvicorn.Server(_config(app))
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="console", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started and self._thread.is_alive():
            if time.monotonic() > deadline:
                raise TimeoutError("the console did not start within 10 s")
            time.sleep(0.02)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self._sock.close()
