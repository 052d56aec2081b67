"""The console's actions on memory://: each changes exactly what it says after the typed queue
name, reports what it did, and nothing happens without the name, without the CSRF token bound
to the browser's session, from another origin (or a hidden one), or under --read-only."""

from __future__ import annotations

import html
import re

import pytest
from starlette.testclient import TestClient

from pullqueue import Queue
from pullqueue.adapters.memory import MemoryBackend
from pullqueue.console import create_app
from pullqueue.console.security import SECURE_SESSION_COOKIE, SESSION_COOKIE
from tests.console.conftest import CSRF_INPUT, Browser


def names(backend: MemoryBackend, queue: str) -> set[str]:
    return {t.name or "" for t in backend.list_tasks(queue)}


def test_delete_a_task_deletes_that_task_only(backend: MemoryBackend, browser: Browser) -> None:
    before = names(backend, "emails")
    browser.get("/queues/emails")
    done = browser.post("/queues/emails/delete-task", {"name": "t7", "confirm": "emails"})
    assert done.status_code == 200
    assert "deleted task &#39;t7&#39; from queue &#39;emails&#39;" in done.text
    assert names(backend, "emails") == before - {"t7"}
    assert names(backend, "reports") == {f"t{i}" for i in range(5)}
    again = browser.post("/queues/emails/delete-task", {"name": "t7", "confirm": "emails"})
    assert "was not found" in again.text and "nothing was deleted" in again.text


def test_purge_reports_how_many_it_removed(backend: MemoryBackend, browser: Browser) -> None:
    browser.get("/queues/emails")
    done = browser.post("/queues/emails/purge", {"confirm": "emails"})
    assert done.status_code == 200 and "30 tasks removed" in done.text
    assert names(backend, "emails") == set()
    assert len(names(backend, "reports")) == 5


@pytest.mark.parametrize("confirm", ["", "reports", "EMAILS", " emails"])
def test_a_wrong_confirmation_changes_nothing(
    backend: MemoryBackend, browser: Browser, confirm: str
) -> None:
    browser.get("/queues/emails")
    for action, data in (("purge", {}), ("delete-task", {"name": "t7"})):
        refused = browser.post(f"/queues/emails/{action}", {**data, "confirm": confirm})
        assert refused.status_code == 400 and "nothing was changed" in refused.text
    assert len(names(backend, "emails")) == 30


def test_without_the_csrf_token_nothing_happens(backend: MemoryBackend, browser: Browser) -> None:
    browser.get("/queues/emails")
    same_origin = {"Origin": "http://testserver"}
    forged = browser.client.post(
        "/queues/emails/purge", data={"confirm": "emails"}, headers=same_origin
    )
    assert forged.status_code == 403 and "CSRF token" in forged.text
    wrong = browser.client.post(
        "/queues/emails/purge", data={"confirm": "emails", "csrf": "x" * 43}, headers=same_origin
    )
    assert wrong.status_code == 403
    browser.client.cookies.clear()  # a cross-site form post carries no SameSite=Strict cookie
    stale = browser.post("/queues/emails/purge", {"confirm": "emails"})
    assert stale.status_code == 403
    assert len(names(backend, "emails")) == 30


def test_a_tossed_session_cookie_gets_no_valid_token(
    backend: MemoryBackend, browser: Browser
) -> None:
    """Another port of the host sets the session cookie to a value it chose and posts that value
    as the token (the hole the old cookie-equals-form check had): the token is an HMAC of the
    session under the console's secret, which the tosser does not know."""
    browser.get("/queues/emails")
    tossed = "K" * 43
    browser.client.cookies.clear()  # the tossed cookie replaces the console's
    browser.client.cookies.set(SESSION_COOKIE, tossed)
    for token in (tossed, browser.token, ""):
        browser.token = token
        refused = browser.post("/queues/emails/purge", {"confirm": "emails"})
        assert refused.status_code == 403 and "reload the page" in refused.text
    assert len(names(backend, "emails")) == 30
    # The console's own page, opened with the tossed cookie, carries that session's token.
    page = browser.get("/queues/emails")
    assert SESSION_COOKIE not in page.headers.get("set-cookie", "")
    assert browser.post("/queues/emails/purge", {"confirm": "emails"}).status_code == 200


