"""Several operators at once, over real HTTP to a console served by uvicorn: concurrent deletes
of different tasks all happen, two deletes of one task report one deletion, and the figures read
by the background reader meanwhile stay consistent with the queue."""

from __future__ import annotations

import re
import threading
import time

import httpx2

from pullqueue.adapters.memory import MemoryBackend
from tests.console.browser import served
from tests.console.conftest import CSRF_INPUT, fill


def operator(base: str) -> tuple[httpx2.Client, str]:
    client = httpx2.Client(base_url=base, timeout=30)
    page = client.get("/queues/jobs").text
    found = CSRF_INPUT.search(page)
    assert found is not None
    return client, found.group(1)


def test_concurrent_deletes_over_http() -> None:
    backend = MemoryBackend()
    fill(backend, "jobs", 400, ["a", "b", None])
    with served(backend, period=0.6) as url:
        results: dict[str, list[str]] = {}
        lock = threading.Lock()

        def work(worker: int) -> None:
            client, token = operator(url)
            said = []
            try:
                # Each operator deletes its own 40 tasks, and all of them race for t0.
                for name in ["t0", *(f"t{i}" for i in range(worker * 40 + 1, worker * 40 + 41))]:
                    reply = client.post(
                        "/queues/jobs/delete-task",
                        data={"csrf": token, "name": name, "confirm": "jobs"},
                        headers={"Origin": url.rstrip("/")},
                    )
                    assert reply.status_code == 200, reply.text
                    report = re.search(r'id="report">([^<]*)<', reply.text)
                    assert report is not None
                    said.append(report.group(1))
                    client.get("/fragments/queues")
            finally:
                client.close()
            with lock:
                results[str(worker)] = said

        threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        reports = [line for said in results.values() for line in said]
        assert len(reports) == 8 * 41
        first = [line for line in reports if "&#39;t0&#39;" in line]
        assert sum(line.startswith("deleted task") for line in first) == 1
        assert sum("was not found" in line for line in first) == 7
        assert sum(line.startswith("deleted task") for line in reports) == 1 + 8 * 40
        left = {t.name for t in backend.list_tasks("jobs")}
        assert left == {f"t{i}" for i in range(321, 400)}
        time.sleep(0.7)  # one reading period: the figures after the last delete
        figures = httpx2.get(url + "api/queues/jobs").json()
        assert figures["backlog"]["value"] == len(left) == 79
        assert figures["completions_per_minute"]["value"] == 0  # deletes of unleased tasks
