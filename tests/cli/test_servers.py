"""The two servers agree, as real processes: `pullqueue bridge` and `pullqueue console` end on
SIGINT (Ctrl-C) and SIGTERM with exit 0 once they have shut down, as uvicorn and gunicorn do, and
say a port in use the same way (exit 2, naming --listen)."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import time

import httpx2
import pytest

from tests.cli.support import PULLQUEUE, clean_env, one_error_line, run

READY = {"bridge": "serving taskqueue at", "console": "pullqueue console for"}
PAGE = {"bridge": "/healthz", "console": "/"}


def start(server: str) -> tuple[subprocess.Popen[str], str]:
    """`pullqueue SERVER --listen 127.0.0.1:0` and its address once it serves."""
    proc = subprocess.Popen(
        [PULLQUEUE, server, "--listen", "127.0.0.1:0"],
        env=clean_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()
    while READY[server] not in line:
        assert line, f"{server} exited before serving"
        line = proc.stderr.readline()
    found = re.search(r"http://127\.0\.0\.1:\d+", line)
    assert found is not None, line
    return proc, found.group(0)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("server", ["bridge", "console"])
def test_a_signal_is_a_servers_normal_end(server: str, signum: signal.Signals) -> None:
    proc, address = start(server)
    try:
        assert httpx2.get(address + PAGE[server], timeout=30).status_code == 200
    finally:
        started = time.monotonic()
        proc.send_signal(signum)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.stderr is not None
    said = proc.stderr.read()
    assert proc.returncode == 0, said
    assert time.monotonic() - started < 15
    assert "Traceback" not in said and "KeyboardInterrupt" not in said


@pytest.mark.parametrize("server", ["bridge", "console"])
def test_a_port_in_use_is_said_the_same_way(server: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run(server, "--listen", f"127.0.0.1:{port}")
    assert result.returncode == 2
    line = one_error_line(result.stderr)
    assert f"'--listen': cannot listen on 127.0.0.1:{port}" in line and "pick a free" in line


@pytest.mark.parametrize("server", ["bridge", "console"])
def test_a_bad_listen_address_is_said_the_same_way(server: str) -> None:
    result = run(server, "--listen", "localhost")
    assert result.returncode == 2
    assert "'--listen'" in result.stderr and "'localhost' is not HOST:PORT" in result.stderr