@pytest.mark.parametrize(
    ("headers", "said"),
    [
        ({"Origin": "https://evil.example"}, "cross-site request from 'https://evil.example'"),
        ({"Origin": "http://testserver:8080"}, "cross-site request"),  # another port
        ({"Origin": "https://testserver"}, "cross-site request"),  # another scheme
        ({"Origin": "null"}, "Origin: null"),
        ({"Origin": ""}, "cross-site request"),
        ({"Origin": "null", "Referer": "http://testserver/queues/emails"}, "Origin: null"),
        ({"Referer": "http://127.0.0.1:9999/attack"}, "cross-site request from a page at"),
        ({"Referer": "not a url"}, "cross-site request from a page at"),
        ({}, "neither where it came from"),
        # Another port of the host, or a redirect from it, is the same site but not the console.
        ({"Origin": "http://testserver", "Sec-Fetch-Site": "same-site"}, "Sec-Fetch-Site"),
        ({"Origin": "http://testserver", "Sec-Fetch-Site": "cross-site"}, "Sec-Fetch-Site"),
    ],
)
def test_a_post_not_from_the_consoles_origin_is_refused(
    backend: MemoryBackend, browser: Browser, headers: dict[str, str], said: str
) -> None:
    browser.get("/queues/emails")
    browser.origin = ""
    for action, data in (("purge", {}), ("delete-task", {"name": "t7"})):
        sent = dict(headers)
        refused = browser.client.post(
            f"/queues/emails/{action}",
            data={"csrf": browser.token, "confirm": "emails", **data},
            headers=sent,
        )
        assert refused.status_code == 403
        message = html.unescape(refused.text.split('id="message"', 1)[1])
        assert "refused: " in message and said in message and "nothing was changed" in message
    assert len(names(backend, "emails")) == 30


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://testserver"},
        {"Origin": "HTTP://TestServer:80"},
        {"Referer": "http://testserver/queues/emails?tag=x"},
        {"Origin": "http://testserver", "Sec-Fetch-Site": "same-origin"},
    ],
)
def test_a_post_from_the_consoles_own_page_passes(
    backend: MemoryBackend, browser: Browser, headers: dict[str, str]
) -> None:
    browser.get("/queues/emails")
    done = browser.client.post(
        "/queues/emails/purge", data={"csrf": browser.token, "confirm": "emails"}, headers=headers
    )
    assert done.status_code == 200 and "30 tasks removed" in done.text


def test_over_https_the_session_cookie_is_host_prefixed(backend: MemoryBackend) -> None:
    app = create_app(backend, sample_in_background=False)
    with TestClient(app, base_url="https://console.example") as client:
        page = client.get("/queues/emails")
        cookie = page.headers["set-cookie"]
        assert cookie.startswith(f"{SECURE_SESSION_COOKIE}=")
        assert "secure" in cookie.lower() and "path=/" in cookie.lower()
        assert "domain" not in cookie.lower() and "httponly" in cookie.lower()
        token = CSRF_INPUT.search(page.text)
        assert token is not None
        # A plain-named cookie (what a plain-HTTP page of the same host could set) is not read.
        session = client.cookies[SECURE_SESSION_COOKIE]
        client.cookies.clear()
        client.cookies.set(SESSION_COOKIE, session)
        origin = {"Origin": "https://console.example"}
        form = {"csrf": token.group(1), "confirm": "emails"}
        refused = client.post("/queues/emails/purge", data=form, headers=origin)
        assert refused.status_code == 403
        assert len(names(backend, "emails")) == 30
        client.cookies.clear()
        client.cookies.set(SECURE_SESSION_COOKIE, session)
        done = client.post("/queues/emails/purge", data=form, headers=origin)
        assert done.status_code == 200 and "30 tasks removed" in done.text


def test_read_only_shows_no_buttons_and_refuses_every_action(
    backend: MemoryBackend, read_only_browser: Browser
) -> None:
    page = read_only_browser.get("/queues/emails").text
    assert 'id="read-only"' in page
    assert "Purge queue" not in page and "Delete task" not in page and "/delete-task" not in page
    # A valid CSRF token (the page's htmx header carries it): only --read-only stands in the way.
    token = re.search(r'"X-CSRF-Token": "([^"]+)"', page)
    assert token is not None
    read_only_browser.token = token.group(1)
    for action, data in (
        ("purge", {}),
        ("delete-task", {"name": "t7"}),
        ("redrive-dead-letters", {}),
        ("purge-dead-letters", {}),
    ):
        refused = read_only_browser.post(f"/queues/emails/{action}", {**data, "confirm": "emails"})
        assert refused.status_code == 403
        assert "this console is read-only" in refused.text.split('id="message"', 1)[1]
    assert len(names(backend, "emails")) == 30


def test_dead_letter_actions_on_memory_say_there_are_none(
    backend: MemoryBackend, browser: Browser
) -> None:
    page = browser.get("/queues/emails").text
    assert "Redrive dead letters" not in page
    listing = browser.get("/queues/emails/dead-letters").text
    assert "keeps no dead letters" in listing
    refused = browser.post("/queues/emails/redrive-dead-letters", {"confirm": "emails"})
    assert refused.status_code == 409 and "keeps no dead letters" in refused.text
    assert len(names(backend, "emails")) == 30


def test_figures_follow_an_action(backend: MemoryBackend, browser: Browser) -> None:
    assert browser.get("/api/queues/reports").json()["backlog"]["value"] == 5
    browser.get("/queues/reports")
    browser.post("/queues/reports/delete-task", {"name": "t0", "confirm": "reports"})
    assert browser.get("/api/queues/reports").json()["backlog"]["value"] == 4
    assert len(Queue("reports", backend).lease(60, 10)) == 4
