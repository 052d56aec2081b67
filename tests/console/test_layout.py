"""The console's pages with real data, in chromium at 1280 px and at 390 px (a phone): long names
and tags, hostile text, a 100,000-task queue, the emulator's unknown figures. Nothing makes a
page wider than the window, a reason is said once, plots read right from the first reading.

The screenshots land in PULLQUEUE_SCREENSHOTS (docs/console/ when refreshing the docs)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from pullqueue import Queue, Settings, Task
from pullqueue.adapters.memory import MemoryBackend
from pullqueue.adapters.pubsub import PubSubBackend
from pullqueue.dedupe.memory import MemoryNameRegistry
from tests.console.browser import chromium, find, served, shot, wait
from tests.console.conftest import fill
from tests.console.test_pubsub import dead_letter
from tests.support.emulators import shared_emulator_host

pytestmark = pytest.mark.slow

WIDTHS = {"wide": 1280, "phone": 390}
LONG_NAME = "n" + "-very-long-task-name" * 24 + "-end"  # 485 characters, no space to break at
LONG_TAG = "customer-" + "x" * 480 + "-tail"  # 494 bytes
LONG_QUEUE = "q" + "-long-queue-name" * 6 + "-en"  # 100 characters, the legacy limit
HOSTILE_TAG = "<script>alert(1)</script>\u202e\x1b[31m" + "ü" * 40


@pytest.fixture
def driver(tmp_path: Path) -> Iterator[WebDriver]:
    with chromium(tmp_path / "profile") as opened:
        yield opened


def at_width(driver: WebDriver, width: int) -> None:
    driver.set_window_size(width, 1000)
    inner = driver.execute_script("return window.innerWidth")
    driver.set_window_size(width + (width - inner), 1000)  # the viewport, not the window


def overflow(driver: WebDriver) -> int:
    """How many pixels the page is wider than the window (0: it fits)."""
    width: int = driver.execute_script(
        "return document.documentElement.scrollWidth - window.innerWidth"
    )
    return width


def is_cut(driver: WebDriver, element: Any, widest: int = 420) -> bool:
    """Whether an element shows its text on one line, cut (its content is wider than it is),
    in at most `widest` px (a cell, not a line across the page)."""
    cut: bool = driver.execute_script(
        "var e = arguments[0], s = getComputedStyle(e);"
        " return s.whiteSpace === 'nowrap' && s.textOverflow === 'ellipsis'"
        " && e.scrollWidth > e.clientWidth && e.clientWidth < arguments[1];",
        element,
        widest,
    )
    return cut


def lines(driver: WebDriver, element: Any) -> int:
    """How many lines an element's text takes."""
    count: int = driver.execute_script(
        "var r = document.createRange(); r.selectNodeContents(arguments[0]);"
        " return new Set(Array.from(r.getClientRects(), c => Math.round(c.top))).size;",
        element,
    )
    return count


def full_shot(driver: WebDriver, name: str) -> None:
    """A screenshot of the whole page (up to 2,400 px tall), then the window as it was."""
    size = driver.get_window_size()
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(size["width"], min(max(height + 140, size["height"]), 2400))
    shot(driver, name)
    driver.set_window_size(size["width"], size["height"])


def page_text(driver: WebDriver) -> str:
    text: str = driver.execute_script("return document.body.innerText")
    return text


def plots(driver: WebDriver) -> list[dict[str, Any]]:
    """Each drawn plot's x window (seconds), x tick labels and y tick label box vs y title."""
    found: list[dict[str, Any]] = driver.execute_script(
        """
        return (window.pullqueuePlots || []).map(function (u) {
          return {
            wide: u.root.parentNode.classList.contains('wide'),
            xmin: u.scales.x.min, xmax: u.scales.x.max,
            xlabels: (u.axes[0]._values || []).map(String),
            ylabels: (u.axes[1]._values || []).map(String),
            ysize: u.axes[1]._size,
            ylabelWidth: Math.max.apply(null, [0].concat((u.axes[1]._values || []).map(
              function (v) { return u.ctx.measureText(String(v)).width / devicePixelRatio; })))
          };
        });
        """
    )
    return found


