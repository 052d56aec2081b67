"""The fault suite's loopback proxy does what its cuts promise: forward, refuse, swallow, mend."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest

from tests.support.tcpproxy import TcpProxy

pytestmark = pytest.mark.faults


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(4096):
            self.request.sendall(data)


@pytest.fixture
def proxy() -> Iterator[TcpProxy]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with TcpProxy(f"127.0.0.1:{server.server_address[1]}") as proxy:
        yield proxy
    server.shutdown()
    server.server_close()


def echo(sock: socket.socket, data: bytes) -> bytes:
    sock.sendall(data)
    return sock.recv(4096)


def connect(proxy: TcpProxy) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=2)


def test_forwards_until_cut_then_resets_and_refuses(proxy: TcpProxy) -> None:
    with connect(proxy) as live:
        assert echo(live, b"ping") == b"ping"
        proxy.cut("refuse")
        with pytest.raises(OSError):
            echo(live, b"again")
            echo(live, b"again")
    with pytest.raises(ConnectionRefusedError):
        connect(proxy)
    proxy.restore()
    with connect(proxy) as fresh:
        assert echo(fresh, b"back") == b"back"


def test_a_blackhole_accepts_and_answers_nothing_until_restored(proxy: TcpProxy) -> None:
    with connect(proxy) as live:
        proxy.cut("blackhole")
        with connect(proxy) as during:
            during.settimeout(0.3)
            with pytest.raises(TimeoutError):
                echo(during, b"hello?")
            live.settimeout(0.3)
            with pytest.raises(TimeoutError):
                echo(live, b"hello?")
            proxy.restore()
            with pytest.raises(OSError):  # reset: the client must reconnect
                during.settimeout(2)
                echo(during, b"x")
    with connect(proxy) as fresh:
        assert echo(fresh, b"back") == b"back"
