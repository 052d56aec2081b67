"""The console's operator actions in a real browser (headless chromium): pause and resume a queue
with the typed confirmation, on memory:// and on the Pub/Sub emulator, where a second backend
(another process's) sees the pause through the marker topic."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from pullqueue import Queue, Settings, Task
from pullqueue.adapters.memory import MemoryBackend
from pullqueue.adapters.pubsub import PubSubBackend
from tests.console.browser import chromium, find, served, shot, wait
from tests.console.test_browser import confirm
from tests.support.emulators import shared_emulator_host

pytestmark = pytest.mark.slow


@pytest.fixture
def driver(tmp_path: Path) -> Iterator[WebDriver]:
    with chromium(tmp_path / "profile") as opened:
        yield opened


def badge(driver: WebDriver, queue: str) -> bool:
    return bool(
        driver.find_elements(By.CSS_SELECTOR, f'tr.queue-row[data-queue="{queue}"] .paused')
    )


def test_pause_and_resume_on_memory(driver: WebDriver) -> None:
    backend = MemoryBackend()
    queue = Queue("emails", backend)
    queue.add([Task(b"x", name=f"t{i}") for i in range(5)])
    Queue("reports", backend).add(Task(b"y"))
    with served(backend, period=1.0) as root:
        url = root.rstrip("/")
        driver.get(url + "/queues/emails")
        confirm(driver, "#pause-queue", "email", "Pause queue")  # a typo: refused
        assert "nothing was changed" in find(driver, "#message").text
        assert backend.paused_since("emails") is None
        driver.back()
        driver.refresh()
        confirm(driver, "#pause-queue", "emails", "Pause queue")
        assert find(driver, "#report").text.startswith("paused queue 'emails'")
        assert queue.lease(60, 10) == []
        driver.get(url)
        wait(driver, lambda d: badge(d, "emails"))
        assert not badge(driver, "reports")
        shot(driver, "paused-queues")
        driver.find_element(By.LINK_TEXT, "emails").click()
        assert "Paused since" in find(driver, "#paused-banner").text
        confirm(driver, "#resume-queue", "emails", "Resume queue")
        assert find(driver, "#report").text.startswith("resumed queue 'emails'")
        assert len(queue.lease(60, 10)) == 5
        driver.get(url)
        wait(
            driver, lambda d: d.find_elements(By.CSS_SELECTOR, 'tr.queue-row[data-queue="emails"]')
        )
        assert not badge(driver, "emails")


def test_pause_on_the_pubsub_emulator_reaches_another_process(driver: WebDriver) -> None:
    shared_emulator_host("pubsub")
    project = f"pq-browser-{uuid.uuid4().hex[:8]}"
    producer = PubSubBackend(project, auto_create=True)
    worker = PubSubBackend(project, settings=Settings(pubsub_pause_check=0.5))
    viewer = PubSubBackend(project)
    try:
        producer_queue = Queue("emails", producer)
        producer_queue.add([Task(b"x") for _ in range(3)])
        with served(viewer) as root:
            url = root.rstrip("/")
            driver.get(url + "/queues/emails")
            confirm(driver, "#pause-queue", "emails", "Pause queue")
            report = find(driver, "#report").text
            assert report.startswith("paused queue 'emails'") and "within 10 s" in report
            wait(driver, lambda _: worker.paused_since("emails") is not None, seconds=5)
            assert Queue("emails", worker).lease(60, 10) == []
            driver.get(url + "/queues/emails")
            find(driver, "#paused-banner")
            confirm(driver, "#resume-queue", "emails", "Resume queue")
            assert find(driver, "#report").text.startswith("resumed queue 'emails'")
            wait(driver, lambda _: worker.paused_since("emails") is None, seconds=5)
            got: list[Task] = []
            while len(got) < 3 and (batch := Queue("emails", worker).lease(60, 10)):
                got += batch
            assert len(got) == 3
    finally:
        for backend in (producer, worker, viewer):
            backend.close()


def test_task_page_find_and_bulk_delete_on_memory(driver: WebDriver) -> None:
    backend = MemoryBackend()
    queue = Queue("emails", backend)
    queue.add(
        [
            Task(f"<img src=x onerror=alert({i})> order {i}", name=f"t{i}", tag=["a", "b"][i % 2])
            for i in range(40)
        ]
    )
    queue.add(Task(bytes(range(40)), name="binary", tag="a"))
    with served(backend) as root:
        url = root.rstrip("/")
        driver.get(url + "/queues/emails?tag=a")
        find(driver, 'a.task-link[href$="name=t2"]').click()
        assert find(driver, "#attr-name").text == "t2"
        assert find(driver, "#payload-text").text == "<img src=x onerror=alert(2)> order 2"
        assert find(driver, "#download").get_attribute("download") == "emails-t2.bin"
        assert not driver.find_elements(By.CSS_SELECTOR, "img")  # the payload stayed text

        driver.get(url + "/queues/emails/task?name=binary")
        assert find(driver, "#payload-hex").text.startswith("00000000  00 01 02 03")

        driver.get(url + "/queues/emails")
        find(driver, "#find-payload").send_keys("order 1")
        driver.find_element(By.ID, "find-button").click()
        assert find(driver, "#found-note").text.startswith("11 tasks found")  # 1, 10-19
        driver.get(url + "/queues/emails")
        find(driver, "#find-name").send_keys("t7")
        driver.find_element(By.ID, "find-button").click()
        wait(driver, lambda d: d.find_element(By.ID, "attr-name").text == "t7")

        driver.get(url + "/queues/emails?tag=a")
        confirm(driver, "#delete-tag", "emails", "Delete tasks")
        report = find(driver, "#report").text
        assert (
            report
            == "deleted 21 tasks with tag 'a' from queue 'emails' (0 of them leased by a worker)"
        )
        shot(driver, "bulk-deleted")
        assert {t.tag for t in backend.list_tasks("emails")} == {"b"}
        assert len(list(backend.list_tasks("emails"))) == 20


def test_make_a_tags_future_tasks_available_and_a_long_task_on_a_phone(driver: WebDriver) -> None:
    backend = MemoryBackend()
    queue = Queue("later", backend)
    queue.add([Task(b"x", name=f"f{i}", tag="t", countdown=3600) for i in range(30)])
    long_name = "n" * 500
    queue.add(Task(("word " * 2000 + "z" * 3000).encode(), name=long_name, tag="T" * 500))
    with served(backend) as root:
        url = root.rstrip("/")
        driver.get(url + "/queues/later?tag=t")
        confirm(driver, "#run-tag-now", "later", "Make available now")
        assert find(driver, "#report").text == (
            "made 30 future tasks with tag 't' of queue 'later' available now"
        )
        assert len(queue.lease(60, 100, tag="t")) == 30
        for width in (1280, 390):
            driver.set_window_size(width, 900)
            driver.get(url + f"/queues/later/task?name={long_name}")
            find(driver, "#attr-name")
            wide: int = driver.execute_script("return document.documentElement.scrollWidth")
            assert wide <= driver.execute_script("return window.innerWidth"), width
            assert find(driver, "h1 .cut").get_attribute("title") == long_name  # cut, on hover
            assert find(driver, "#attr-name").text == long_name  # whole, in the table
