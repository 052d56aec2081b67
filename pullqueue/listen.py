"""Listen addresses for the servers pullqueue runs (bridge, console, metrics): HOST:PORT parsing,
the loopback test and a free port, in one place so every command reads an address the same way.
"""

from __future__ import annotations

import ipaddress
import socket


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
