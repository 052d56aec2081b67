"""A loopback TCP proxy that can cut the line: drop live connections and refuse or swallow new ones.

Fault tests put it between a worker and the Pub/Sub emulator (PUBSUB_EMULATOR_HOST points at the
proxy) to see what the worker does while the network is gone and how long it takes to recover.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
import time
from typing import Literal

Mode = Literal["refuse", "blackhole"]

_CHUNK = 65536


def _reset(sock: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0), as a peer that vanished would, not a polite FIN."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


class TcpProxy:
    """Forwards 127.0.0.1:<port> to `target` until cut; the port stays the same across cuts.

    `cut("refuse")` resets every live connection and closes the listening socket, so new
    connections are refused (a dead host or a closed firewall). `cut("blackhole")` resets nothing:
    bytes in either direction are read and dropped and new connections are accepted and then
    ignored (packets lost on a broken path), so callers only notice through their timeouts.
    `restore()` resets whatever the cut left hanging and forwards again.

    `rate` (bytes a second) passes what the target sends at that pace: a slow or loaded link,
    where an answer of megabytes takes a good part of a second to arrive.
    """

    def __init__(self, target: str, *, rate: float | None = None) -> None:
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))
        self.rate = rate
        self._lock = threading.Lock()
        self._connections: list[tuple[socket.socket, socket.socket]] = []
        self._mode: Mode | None = None
        self._closed = False
        self._listener = self._listen(0)
        self.port: int = self._listener.getsockname()[1]
        self._accepting = self._start_accepting(self._listener)

    @property
    def address(self) -> str:
        """host:port to hand to clients (for PUBSUB_EMULATOR_HOST)."""
        return f"127.0.0.1:{self.port}"

    @property
    def is_cut(self) -> bool:
        return self._mode is not None

    def cut(self, mode: Mode = "refuse") -> None:
        """Break the line: see the class docstring for the two modes."""
        with self._lock:
            if self._mode is not None:
                raise RuntimeError("the proxy is already cut")
            self._mode = mode
            if mode == "refuse":
                self._close_listener()
                pairs, self._connections = self._connections, []
            else:
                pairs = []
        for client, server in pairs:
            _reset(client)
            _reset(server)

    def restore(self) -> None:
        """Mend the line: hanging connections are reset (clients reconnect), new ones forwarded."""
        with self._lock:
            if self._mode is None:
                return
            mode, self._mode = self._mode, None
            pairs, self._connections = self._connections, []
            if mode == "refuse":
                self._listener = self._listen(self.port)
                self._accepting = self._start_accepting(self._listener)
        if mode == "blackhole":
            for client, server in pairs:
                _reset(client)
                _reset(server)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._close_listener()
            pairs, self._connections = self._connections, []
        for client, server in pairs:
            _reset(client)
            _reset(server)

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------------

    @staticmethod
    def _listen(port: int) -> socket.socket:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(128)
        return listener

    def _close_listener(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._listener.close()

    def _start_accepting(self, listener: socket.socket) -> threading.Thread:
        thread = threading.Thread(
            target=self._accept_loop, args=(listener,), name="tcpproxy-accept", daemon=True
        )
        thread.start()
        return thread

    def _accept_loop(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # the listener was closed by cut() or close()
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._mode == "blackhole":
                self._swallow(client)
                continue
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                _reset(client)
                continue
            server.settimeout(None)
            server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._closed or self._mode == "refuse":
                    _reset(client)
                    _reset(server)
                    continue
                self._connections.append((client, server))
            threading.Thread(
                target=self._pump, args=(client, server), name="tcpproxy-pump", daemon=True
            ).start()

    def _swallow(self, client: socket.socket) -> None:
        """Accept a connection during a blackhole and read-and-drop until restore resets it."""
        with self._lock:
            self._connections.append((client, client))
        threading.Thread(
            target=self._pump, args=(client, None), name="tcpproxy-swallow", daemon=True
        ).start()

    def _pump(self, client: socket.socket, server: socket.socket | None) -> None:
        """Copy bytes both ways; while blackholed, read and drop them instead."""
        ends = [client] if server is None else [client, server]
        try:
            while True:
                readable, _, _ = select.select(ends, [], [], 0.5)
                for sock in readable:
                    data = sock.recv(_CHUNK)
                    if not data:
                        return
                    if self._mode is not None or server is None:
                        continue
                    if sock is server and self.rate:
                        time.sleep(len(data) / self.rate)
                    (server if sock is client else client).sendall(data)
        except (OSError, ValueError):
            return
        finally:
            with self._lock:
                pair = (client, client if server is None else server)
                if pair in self._connections:
                    self._connections.remove(pair)
            for sock in ends:
                with contextlib.suppress(OSError):
                    sock.close()
