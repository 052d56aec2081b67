"""A task's own page, the search and the bulk actions of a tag on memory://, through Starlette's
TestClient: every attribute and the whole payload (escaped text, hex, a download that is never
rendered), exact counts, and nothing changed without the typed name or the CSRF token."""

from __future__ import annotations

import time

from pullqueue import Queue, Task
from pullqueue.adapters.memory import MemoryBackend
from pullqueue.console.taskview import payload_view
from tests.console.conftest import Browser


def test_a_tasks_page_shows_every_attribute_and_the_whole_payload(
    backend: MemoryBackend, browser: Browser
) -> None:
    hostile = "<script>alert(1)</script>\n" + "line\t" * 5000
    Queue("emails", backend).add(Task(hostile.encode(), name="long-one", tag="<b>tag</b>"))
    page = browser.get("/queues/emails/task?name=long-one")
    assert page.status_code == 200
    text = page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and "<script>alert" not in text
    assert text.count("line\t") == 5000  # the whole payload, not a preview
    assert "&lt;b&gt;tag&lt;/b&gt;" in text
    assert 'id="attr-state">available<' in text
    assert "UTF-8 text" in text
    download = browser.get("/queues/emails/task/payload?name=long-one")
    assert download.content == hostile.encode()
    assert download.headers["content-type"] == "application/octet-stream"
    assert download.headers["content-disposition"] == 'attachment; filename="emails-long-one.bin"'
    assert download.headers["x-content-type-options"] == "nosniff"


def test_binary_payloads_show_as_hex_and_a_leased_task_shows_its_lease(
    backend: MemoryBackend, browser: Browser
) -> None:
    queue = Queue("reports", backend)
    queue.add(Task(bytes(range(256)), name="bin"))
    leased = next(t for t in queue.lease(60, 100) if t.name == "bin")
    page = browser.get("/queues/reports/task?name=bin").text
    assert 'id="payload-hex"' in page and "binary (shown in hex)" in page
    assert "00000000  00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f  |................|" in page
    assert "00000040  40 41 42 43" in page and "|@ABCDEFGHIJKLMNO|" in page
    assert 'id="attr-state">leased<' in page and "leased by a worker until" in page
    assert 'id="attr-retries">1 (leases so far)' in page
    assert 'id="run-now"' in page and 'id="delete"' in page
    assert leased.retry_count == 1


def test_payload_view_keeps_text_and_dumps_the_rest() -> None:
    assert payload_view(b"caf\xc3\xa9\n").text == "café\n"
    assert payload_view(b"\x00abc").hex_lines == ["00000000  00 61 62 63" + " " * 36 + "  |.abc|"]
    assert payload_view(b"\xff").text is None
    assert payload_view(b"").text == ""


def test_an_unknown_task_is_404_and_a_missing_name_400(browser: Browser) -> None:
    assert browser.get("/queues/emails/task?name=nope").status_code == 404
    assert browser.get("/queues/emails/task").status_code == 400
    assert browser.get("/queues/emails/task/payload?name=nope").status_code == 404


def test_make_a_scheduled_task_available_now(backend: MemoryBackend, browser: Browser) -> None:
    queue = Queue("reports", backend)
    queue.add(Task(b"later", name="later", countdown=3600))
    page = browser.get("/queues/reports/task?name=later").text
    assert 'id="attr-state">scheduled<' in page
    wrong = browser.post("/queues/reports/run-task-now", {"name": "later", "confirm": "x"})
    assert wrong.status_code == 400
    done = browser.post("/queues/reports/run-task-now", {"name": "later", "confirm": "reports"})
    assert "was due" in done.text and "available now" in done.text
    assert "later" in {t.name for t in queue.lease(60, 100)}


def test_find_by_exact_name_and_by_payload_substring(
    backend: MemoryBackend, browser: Browser
) -> None:
    found = browser.get("/queues/emails/find?name=t7", follow_redirects=False)
    assert found.status_code == 303 and found.headers["location"].endswith("/task?name=t7")
    missing = browser.get("/queues/emails/find?name=t", follow_redirects=False)
    assert missing.status_code == 200 and 'id="nothing-found"' in missing.text  # exact only
    by_payload = browser.get("/queues/emails/find?payload=payload-1").text
    # payload-1, payload-10..19: 11 of the 30, leased ones included
    assert "11 tasks found" in by_payload
    assert by_payload.count('class="found-task"') == 11
    both = browser.get("/queues/emails/find?name=t1&payload=x")
    assert both.status_code == 400


def test_delete_every_task_of_a_tag_reports_exact_counts(
    backend: MemoryBackend, browser: Browser
) -> None:
    before = {t.name: t.tag for t in backend.list_tasks("emails")}
    browser.get("/queues/emails?tag=alice")
    refused = browser.post("/queues/emails/delete-tag", {"tag": "alice", "confirm": "email"})
    assert refused.status_code == 400
    forged = browser.client.post(
        "/queues/emails/delete-tag", data={"tag": "alice", "confirm": "emails"}
    )
    assert forged.status_code == 403
    assert {t.name for t in backend.list_tasks("emails")} == set(before)
    done = browser.post("/queues/emails/delete-tag", {"tag": "alice", "confirm": "emails"})
    # t0 (alice) was leased by the fixture
    assert "deleted 10 tasks with tag &#39;alice&#39;" in done.text
    assert "(1 of them leased by a worker)" in done.text
    left = {t.name: t.tag for t in backend.list_tasks("emails")}
    assert left == {n: t for n, t in before.items() if t != "alice"}
    again = browser.post("/queues/emails/delete-tag", {"tag": "alice", "confirm": "emails"})
    assert "has no task with tag" in again.text


def test_make_future_tasks_of_a_tag_available_now(backend: MemoryBackend, browser: Browser) -> None:
    queue = Queue("later", backend)
    for start in range(0, 1200, 100):
        queue.add(
            [Task(b"x", name=f"f{i}", tag="t", countdown=600) for i in range(start, start + 100)]
        )
    queue.add([Task(b"x", name=f"o{i}", tag="other", countdown=600) for i in range(3)])
    queue.add(Task(b"x", name="now", tag="t"))
    held = queue.lease(60, 1)
    assert [t.name for t in held] == ["now"]
    browser.get("/queues/later?tag=t")
    done = browser.post("/queues/later/run-tag-now", {"tag": "t", "confirm": "later"})
    assert "made 1,200 future tasks with tag &#39;t&#39;" in done.text
    assert "1 tasks leased by a worker were left alone" in done.text
    leased = queue.lease(60, 1000, tag="t")
    assert len(leased) == 1000 and len(queue.lease(60, 1000, tag="t")) == 200
    assert queue.lease(60, 100, tag="other") == []  # other tags untouched
    assert time.time() < held[0].eta_posix  # the worker's lease stands


def test_bulk_buttons_show_only_with_a_tag_filter_and_not_read_only(
    browser: Browser, read_only_browser: Browser
) -> None:
    assert 'id="bulk"' not in browser.get("/queues/emails").text
    page = browser.get("/queues/emails?tag=bob").text
    assert 'id="delete-tag"' in page and 'id="run-tag-now"' in page
    assert 'id="redrive-tag"' not in page  # memory:// keeps no dead letters
    assert 'id="bulk"' not in read_only_browser.get("/queues/emails?tag=bob").text
    refused = read_only_browser.post(
        "/queues/emails/delete-tag", {"tag": "bob", "confirm": "emails"}
    )
    assert refused.status_code == 403
