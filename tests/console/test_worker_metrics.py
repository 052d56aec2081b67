"""Leases and completions per minute on Pub/Sub, which counts neither: read from the workers' own
Prometheus endpoints (`pullqueue console --metrics URL`), by a real worker process, and the rules
for a minute's increase (restarts, an unreachable worker, another backend's series)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import textwrap
import time
import uuid
from pathlib import Path

from starlette.testclient import TestClient

from pullqueue import Queue, Task, connect
from pullqueue.console import create_app
from pullqueue.console.workers import COMPLETED, CONSUMED, WorkerMetrics
from tests.cli.support import PULLQUEUE, run
from tests.support.emulators import shared_emulator_host


def exposition(
    completed: float, consumed: float, queue: str = "q", system: str = "gcp_pubsub"
) -> str:
    labels = f'messaging_destination_name="{queue}",messaging_system="{system}"'
    return (
        "# TYPE pullqueue_worker_tasks_completed_total counter\n"
        f"pullqueue_worker_tasks_completed_total{{{labels}}} {completed}\n"
        "# TYPE messaging_client_consumed_messages_total counter\n"
        f"messaging_client_consumed_messages_total{{{labels}}} {consumed}\n"
    )


def test_a_minutes_increase_summed_over_workers_and_restarts() -> None:
    now = [1000.0]
    pages = {"http://a/metrics": exposition(10, 12), "http://b/metrics": exposition(5, 5)}
    workers = WorkerMetrics(
        list(pages), "pubsub://p", fetch=lambda url: pages[url], clock=lambda: now[0]
    )
    workers.scrape()
    assert workers.rate(COMPLETED, "q").value is None  # a rate needs two scrapes
    now[0] += 30
    pages["http://a/metrics"] = exposition(40, 45)
    pages["http://b/metrics"] = exposition(6, 6)
    workers.scrape()
    half = workers.rate(COMPLETED, "q")
    assert (half.value, half.exact) == (31, False)  # 30 s of history: marked approximate
    now[0] += 40
    pages["http://b/metrics"] = exposition(3, 3)  # b restarted: counted from zero
    workers.scrape()
    full = workers.rate(COMPLETED, "q")
    # Since the sample at t=1000 (the newest 60 s back): a 40 - 10, b restarted at 3.
    assert (full.value, full.exact) == (30 + 3, True)
    assert workers.rate(CONSUMED, "other-queue").value == 0


def test_memory_series_do_not_count_for_pubsub_and_a_dead_worker_makes_it_unknown() -> None:
    pages = {"http://a/metrics": exposition(10, 10, system="pullqueue_memory")}

    def fetch(url: str) -> str:
        if url not in pages:
            raise OSError("connection refused")
        return pages[url]

    workers = WorkerMetrics(["http://a/metrics"], "pubsub://p", fetch=fetch)
    workers.scrape()
    pages["http://a/metrics"] = exposition(99, 99, system="pullqueue_memory")
    workers.scrape()
    assert workers.rate(COMPLETED, "q").value == 0
    down = WorkerMetrics(["http://a/metrics", "http://gone/metrics"], "pubsub://p", fetch=fetch)
    down.scrape()
    down.scrape()
    rate = down.rate(COMPLETED, "q")
    assert rate.value is None and "http://gone/metrics" in (rate.reason or "")


HANDLER = """
def handle(task):
    pass
"""


def test_a_real_workers_completions_on_the_queues_page(tmp_path: Path) -> None:
    host = shared_emulator_host("pubsub")
    project = f"pq-workers-{uuid.uuid4().hex[:8]}"
    name = f"w{uuid.uuid4().hex[:6]}"
    (tmp_path / "quick_handler.py").write_text(textwrap.dedent(HANDLER))
    producer = connect(f"pubsub://{project}", auto_create=True)
    queue = Queue(name, producer)
    queue.add([Task(b"x") for _ in range(3)])
    env = {**os.environ, "PUBSUB_EMULATOR_HOST": host, "PYTHONPATH": str(tmp_path)}
    worker = subprocess.Popen(
        [
            *(PULLQUEUE, "work", name, "quick_handler:handle", "--url", f"pubsub://{project}"),
            *("--metrics-port", "0", "--max-backoff", "0.5"),
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    viewer = connect(f"pubsub://{project}")
    try:
        assert worker.stderr is not None
        port = 0
        for line in worker.stderr:
            found = re.search(r"event=metrics port=(\d+)", line)
            if found:
                port = int(found.group(1))
                break
        assert port
        endpoint = f"http://127.0.0.1:{port}/metrics"
        app = create_app(viewer, metrics=[endpoint], period=0.0, sample_in_background=False)
        with TestClient(app) as client:
            first = client.get(f"/api/queues/{name}").json()  # two readings: a rate
            assert first["completions_per_minute"]["value"] in (0, 3)
            queue.add([Task(b"x") for _ in range(40)])
            deadline = time.monotonic() + 60
            figures = first
            while time.monotonic() < deadline:
                figures = client.get(f"/api/queues/{name}").json()
                done = figures["completions_per_minute"]["value"]
                if done is not None and done >= 40:
                    break
                time.sleep(0.3)
            # The three done before the first scrape are not in the minute the console saw.
            assert figures["completions_per_minute"]["value"] in (40, 43)
            assert figures["completions_per_minute"]["exact"] is False  # under a minute seen
            assert figures["leases_per_minute"]["value"] in (40, 43)
            row = client.get("/").text.split(f'data-queue="{name}"', 1)[1].split("</tr>", 1)[0]
            assert "/min" in row
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)
        viewer.close()
        producer.close()


def test_metrics_must_be_urls() -> None:
    result = run("console", "--metrics", "worker-1:9464")
    assert result.returncode == 2 and "http(s) URL" in result.stderr
