"""Listen addresses for the servers pullqueue runs (bridge, console, metrics): HOST:PORT parsing,
the loopback test, binding and a free port, in one place so every server reads, checks and binds
an address the same way.
"""

from __future__ import annotations

import ipaddress
import socket

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1", "[::1]")
"""The Host headers a server on loopback answers (a DNS-rebinding page sends its own name)."""


def parse_listen(text: str, example: str = "127.0.0.1:8080") -> tuple[str, int]:
    """HOST:PORT (`[::1]:8080` for IPv6) as (host, port); ValueError saying what is wrong."""
    host, sep, port = text.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host:
        raise ValueError(f"{text!r} is not HOST:PORT (for example {example})")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r}: the port must be a number from 0 to 65535")
    return host, int(port)


def is_loopback(host: str) -> bool:
    """Whether a listen host only accepts connections from this machine (localhost,
    127.0.0.0/8, ::1; IPv6 brackets allowed)."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def free_port() -> int:
    """A TCP port free on the loopback interface now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (port 0: a free one); OSError when it cannot be had.

    The servers bind before they start, so a port in use is the command's one-line error and the
    port bound is known at once."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def shown(host: str, port: int) -> str:
    """host:port as a URL writes it (IPv6 in brackets)."""
    host = host.strip("[]")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def http_url(sock: socket.socket) -> str:
    """http://HOST:PORT/ of a bound socket."""
    host, port = sock.getsockname()[:2]
    return f"http://{shown(host, port)}/"
