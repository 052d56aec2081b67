"""The console's safety: hostile names, tags and payloads render as text, the token gate, the
Host check against DNS rebinding, no payload in the logs, and the command's refusals."""

from __future__ import annotations

import logging
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx2
import pytest
from starlette.testclient import TestClient

from pullqueue import Queue, Task
from pullqueue.adapters.memory import MemoryBackend
from pullqueue.console import create_app
from pullqueue.console.app import loopback_hosts
from tests.cli.support import PULLQUEUE, clean_env, one_error_line, run
from tests.console.conftest import Browser, console

SCRIPT = "<script>alert('pwned')</script>"
TOKEN = "s3cret-token-0123456789"


def hostile_backend() -> MemoryBackend:
    backend = MemoryBackend()
    Queue("hostile", backend).add(
        [
            Task(SCRIPT.encode() + b"\x00\x1b[31m", name="evil1", tag=SCRIPT),
            Task(b'"><img src=x onerror=alert(1)>', name="evil2", tag='"><b>tag</b>'),
        ]
    )
    return backend


def test_script_in_payload_or_tag_renders_as_text() -> None:
    for browser in console(hostile_backend()):
        for path in ("/", "/queues/hostile", f"/queues/hostile?tag={SCRIPT}"):
            page = browser.get(path).text
            assert "<script>alert" not in page
            assert "<img src=x" not in page and "<b>tag</b>" not in page
        page = browser.get("/queues/hostile").text
        assert "&lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt;" in page
        assert "\\x00\\x1b[31m" in page  # control characters escaped, not sent raw
        filtered = browser.get("/queues/hostile", params={"tag": SCRIPT}).text
        assert re.findall(r'data-name="([^"]+)"', filtered) == ["evil1"]


def test_no_payload_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    for browser in console(hostile_backend()):
        browser.get("/")
        browser.get("/queues/hostile")
        browser.post("/queues/hostile/delete-task", {"name": "evil1", "confirm": "hostile"})
        browser.post("/queues/hostile/purge", {"confirm": "hostile"})
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "console action purge" in logged  # actions are logged ...
    assert "alert" not in logged and "onerror" not in logged  # ... payloads never


def test_the_token_gate() -> None:
    backend = hostile_backend()
    app = create_app(backend, token=TOKEN, sample_in_background=False)
    with TestClient(app) as client:
        assert client.get("/").status_code == 401
        assert client.get("/api/queues").status_code == 401
        assert client.get("/?token=wrong").status_code == 401
        assert client.post("/queues/hostile/purge", data={"confirm": "hostile"}).status_code == 401
        bearer = client.get("/api/queues", headers={"Authorization": f"Bearer {TOKEN}"})
        assert bearer.status_code == 200
        opened = client.get(f"/queues/hostile?token={TOKEN}&tag=x", follow_redirects=False)
        assert opened.status_code == 303 and opened.headers["location"] == "/queues/hostile?tag=x"
        assert "httponly" in opened.headers["set-cookie"].lower()
        assert client.get("/").status_code == 200  # the cookie carries it from now on
    assert len(list(backend.list_tasks("hostile"))) == 2  # the refused purge changed nothing


def test_a_loopback_console_refuses_other_host_names() -> None:
    app = create_app(hostile_backend(), allowed_hosts=loopback_hosts(), sample_in_background=False)
    with TestClient(app, base_url="http://127.0.0.1:8080") as client:
        assert client.get("/").status_code == 200
        assert client.get("/", headers={"Host": "localhost:8080"}).status_code == 200
        # A page on attacker.example that rebinds its name to 127.0.0.1 sends its own Host.
        assert client.get("/", headers={"Host": "attacker.example:8080"}).status_code == 400


def test_non_loopback_needs_a_token(tmp_path: Path) -> None:
    refused = run("console", "--listen", "0.0.0.0:0")
    assert refused.returncode == 2 and "token" in refused.stderr
    short = tmp_path / "short"
    short.write_text("abc\n")
    bad = run("console", "--listen", "0.0.0.0:0", "--token-file", str(short))
    assert bad.returncode == 2 and "at least 16" in bad.stderr
    missing = run("console", "--token-file", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr
    listen = run("console", "--listen", "localhost")
    assert listen.returncode == 2 and "HOST:PORT" in listen.stderr


def test_a_port_in_use_is_one_line_and_exit_2() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run("console", "--listen", f"127.0.0.1:{port}")
    assert result.returncode == 2  # as the bridge and --metrics-port say it
    assert f"'--listen': cannot listen on 127.0.0.1:{port}" in one_error_line(result.stderr)


def start_console(
    *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], str]:
    """`pullqueue console ARGS` in a subprocess, and its address once it serves."""
    proc = subprocess.Popen(
        [PULLQUEUE, "console", "--listen", "127.0.0.1:0", *args],
        env=env or clean_env(),
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()
    while "pullqueue console for" not in line:
        assert line, "the console exited before serving"
        line = proc.stderr.readline()
    found = re.search(r"http://127\.0\.0\.1:\d+/", line)
    assert found is not None, line
    return proc, found.group(0)


def test_served_over_http_until_ctrl_c_then_exit_0() -> None:
    proc, address = start_console("--read-only", env=clean_env(PULLQUEUE_CONSOLE_TOKEN=TOKEN))
    try:
        assert httpx2.get(address).status_code == 401
        page = httpx2.get(address, headers={"Authorization": f"Bearer {TOKEN}"})
        assert page.status_code == 200 and "read-only" in page.text
        # The Host check is on: the console listens on loopback.
        rebound = httpx2.get(address, headers={"Host": "attacker.example"})
        assert rebound.status_code == 400
    finally:
        proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 15
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
    assert proc.returncode == 0
    assert "Traceback" not in (proc.stderr.read() if proc.stderr else "")


def test_help_has_an_example() -> None:
    result = run("console", "--help")
    assert result.returncode == 0
    assert "pullqueue console --url pubsub://my-project" in result.stdout
    assert "--read-only" in result.stdout and "--token-file" in result.stdout


def test_a_browser_that_kept_an_old_token_is_told_to_reload(browser: Browser) -> None:
    browser.get("/")
    browser.token = "an-old-token-from-a-page-opened-before-a-restart"
    refused = browser.post("/queues/emails/purge", {"confirm": "emails"})
    assert refused.status_code == 403 and "reload the page" in refused.text