def memory_data() -> MemoryBackend:
    backend = MemoryBackend()
    queue = Queue("emails", backend)
    queue.add(
        [
            Task(b"<b>long</b>", name=LONG_NAME, tag=LONG_TAG),
            Task(b"\x00\x01binary", name="hostile-tag", tag=HOSTILE_TAG),
            Task("ünïcødé payload ✓", name="unicode-tag", tag="ünïcødé ✓ " * 20),
        ]
    )
    fill(backend, "emails", 40, ["alice", "bob", None])
    fill(backend, LONG_QUEUE, 3, [None])
    return backend


def test_memory_pages_at_both_widths(driver: WebDriver) -> None:
    backend = memory_data()
    fill(backend, "big", 100_000, [f"user-{k}" for k in range(20)])
    with served(backend, period=1.0) as url:
        for label, width in WIDTHS.items():
            at_width(driver, width)
            driver.get(url)
            wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".plot canvas"))
            time.sleep(2.5)  # a few readings a second apart
            driver.refresh()
            wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".plot canvas"))
            text = page_text(driver)
            # memory:// keeps no dead letters: said once, under the table, not in every row.
            assert text.count("keeps no dead letters") == 1, text
            assert overflow(driver) <= 0, f"queues page {overflow(driver)} px too wide at {width}"
            link = find(driver, f'a.queue-link[href="/queues/{LONG_QUEUE}"]')
            assert link.get_attribute("title") == LONG_QUEUE
            full_shot(driver, f"queues-{label}")

            driver.get(url + "queues/emails")
            wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".plot.wide canvas"))
            assert overflow(driver) <= 0, f"queue page {overflow(driver)} px too wide at {width}"
            cell = find(driver, f'tr.task[data-name="{LONG_NAME}"] td.name')
            assert cell.get_attribute("title") == LONG_NAME
            assert is_cut(driver, cell)  # one line with an ellipsis, not 20 lines of one name
            tag = find(driver, f'tr.task[data-name="{LONG_NAME}"] td.tag')
            assert tag.get_attribute("title") == LONG_TAG
            full_shot(driver, f"queue-{label}")

            driver.get(url + "queues/big")
            wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".plot.wide canvas"))
            for plot in plots(driver):
                if not plot["wide"]:
                    continue
                assert plot["xmax"] - plot["xmin"] >= 60  # a window, not one point stretched
                assert all("." not in x for x in plot["xlabels"]), plot["xlabels"]
                assert "100,000" in plot["ylabels"] or "100k" in plot["ylabels"], plot
                # Tick labels end 15 px (tick and gap) from the plot; the axis title has its own
                # band beyond the axis, so the labels must fit the axis to leave it clear.
                assert plot["ysize"] >= plot["ylabelWidth"] + 15, plot
            shot(driver, f"queue-big-{label}")


def test_the_first_reading_draws_a_sensible_window(driver: WebDriver) -> None:
    backend = MemoryBackend()
    fill(backend, "fresh", 7, [None])
    with served(backend, period=3600.0) as url:  # one reading, none after
        driver.get(url + "queues/fresh")
        wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".plot.wide canvas"))
        (plot,) = [p for p in plots(driver) if p["wide"]]
        now = time.time()
        assert now - 3700 <= plot["xmin"] and plot["xmax"] <= now + 600, plot
        assert plot["xmax"] - plot["xmin"] >= 60
        assert all("." not in x for x in plot["xlabels"]), plot["xlabels"]
        assert plot["ylabels"] and all("." not in y for y in plot["ylabels"]), plot


