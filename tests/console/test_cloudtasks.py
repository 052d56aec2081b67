"""The console on the legacy queue through Cloud Tasks v2beta2 (the real client over REST against
a faithful model): the pull queues of the location and not its push queues, the service's
estimated figures, the tasks listed and paged, delete and purge."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from pullqueue.adapters.cloudtasks import CloudTasksBackend
from pullqueue.console import create_app
from tests.console.conftest import Browser
from tests.support.cloudtasks_fake import CloudTasksModel, cloudtasks_service

ROW = re.compile(r'<tr class="task" data-name="([^"]+)">')


@pytest.fixture
def service() -> Iterator[CloudTasksModel]:
    with cloudtasks_service(queues=["mail", "billing"], lease_quota_per_second=None) as model:
        model.create_queue("webhooks", mode="push")
        for i in range(150):
            model.seed("mail", b"x" * i, name=f"m{i:03}", tag=["a", "b"][i % 2])
        model.seed("billing", b"invoice", name="b1")
        yield model


@pytest.fixture
def browser(service: CloudTasksModel) -> Iterator[Browser]:
    backend: CloudTasksBackend = service.backend()
    with TestClient(create_app(backend, sample_in_background=False)) as client:
        yield Browser(client)
    backend.close()


def test_lists_the_pull_queues_with_the_services_figures(
    service: CloudTasksModel, browser: Browser
) -> None:
    page = browser.get("/").text
    assert re.findall(r'data-queue="([^"]+)">\s*<td>', page) == ["billing", "mail"]
    figures = browser.get("/api/queues/mail").json()
    assert figures["backlog"] == {"value": 150, "reason": None, "exact": False}
    assert "~150" in page
    assert browser.get("/queues/webhooks").status_code == 404  # a push queue is not shown


def test_tasks_paged_filtered_deleted_and_purged(
    service: CloudTasksModel, browser: Browser
) -> None:
    first = browser.get("/queues/mail").text
    assert ROW.findall(first) == [f"m{i:03}" for i in range(100)]
    link = re.search(r'id="next-page" href="([^"]+)"', first)
    assert link is not None
    assert ROW.findall(browser.get(link.group(1).replace("&amp;", "&")).text) == [
        f"m{i:03}" for i in range(100, 150)
    ]
    assert ROW.findall(browser.get("/queues/mail?tag=b").text)[:3] == ["m001", "m003", "m005"]
    done = browser.post("/queues/mail/delete-task", {"name": "m007", "confirm": "mail"})
    assert "deleted task &#39;m007&#39;" in done.text
    assert "m007" not in {t.name for t in service.tasks("mail")}
    purged = browser.post("/queues/mail/purge", {"confirm": "mail"})
    assert "purged queue &#39;mail&#39;" in purged.text and "about 149 tasks" in purged.text
    assert service.tasks("mail") == [] and len(service.tasks("billing")) == 1


def test_task_page_find_and_a_tags_delete_on_the_legacy_queue(
    service: CloudTasksModel, browser: Browser
) -> None:
    page = browser.get("/queues/mail/task?name=m005").text
    assert 'id="attr-name">m005<' in page and 'id="attr-tag"' in page
    assert "5 bytes, UTF-8 text" in page
    assert 'id="pause-unsupported"' in browser.get("/queues/mail").text  # its own console pauses
    found = browser.get("/queues/mail/find?name=m010", follow_redirects=False)
    assert found.status_code == 303
    by_payload = browser.get("/queues/mail/find?payload=" + "x" * 148).text
    assert "2 tasks found" in by_payload  # m148, m149
    browser.get("/queues/mail?tag=a")
    done = browser.post("/queues/mail/delete-tag", {"tag": "a", "confirm": "mail"})
    assert "deleted 75 tasks with tag &#39;a&#39;" in done.text
    assert {t.name for t in service.tasks("mail")} == {f"m{i:03}" for i in range(1, 150, 2)}
