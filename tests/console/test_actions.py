"""The console's actions on memory://: each changes exactly what it says after the typed queue
name, reports what it did, and nothing happens without the name, without the CSRF token, from
another site, or under --read-only."""

from __future__ import annotations

import pytest

from pullqueue import Queue
from pullqueue.adapters.memory import MemoryBackend
from tests.console.conftest import Browser


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
    forged = browser.client.post("/queues/emails/purge", data={"confirm": "emails"})
    assert forged.status_code == 403 and "CSRF" in forged.text
    wrong = browser.client.post(
        "/queues/emails/purge", data={"confirm": "emails", "csrf": "x" * 43}
    )
    assert wrong.status_code == 403
    browser.client.cookies.clear()  # a cross-site form post carries no SameSite=Strict cookie
    stale = browser.post("/queues/emails/purge", {"confirm": "emails"})
    assert stale.status_code == 403
    assert len(names(backend, "emails")) == 30


def test_a_post_from_another_origin_is_refused(backend: MemoryBackend, browser: Browser) -> None:
    browser.get("/queues/emails")
    refused = browser.post(
        "/queues/emails/purge", {"confirm": "emails"}, headers={"Origin": "https://evil.example"}
    )
    assert refused.status_code == 403 and "cross-site" in refused.text
    assert len(names(backend, "emails")) == 30
    same = browser.post(
        "/queues/emails/purge", {"confirm": "emails"}, headers={"Origin": "http://testserver"}
    )
    assert same.status_code == 200


def test_read_only_shows_no_buttons_and_refuses_every_action(
    backend: MemoryBackend, read_only_browser: Browser
) -> None:
    page = read_only_browser.get("/queues/emails").text
    assert 'id="read-only"' in page
    assert "Purge queue" not in page and "Delete task" not in page and "/delete-task" not in page
    # A valid CSRF token (the page set the cookie): only --read-only stands in the way.
    read_only_browser.token = read_only_browser.client.cookies["pullqueue_console_csrf"]
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
