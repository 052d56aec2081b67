"""The console in a real browser (headless chromium): queues -> queue -> filter by tag -> delete a
task -> purge with the typed confirmation, on memory:// and on the Pub/Sub emulator, with the
figures refreshing in place. Screenshots go to docs/console/ for docs/console.md."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement

from pullqueue import Queue, Settings, Task
from pullqueue.adapters.memory import MemoryBackend
from pullqueue.adapters.pubsub import PubSubBackend
from pullqueue.dedupe.memory import MemoryNameRegistry
from tests.console.browser import chromium, find, served, shot, wait
from tests.support.emulators import shared_emulator_host

pytestmark = pytest.mark.slow


@pytest.fixture
def driver(tmp_path: Path) -> Iterator[WebDriver]:
    with chromium(tmp_path / "profile") as opened:
        yield opened


def task_names(driver: WebDriver) -> list[str]:
    """The names of the listed tasks, read in one script (htmx may swap the list meanwhile)."""
    names: list[str] = driver.execute_script(
        "return Array.from(document.querySelectorAll('tr.task'), r => r.dataset.name);"
    )
    return names


def find_all(driver: WebDriver, css: str) -> list[WebElement]:
    """The elements matching css, once there is at least one."""
    found: list[WebElement] = wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, css))
    return found


def confirm(driver: WebDriver, details: str, typed: str, button: str) -> None:
    """Open a confirmation, type into it, press its button."""
    box = find(driver, details)
    box.find_element(By.TAG_NAME, "summary").click()
    box.find_element(By.NAME, "confirm").send_keys(typed)
    box.find_element(By.XPATH, f".//button[normalize-space()='{button}']").click()


def cell(driver: WebDriver, queue: str, column: int) -> str:
    return driver.find_element(
        By.CSS_SELECTOR, f'tr.queue-row[data-queue="{queue}"] td:nth-child({column})'
    ).text.split("\n")[0]


def add(backend: object, queue: str, count: int, start: int = 0) -> None:
    tags = ["alice", "bob", None]
    Queue(queue, backend).add(  # type: ignore[arg-type]
        [
            Task(f"<script>alert({i})</script>", name=f"t{i}", tag=tags[i % 3])
            for i in range(start, start + count)
        ]
    )


def test_click_through_on_memory(driver: WebDriver) -> None:
    backend = MemoryBackend()
    add(backend, "emails", 90)
    add(backend, "reports", 4)
    Queue("emails", backend).lease(60, 2)
    with served(backend, period=1.0) as url:
        driver.get(url)
        wait(driver, lambda d: cell(d, "emails", 2) == "90")
        wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".plot canvas"))
        driver.execute_script("window.__sameDocument = true")
        # Live: the figures change in place, without a reload.
        add(backend, "reports", 3, start=100)
        wait(driver, lambda d: cell(d, "reports", 2) == "7")
        assert driver.execute_script("return window.__sameDocument") is True
        assert not driver.find_elements(By.CSS_SELECTOR, "script:not([src])")  # no payload ran

        driver.find_element(By.LINK_TEXT, "emails").click()
        wait(driver, lambda d: d.find_element(By.ID, "queue-name").text == "emails")
        assert len(task_names(driver)) == 90

        find(driver, "#tag-input").send_keys("bob")
        driver.find_element(By.ID, "filter").click()
        wait(driver, lambda d: "tag=bob" in d.current_url)
        bobs = task_names(driver)
        assert len(bobs) == 30 and all(int(n[1:]) % 3 == 1 for n in bobs)
        assert {t.text for t in driver.find_elements(By.CSS_SELECTOR, "tr.task td.tag")} == {"bob"}

        victim = bobs[0]
        row = f'tr.task[data-name="{victim}"] details.confirm'
        find(driver, row).find_element(By.TAG_NAME, "summary").click()
        shot(driver, "confirm")
        find(driver, row).find_element(By.NAME, "confirm").send_keys("emails")
        find(driver, row).find_element(By.XPATH, ".//button").click()
        report = find(driver, "#report").text
        assert report == f"deleted task '{victim}' from queue 'emails'"
        assert victim not in {t.name for t in backend.list_tasks("emails")}
        assert len(list(backend.list_tasks("emails"))) == 89

        driver.find_element(By.ID, "back").click()
        confirm(driver, "#purge", "email", "Purge queue")  # a typo: refused, nothing changed
        assert "nothing was changed" in find(driver, "#message").text
        assert len(list(backend.list_tasks("emails"))) == 89
        driver.back()
        driver.refresh()
        confirm(driver, "#purge", "emails", "Purge queue")
        assert find(driver, "#report").text == "purged queue 'emails': 89 tasks removed"
        shot(driver, "purged")
        assert list(backend.list_tasks("emails")) == []
        assert len(list(backend.list_tasks("reports"))) == 7


def test_click_through_on_the_pubsub_emulator(driver: WebDriver) -> None:
    shared_emulator_host("pubsub")
    project = f"pq-browser-{uuid.uuid4().hex[:8]}"
    producer = PubSubBackend(project, auto_create=True, names=MemoryNameRegistry())
    viewer = PubSubBackend(project, settings=Settings(), auto_create=False)
    try:
        add(producer, "emails", 12)
        add(producer, "reports", 2)
        with served(viewer) as url:
            driver.get(url)
            queues = [r.get_attribute("data-queue") for r in find_all(driver, "tr.queue-row")]
            assert queues == ["emails", "reports"]
            wait(driver, lambda d: cell(d, "emails", 2).startswith("unknown"))
            driver.find_element(By.LINK_TEXT, "emails").click()
            wait(driver, lambda d: d.find_element(By.ID, "queue-name").text == "emails")
            assert task_names(driver) == []  # nothing pulled until asked
            assert "costs one delivery attempt" in driver.page_source

            find(driver, "#tag-input").send_keys("bob")
            driver.find_element(By.ID, "filter").click()
            wait(driver, lambda d: "tag=bob" in d.current_url)
            find(driver, "#look").click()
            wait(driver, lambda d: len(task_names(d)) == 4)
            assert sorted(task_names(driver)) == ["t1", "t10", "t4", "t7"]
            driver.execute_script("document.getElementById('task-list').scrollIntoView()")

            row = 'tr.task[data-name="t4"] details.confirm'
            find(driver, row).find_element(By.TAG_NAME, "summary").click()
            find(driver, row).find_element(By.NAME, "confirm").send_keys("emails")
            find(driver, row).find_element(By.XPATH, ".//button").click()
            assert find(driver, "#report").text == "deleted task 't4' from queue 'emails'"

            driver.find_element(By.ID, "back").click()
            find(driver, "#look").click()
            wait(driver, lambda d: len(task_names(d)) == 11)
            assert "t4" not in task_names(driver)

            confirm(driver, "#purge", "emails", "Purge queue")
            assert "purged queue 'emails'" in find(driver, "#report").text
            driver.find_element(By.ID, "back").click()
            find(driver, "#look").click()
            wait(driver, lambda d: "no tasks" in d.find_element(By.ID, "tasks").text)
            time.sleep(0.1)
            left = Queue("reports", producer).lease(30, 10)
            assert sorted(t.name or "" for t in left) == ["t0", "t1"]
    finally:
        producer.close()
        viewer.close()
