"""Listen addresses: one parser and one loopback rule for the bridge, the console and the demo."""

from __future__ import annotations

import pytest

from pullqueue.listen import bind, free_port, http_url, is_loopback, parse_listen, shown


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:8080", ("127.0.0.1", 8080)),
        (" localhost:0 ", ("localhost", 0)),
        ("[::1]:10001", ("::1", 10001)),
        ("0.0.0.0:65535", ("0.0.0.0", 65535)),
    ],
)
def test_host_and_port(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen(text) == expected


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("8080", "is not HOST:PORT"),
        (":8080", "is not HOST:PORT"),
        ("host:", "the port must be a number"),
        ("host:65536", "the port must be a number"),
        ("host:-1", "the port must be a number"),
        ("host:80.5", "the port must be a number"),
    ],
)
def test_bad_addresses_say_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says) as caught:
        parse_listen(text, "127.0.0.1:10001")
    assert repr(text) in str(caught.value)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.5", False),
        ("example.com", False),
    ],
)
def test_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_free_port_is_a_port() -> None:
    assert 0 < free_port() < 65536


def test_bind_gives_a_listening_socket_and_its_url() -> None:
    sock = bind("127.0.0.1", 0)
    try:
        port = sock.getsockname()[1]
        assert http_url(sock) == f"http://127.0.0.1:{port}/"
        with pytest.raises(OSError):
            bind("127.0.0.1", port)  # in use: the caller's one-line error
    finally:
        sock.close()


def test_an_ipv6_address_is_shown_in_brackets() -> None:
    assert shown("::1", 8080) == "[::1]:8080" and shown("[::1]", 80) == "[::1]:80"
    assert shown("127.0.0.1", 80) == "127.0.0.1:80"
