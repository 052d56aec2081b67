"""Pausing a queue from the console on memory://: every lease path answers empty while paused,
adds go on, resume lets leases through, and the state shows on the queues page, the queue page,
`stats --json` and the JSON API; a refused pause (wrong name, no token, read-only) changes
nothing."""

from __future__ import annotations

from pullqueue import Queue, Task
from pullqueue.adapters.memory import MemoryBackend
from pullqueue.compat import taskqueue
from pullqueue.inspection import stats_json
from tests.console.conftest import Browser


def test_pause_stops_every_lease_path_and_resume_lets_them_lease(
    backend: MemoryBackend, browser: Browser
) -> None:
    browser.get("/queues/emails")
    done = browser.post("/queues/emails/pause", {"confirm": "emails"})
    assert done.status_code == 200 and "paused queue &#39;emails&#39;" in done.text
    queue = Queue("emails", backend)
    legacy = taskqueue.Queue("emails", backend=backend)
    assert queue.lease(60, 100) == []
    assert queue.lease(60, 100, tag="alice") == []
    assert queue.lease(60, 100, group_by_tag=True) == []
    assert legacy.lease_tasks(60, 100) == []
    assert legacy.lease_tasks_by_tag(60, 100, "bob") == []
    queue.add(Task(b"while paused", name="late"))  # adds are accepted
    assert Queue("reports", backend).lease(60, 1)  # other queues run on
    page = browser.get("/")
    assert 'class="paused"' in page.text.split('data-queue="reports"')[0]
    assert 'id="paused-banner"' in browser.get("/queues/emails").text
    assert browser.get("/api/queues/emails").json()["stats"]["paused"] is True
    assert stats_json(backend, queue.stats(), None)["paused"] is True
    again = browser.post("/queues/emails/pause", {"confirm": "emails"})
    assert "was already paused" in again.text

    resumed = browser.post("/queues/emails/resume", {"confirm": "emails"})
    assert resumed.status_code == 200 and "resumed queue &#39;emails&#39;" in resumed.text
    leased = {t.name for t in queue.lease(60, 1000)}
    assert "late" in leased and len(leased) == 29  # 30 + late, less the 2 leased by the fixture
    assert 'id="paused-banner"' not in browser.get("/queues/emails").text
    assert browser.get("/api/queues/emails").json()["stats"]["paused"] is False


def test_a_refused_pause_changes_nothing(backend: MemoryBackend, browser: Browser) -> None:
    browser.get("/queues/emails")
    wrong = browser.post("/queues/emails/pause", {"confirm": "reports"})
    assert wrong.status_code == 400
    forged = browser.client.post("/queues/emails/pause", data={"confirm": "emails"})
    assert forged.status_code == 403
    assert backend.paused_since("emails") is None
    assert Queue("emails", backend).lease(60, 1)


def test_read_only_shows_the_pause_but_offers_no_button(
    backend: MemoryBackend, read_only_browser: Browser
) -> None:
    backend.set_paused("emails", True)
    page = read_only_browser.get("/queues/emails")
    assert 'id="paused-banner"' in page.text and 'id="resume-button"' not in page.text
    refused = read_only_browser.post("/queues/emails/resume", {"confirm": "emails"})
    assert refused.status_code == 403
    assert backend.paused_since("emails") is not None


def test_leases_in_flight_finish_while_paused(backend: MemoryBackend) -> None:
    queue = Queue("reports", backend)
    held = queue.lease(60, 2)
    backend.set_paused("reports", True)
    queue.modify_lease(held[0], 120)  # a worker keeps or ends what it holds
    assert all(t.was_deleted for t in queue.delete(held))
    assert queue.stats().tasks == 3
