"""Cross-site request forgery in a real browser: a page on another port of the same host (any
local dev server) tosses the console's cookies into the browser, then posts an action four ways.

Cookies do not isolate ports, so such a page can set the console's cookies; it is the strongest
attacker there is short of the console's own pages: it reads a genuine cookie and token from the
console over HTTP (a local process can) and tosses that pair. Each way is refused (403, saying
why) and the queue is unchanged.
"""

from __future__ import annotations

import html
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from pullqueue.adapters.memory import MemoryBackend
from tests.console.browser import chromium, served, wait
from tests.console.conftest import CSRF_INPUT, fill

pytestmark = pytest.mark.slow


def genuine_pair(console_url: str) -> tuple[list[str], str]:
    """What a local process gets by asking the console for a page: its cookies and form token."""
    page = httpx2.get(console_url + "queues/toss-q", timeout=30)
    found = CSRF_INPUT.search(page.text)
    assert found is not None, page.text[:300]
    cookies = [c.split(";")[0] for c in page.headers.get_list("set-cookie")]
    return cookies, html.unescape(found.group(1))


class Attacker:
    """Attacker pages on their own port of 127.0.0.1: each tosses the cookies, then posts."""

    def __init__(self, target: str) -> None:
        self.target = target.rstrip("/")
        self.bounced: list[str] = []
        attacker = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                attacker.page(self)

            def do_POST(self) -> None:
                # The redirect: 307 keeps the method and the body, and hides the origin (null).
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)
                to = parse_qs(urlsplit(self.path).query)["to"][0]
                attacker.bounced.append(to)
                self.send_response(307)
                self.send_header("Location", to)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def form(self, action: str, fields: dict[str, str], target: str = "") -> str:
        inputs = "".join(
            f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">'
            for k, v in fields.items()
        )
        aim = f' target="{target}"' if target else ""
        return (
            f'<form id="f" method="post" action="{html.escape(action)}"{aim}>{inputs}</form>'
            "<script>document.getElementById('f').submit()</script>"
        )

    def page(self, handler: BaseHTTPRequestHandler) -> None:
        query = parse_qs(urlsplit(handler.path).query)
        kind = urlsplit(handler.path).path.strip("/")
        if "action" not in query:
            handler.send_error(404)
            return
        action = self.target + query["action"][0]
        fields = {k: v[0] for k, v in query.items() if k not in ("action", "cookie")}
        bounce = f"{self.url}/bounce?to={action}"
        if kind == "redirect":
            body = self.form(bounce, fields)
        elif kind == "frame":
            inner = self.form(action, fields)
            body = (
                '<iframe id="frame" sandbox="allow-forms allow-scripts"'
                f' srcdoc="{html.escape(inner)}"></iframe>'
            )
        elif kind == "fetch":
            body = (
                "<script>fetch(" + repr(bounce) + ", {method: 'POST', mode: 'no-cors',"
                " credentials: 'include', body: new URLSearchParams("
                + repr(fields).replace("'", '"')
                + ")}).finally(() => { document.title = 'sent'; });</script>"
            )
        elif kind == "top":
            body = self.form(action, fields)
        else:
            handler.send_error(404)
            return
        data = f"<!doctype html><title>attacker</title>{body}".encode()
        handler.send_response(200)
        for cookie in query.get("cookie", []):
            handler.send_header("Set-Cookie", f"{cookie}; Path=/")  # tossed for every port
        handler.send_header("Content-Type", "text/html; charset=utf-8")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)


@pytest.fixture
def driver(tmp_path: Path) -> Iterator[WebDriver]:
    with chromium(tmp_path / "profile") as opened:
        yield opened


def names(backend: MemoryBackend) -> set[str]:
    return {t.name or "" for t in backend.list_tasks("toss-q")}


@pytest.mark.parametrize("kind", ["redirect", "frame", "fetch", "top"])
@pytest.mark.parametrize("action", ["delete-task", "purge"])
def test_a_tossed_cookie_posted_from_another_port_changes_nothing(
    driver: WebDriver, kind: str, action: str
) -> None:
    backend = MemoryBackend()
    fill(backend, "toss-q", 5, [None])
    before = names(backend)
    with served(backend) as console_url:
        # The operator has the console open in this browser.
        driver.get(console_url + "queues/toss-q")
        wait(driver, lambda d: d.find_element(By.ID, "queue-name").text == "toss-q")
        attacker = Attacker(console_url)
        try:
            cookies, token = genuine_pair(console_url)
            params = httpx2.QueryParams(
                [("action", f"/queues/toss-q/{action}"), ("csrf", token), ("confirm", "toss-q")]
                + ([("name", "t2")] if action == "delete-task" else [])
                + [("cookie", c) for c in cookies]
            )
            driver.get(f"{attacker.url}/{kind}?{params}")
            if kind in ("redirect", "top"):
                # The browser lands on the console's answer: a refusal that says why.
                wait(driver, lambda d: d.current_url.startswith(console_url))
                said = wait(driver, lambda d: d.find_element(By.TAG_NAME, "main").text)
                assert "403" in said and "refused" in said, said
            elif kind == "frame":
                frame = wait(driver, lambda d: d.find_element(By.ID, "frame"))
                driver.switch_to.frame(frame)
                said = wait(driver, lambda d: d.find_element(By.TAG_NAME, "main").text)
                assert "403" in said and "refused" in said, said
                driver.switch_to.default_content()
            else:
                wait(driver, lambda d: d.title == "sent")
                assert attacker.bounced
            time.sleep(0.5)
            assert names(backend) == before
            # The operator's own page still works: the attack did not break the session.
            driver.get(console_url + "queues/toss-q")
            box = wait(driver, lambda d: d.find_element(By.CSS_SELECTOR, "#purge"))
            box.find_element(By.TAG_NAME, "summary").click()
            box.find_element(By.NAME, "confirm").send_keys("toss-q")
            box.find_element(By.ID, "purge-button").click()
            report = wait(driver, lambda d: d.find_element(By.ID, "report").text)
            assert re.fullmatch(r"purged queue 'toss-q': 5 tasks removed", report), report
        finally:
            attacker.close()
