"""Serving the console with uvicorn: in the foreground (`pullqueue console`) or in a thread
beside other work (`pullqueue demo --console`, tests driving a real browser).

The socket is bound before uvicorn starts, so a port in use is the caller's one-line error and
port 0 gives a free port whose address is known at once.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (OSError when it cannot be had)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def address(sock: socket.socket) -> str:
    """The console's URL on a bound socket."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def _config(app: Any) -> uvicorn.Config:
    # No access log: request lines are all it would add, and the console logs its actions.
    return uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")


def serve(app: Any, sock: socket.socket) -> None:
    """Serve until Ctrl-C or SIGTERM (uvicorn re-raises the signal once it has shut down)."""
    uvicorn.Server(_config(app)).run(sockets=[sock])


class BackgroundConsole:
    """The console served from a daemon thread; stop() shuts it down and closes the socket."""

    def __init__(self, app: Any, sock: socket.socket) -> None:
        self.url = address(sock)
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