def test_emulator_pages_at_both_widths(driver: WebDriver) -> None:
    shared_emulator_host("pubsub")
    project = f"pq-layout-{uuid.uuid4().hex[:8]}"
    settings = Settings(pubsub_max_delivery_attempts=5)
    producer = PubSubBackend(
        project, settings=settings, auto_create=True, names=MemoryNameRegistry()
    )
    viewer = PubSubBackend(project, settings=settings, auto_create=False)
    try:
        Queue("emails", producer).add(
            [Task(b"x", name=f"t{i}", tag=["alice", None, HOSTILE_TAG][i % 3]) for i in range(9)]
            + [Task(b"long", name=LONG_NAME, tag=LONG_TAG)]
        )
        dead_letter(producer, "emails", "t0", "ValueError: " + "boom " * 40, tag="alice")
        Queue("reports", producer).add([Task(b"r", name="r1")])
        producer.close()  # what its leases by tag held goes back, for the console to look at
        with served(viewer) as url:
            for label, width in WIDTHS.items():
                at_width(driver, width)
                driver.get(url)
                wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "tr.queue-row"))
                text = page_text(driver)
                assert text.count("the Pub/Sub emulator has no Cloud Monitoring") == 1, text
                assert text.count("counts neither leases nor completions") == 1, text
                assert overflow(driver) <= 0, f"queues {overflow(driver)} px too wide at {width}"
                full_shot(driver, f"pubsub-queues-{label}")

                driver.get(url + "queues/emails")
                find(driver, "#dead-letter-list tr.dead-letter")
                text = page_text(driver)
                assert text.count("the Pub/Sub emulator has no Cloud Monitoring") == 1, text
                assert text.count("Pub/Sub lists no tasks") == 1, text
                shards = find(driver, "details#shards")
                assert "16 shards" in shards.text
                assert not shards.get_attribute("open")
                stamp = find(driver, "#dead-letter-list tr.dead-letter td.when")
                assert lines(driver, stamp) == 1, "the dead-lettered time wraps"
                error = find(driver, "#dead-letter-list tr.dead-letter td.error .clamp")
                assert error.get_attribute("title") == "ValueError: " + "boom " * 40
                assert error.size["height"] < 70  # three lines, the rest on hover
                assert overflow(driver) <= 0, f"queue {overflow(driver)} px too wide at {width}"
                full_shot(driver, f"pubsub-queue-{label}")

                find(driver, "#look").click()
                wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "tr.task"))
                driver.execute_script("document.getElementById('task-list').scrollIntoView()")
                assert overflow(driver) <= 0
                shot(driver, f"pubsub-look-{label}")
    finally:
        producer.close()
        viewer.close()


def test_task_found_and_paused_pages_at_both_widths(driver: WebDriver) -> None:
    """The pages of part 4 with the same real data: a task with a 485-character name and a
    494-byte tag, a search finding it, a tag's bulk actions, a paused queue with a 100-character
    name. Each cut with the whole value on hover, none wider than the window."""
    backend = memory_data()
    Queue(LONG_QUEUE, backend).add([Task(b"x", name="later", tag=LONG_TAG, countdown=600)])
    backend.set_paused(LONG_QUEUE, True)
    with served(backend) as url:
        for label, width in WIDTHS.items():
            at_width(driver, width)
            driver.get(url + f"queues/emails/task?name={LONG_NAME}")
            heading = find(driver, "h1 .cut")
            assert heading.get_attribute("title") == LONG_NAME
            assert is_cut(driver, heading, widest=width)  # one line, not 20 lines of one name
            crumb = find(driver, "#task-name")
            assert crumb.get_attribute("title") == LONG_NAME and is_cut(driver, crumb, width)
            assert find(driver, "#attr-name").text == LONG_NAME  # the whole, in the details
            assert find(driver, "#attr-tag").text == LONG_TAG
            assert overflow(driver) <= 0, f"task page {overflow(driver)} px too wide at {width}"
            full_shot(driver, f"task-{label}")

            driver.get(url + "queues/emails/task?name=hostile-tag")
            assert find(driver, "#attr-tag").text.startswith("<script>alert(1)</script>")
            assert find(driver, "#payload-hex").text.startswith("00000000  00 01 62 69")
            assert overflow(driver) <= 0, f"binary task {overflow(driver)} px too wide at {width}"

            driver.get(
                url + "queues/emails/find?name=&payload=%3Cb%3E"
            )  # '<b>': the long-named task
            find(driver, "#found-note")
            cell = find(driver, f'tr.found-task[data-name="{LONG_NAME}"] td.name')
            assert cell.get_attribute("title") == LONG_NAME
            assert is_cut(driver, cell)
            tag = find(driver, f'tr.found-task[data-name="{LONG_NAME}"] td.tag')
            assert tag.get_attribute("title") == LONG_TAG
            assert is_cut(driver, tag)
            assert overflow(driver) <= 0, f"found page {overflow(driver)} px too wide at {width}"
            full_shot(driver, f"found-{label}")

            driver.get(url + f"queues/{LONG_QUEUE}?tag={LONG_TAG}")
            find(driver, "#paused-banner")
            bulk = find(driver, "#bulk h2 .cut")
            assert bulk.get_attribute("title") == LONG_TAG
            assert is_cut(driver, bulk)
            for opened in ("#resume-queue", "#delete-tag", "#run-tag-now"):
                find(driver, f"{opened} summary").click()
            assert overflow(driver) <= 0, f"paused queue {overflow(driver)} px too wide at {width}"
            full_shot(driver, f"paused-{label}")
