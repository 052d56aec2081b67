"""A real browser for the console tests: Debian's chromium driven by Selenium through
/usr/bin/chromedriver, headless, offline, with a fresh profile; a console served in a thread.

A missing browser fails the test (CI installs `chromium chromium-driver`, see .ci/run); Selenium
Manager never downloads anything (SE_OFFLINE and an explicit driver path).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

from pullqueue.adapters.base import Backend
from pullqueue.console import create_app
from pullqueue.console.app import loopback_hosts
from pullqueue.console.server import BackgroundConsole
from pullqueue.listen import bind

CHROMEDRIVER = "/usr/bin/chromedriver"
# Screenshots are always taken; they refresh docs/console/ only when asked
# (PULLQUEUE_SCREENSHOTS=docs/console pytest tests/console), so a test run leaves the tree clean.
SCREENSHOTS = Path(
    os.environ.get("PULLQUEUE_SCREENSHOTS")
    or Path(tempfile.gettempdir()) / f"pullqueue-console-screenshots-{os.getpid()}"
)
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,1000",
)
T = TypeVar("T")


def chromium_binary() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None or not Path(CHROMEDRIVER).exists():
        pytest.fail(
            "chromium and chromium-driver are needed for the browser tests:"
            " apt-get install -y chromium chromium-driver"
        )
    return found


@contextmanager
def chromium(profile: Path) -> Iterator[WebDriver]:
    """A headless chromium with a fresh profile in `profile`."""
    binary = chromium_binary()
    os.environ["SE_OFFLINE"] = "true"
    options = Options()
    options.binary_location = binary
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.implicitly_wait(0)
    try:
        yield driver
    finally:
        driver.quit()


@contextmanager
def served(backend: Backend, **options: Any) -> Iterator[str]:
    """The console over `backend` on a free loopback port, with its Host check; its URL."""
    app = create_app(backend, allowed_hosts=loopback_hosts(), **options)
    running = BackgroundConsole(app, bind("127.0.0.1", 0))
    try:
        yield running.url
    finally:
        running.stop()


def wait(driver: WebDriver, until: Callable[[WebDriver], T], seconds: float = 20) -> T:
    """until(driver) once it is truthy; an element htmx just replaced is looked up again."""
    ignored = (StaleElementReferenceException, NoSuchElementException)
    return WebDriverWait(driver, seconds, 0.1, ignored_exceptions=ignored).until(until)


def find(driver: WebDriver, css: str) -> WebElement:
    return wait(driver, lambda d: d.find_element(By.CSS_SELECTOR, css))


def shot(driver: WebDriver, name: str) -> None:
    """A screenshot: into docs/console/ for docs/console.md when PULLQUEUE_SCREENSHOTS says so."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SCREENSHOTS / f"{name}.png"))
