"""The console's pages on memory://: every queue with its figures, a queue's tags, its tasks
paged in (ETA, name) order through 100,000 of them, and figures that are unknown with a reason
rather than 0."""

from __future__ import annotations

import re

from pullqueue import Queue
from pullqueue.adapters.memory import MemoryBackend
from tests.console.conftest import Browser, console, fill

ROW = re.compile(r'<tr class="task" data-name="([^"]+)">')


def cells(html: str, queue: str) -> list[str]:
    """The text of a queue row's figure cells on the queues page."""
    row = html.split(f'<tr class="queue-row" data-queue="{queue}">', 1)[1].split("</tr>", 1)[0]
    found = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
    return [re.sub(r"<[^>]+>", " ", c).split()[0] for c in found[1:6]]


def test_queues_page_lists_every_queue_with_its_figures(browser: Browser) -> None:
    page = browser.get("/")
    assert page.status_code == 200
    backlog, oldest, dead, leases, completions = cells(page.text, "emails")
    assert (backlog, dead, leases, completions) == ("30", "unknown", "2/min", "0/min")
    assert oldest in ("0", "1", "2")  # seconds since the oldest task's ETA
    assert cells(page.text, "reports")[0] == "5"
    # memory:// keeps no dead letters: unknown, with the reason, never 0.
    assert "keeps no dead letters" in page.text
    assert 'hx-trigger="every 5s"' in page.text


def test_completions_count_deleted_leased_tasks(backend: MemoryBackend, browser: Browser) -> None:
    queue = Queue("emails", backend)
    queue.delete(queue.lease(60, 3))
    figures = browser.get("/api/queues/emails").json()
    assert figures["backlog"]["value"] == 27
    assert figures["leases_per_minute"]["value"] == 5
    assert figures["completions_per_minute"]["value"] == 3


def test_the_fragment_refreshes_figures_without_a_reload(
    backend: MemoryBackend, browser: Browser
) -> None:
    assert cells(browser.get("/fragments/queues").text, "reports")[0] == "5"
    Queue("reports", backend).purge()
    browser.client.app.state.console.sampler.read()  # type: ignore[attr-defined]
    fragment = browser.get("/fragments/queues").text
    assert "<html" not in fragment
    assert cells(fragment, "reports")[0] == "0"


def test_queue_page_shows_tags_and_tasks_as_the_legacy_console_did(browser: Browser) -> None:
    page = browser.get("/queues/emails").text
    tags = dict(re.findall(r'tag=(\w+)">\w+</a></td><td class="num">(\d+)', page))
    assert tags == {"alice": "10", "bob": "10"}
    assert 'class="none">untagged</span></td><td class="num">10' in page
    names = ROW.findall(page)
    assert len(names) == 30
    # Leased tasks (t0, t1) have an ETA one lease ahead: listed last, with their retry count.
    assert names[:3] == ["t10", "t11", "t12"] and set(names[-2:]) == {"t0", "t1"}
    t0 = page.split('data-name="t0"', 1)[1].split("</tr>", 1)[0]
    assert ">leased<" in t0 and '<td class="num">1</td>' in t0


def test_tag_filter_shows_only_that_tag(browser: Browser) -> None:
    page = browser.get("/queues/emails", params={"tag": "bob"}).text
    names = ROW.findall(page)
    assert len(names) == 10 and all(int(n[1:]) % 3 == 1 for n in names)


def expected_order(backend: MemoryBackend, queue: str, tag: str | None = None) -> list[str]:
    return [
        t.name or ""
        for t in sorted(backend.list_tasks(queue), key=lambda t: (t.eta_posix or 0, t.name or ""))
        if tag is None or t.tag == tag
    ]


def walk(browser: Browser, path: str, pages: int) -> list[list[str]]:
    """The task names of up to `pages` pages, following the next-page links."""
    found: list[list[str]] = []
    page = browser.get(path).text
    while True:
        found.append(ROW.findall(page))
        link = re.search(r'id="next-page" href="([^"]+)"', page)
        if link is None or len(found) == pages:
            return found
        page = browser.get(link.group(1).replace("&amp;", "&")).text


def test_paging_reaches_every_task_once_in_eta_order(backend: MemoryBackend) -> None:
    fill(backend, "mid", 1050, ["a", "b", None])
    Queue("mid", backend).lease(60, 7)  # leased tasks move to the end (their lease expiry)
    for browser in console(backend):
        pages = walk(browser, "/queues/mid", 100)
        assert [len(p) for p in pages] == [100] * 10 + [50]
        assert [n for p in pages for n in p] == expected_order(backend, "mid")
        tagged = walk(browser, "/queues/mid?tag=b", 100)
        assert [n for p in tagged for n in p] == expected_order(backend, "mid", "b")


def test_paging_through_100000_tasks() -> None:
    backend = MemoryBackend()
    fill(backend, "big", 100_000, [f"user-{k}" for k in range(50)])
    for browser in console(backend):
        pages = walk(browser, "/queues/big", 3)
        assert [n for p in pages for n in p] == expected_order(backend, "big")[:300]
        tagged = browser.get("/queues/big", params={"tag": "user-7"}).text
        names = ROW.findall(tagged)
        assert len(names) == 100 and all(int(n[1:]) % 50 == 7 for n in names)
        assert '">user-7</a></td><td class="num">2,000</td>' in tagged


def test_unknown_queue_is_404_and_creates_nothing(backend: MemoryBackend, browser: Browser) -> None:
    response = browser.get("/queues/nosuch")
    assert response.status_code == 404 and "no queue named" in response.text
    assert backend.list_queues() == ["emails", "reports"]
    assert browser.get("/queues/bad%20name").status_code == 404


def test_backlog_history_feeds_the_plot(backend: MemoryBackend, browser: Browser) -> None:
    sampler = browser.client.app.state.console.sampler  # type: ignore[attr-defined]
    sampler.read()
    Queue("reports", backend).purge()
    sampler.read()
    series = browser.get("/api/backlog").json()
    times, values = series["reports"]
    assert values[-2:] == [5, 0] and times == sorted(times)
    page = browser.get("/").text
    assert 'src="/static/uPlot.iife.min.js"' in page and 'src="/static/htmx.min.js"' in page
    assert browser.get("/static/htmx.min.js").status_code == 200
    assert browser.get("/static/uPlot.iife.min.js").status_code == 200


def test_a_backend_that_cannot_list_opens_queues_by_name(backend: MemoryBackend) -> None:
    from pullqueue.adapters.delegating import DelegatingBackend

    unlisted = DelegatingBackend(backend)  # no list_queues, no list_tasks: like appengine://
    for browser in console(unlisted):  # type: ignore[arg-type]
        page = browser.get("/").text
        assert "cannot list its queues" in page and 'class="queue-row"' not in page
        opened = browser.get("/go", params={"q": "emails"}, follow_redirects=False)
        assert opened.status_code == 303 and opened.headers["location"] == "/queues/emails"
        queue_page = browser.get("/queues/emails").text
        assert "cannot show tasks without leasing them" in queue_page
        assert browser.get("/api/queues/emails").json()["backlog"]["value"] == 30
        assert 'data-queue="emails"' in browser.get("/").text  # watched from now on
