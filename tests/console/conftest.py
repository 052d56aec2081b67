"""Fixtures for the console tests: a memory backend the test fills, and the console over it.

`Browser` wraps Starlette's TestClient the way a user's browser behaves: it opens a page first
(getting the session cookie and the form's CSRF token) and posts forms with that token and the
page's Origin, as a browser does.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from starlette.testclient import TestClient

from pullqueue import Queue, Task
from pullqueue.adapters.memory import MemoryBackend
from pullqueue.console import create_app

CSRF_INPUT = re.compile(r'name="csrf" value="([^"]+)"')


class Browser:
    """A TestClient that posts forms with the CSRF token its last page carried."""

    def __init__(self, client: TestClient) -> None:
        self.client = client
        self.token = ""
        self.origin = str(client.base_url).rstrip("/")

    def get(self, path: str, **kwargs: Any) -> httpx2.Response:
        response = self.client.get(path, **kwargs)
        found = CSRF_INPUT.search(response.text)
        if found:
            self.token = found.group(1)
        return response

    def post(
        self,
        path: str,
        data: dict[str, str],
        headers: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> httpx2.Response:
        sent = {"Origin": self.origin, **(headers or {})}
        return self.client.post(path, data={"csrf": self.token, **data}, headers=sent, **kwargs)


def fill(backend: MemoryBackend, queue: str, count: int, tags: list[str | None]) -> None:
    """Add `count` tasks named t0, t1, ... with tags taken in turn, payload 'payload-N'."""
    q = Queue(queue, backend)
    for start in range(0, count, 100):
        q.add(
            [
                Task(f"payload-{i}".encode(), name=f"t{i}", tag=tags[i % len(tags)])
                for i in range(start, min(start + 100, count))
            ]
        )


@pytest.fixture
def backend() -> MemoryBackend:
    """Two queues: emails (30 tasks over 3 tags, 2 leased) and reports (5 untagged tasks)."""
    made = MemoryBackend()
    fill(made, "emails", 30, ["alice", "bob", None])
    Queue("emails", made).lease(60, 2)
    fill(made, "reports", 5, [None])
    return made


def console(backend: MemoryBackend, **options: Any) -> Iterator[Browser]:
    app = create_app(backend, sample_in_background=False, **options)
    with TestClient(app) as client:
        yield Browser(client)


@pytest.fixture
def browser(backend: MemoryBackend) -> Iterator[Browser]:
    yield from console(backend)


@pytest.fixture
def read_only_browser(backend: MemoryBackend) -> Iterator[Browser]:
    yield from console(backend, read_only=True)
