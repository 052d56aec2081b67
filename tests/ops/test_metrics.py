"""`pullqueue work --metrics-port`: a real worker process on the Pub/Sub emulator, scraped while it
works, exports what it leased, finished, failed and dead-lettered, with handler durations."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from pullqueue import Queue, Settings, Task, connect
from pullqueue.adapters.pubsub import PubSubBackend
from pullqueue.adapters.pubsub.deadletters import list_dead_letters
from tests.support.emulators import shared_emulator_host

PULLQUEUE = str(Path(sys.executable).with_name("pullqueue"))
PROJECT = "pullqueue-metrics"

HANDLER = """
import time

def handle(task):
    time.sleep(0.05)
    if task.name == "poison":
        raise RuntimeError("always fails")
"""


def scrape(port: int) -> dict[str, float]:
    """Sample name with its labels -> value, from the Prometheus text."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def value(samples: dict[str, float], metric: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include the given ones."""
    total = 0.0
    for name, number in samples.items():
        base, _, rest = name.partition("{")
        if base == metric and all(f'{k}="{v}"' in rest for k, v in labels.items()):
            total += number
    return total


def test_a_working_worker_serves_its_metrics(tmp_path: Path) -> None:
    host = shared_emulator_host("pubsub")
    name = f"metrics-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "PUBSUB_EMULATOR_HOST": host,
        "PULLQUEUE_AUTO_CREATE": "1",
        "PULLQUEUE_PUBSUB_MAX_DELIVERY_ATTEMPTS": "5",
        "PYTHONPATH": str(tmp_path),
    }
    (tmp_path / "slow_handler.py").write_text(textwrap.dedent(HANDLER))
    backend = connect(
        f"pubsub://{PROJECT}",
        auto_create=True,
        dedupe_url="memory://",
        settings=Settings(pubsub_max_delivery_attempts=5),
    )
    queue = Queue(name, backend)
    queue.add([Task(b"x", name=f"t{i:02}") for i in range(40)] + [Task(b"bad", name="poison")])
    backend.close()
    worker = subprocess.Popen(
        [
            *(PULLQUEUE, "work", name, "slow_handler:handle", "--url", f"pubsub://{PROJECT}"),
            *("--metrics-port", "0", "--batch-size", "10", "--lease-seconds", "30"),
            *("--max-backoff", "0.5"),
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stderr is not None
        port = 0
        for line in worker.stderr:
            found = re.search(r"event=metrics port=(\d+)", line)
            if found:
                port = int(found.group(1))
                break
        assert port, "the worker never said where it serves metrics"
        attrs = {"messaging_destination_name": name, "messaging_system": "gcp_pubsub"}
        held_seen = 0.0
        deadline = time.monotonic() + 60
        samples: dict[str, float] = {}
        while time.monotonic() < deadline:
            samples = scrape(port)
            held_seen = max(held_seen, value(samples, "pullqueue_worker_tasks_held", **attrs))
            if value(samples, "pullqueue_worker_tasks_dead_lettered_total", **attrs) >= 1 and (
                value(samples, "pullqueue_worker_tasks_completed_total", **attrs) >= 40
            ):
                break
            time.sleep(0.1)
        assert held_seen >= 1  # seen while it worked
        assert value(samples, "pullqueue_worker_tasks_completed_total", **attrs) == 40
        assert value(samples, "pullqueue_worker_tasks_failed_total", **attrs) == 5
        assert value(samples, "pullqueue_worker_tasks_retried_total", **attrs) == 4
        assert value(samples, "pullqueue_worker_tasks_dead_lettered_total", **attrs) == 1
        assert value(samples, "messaging_client_consumed_messages_total", **attrs) == 45
        handled = value(samples, "messaging_process_duration_seconds_count", **attrs)
        assert handled == 45
        failures = value(
            samples, "messaging_process_duration_seconds_count", error_type="RuntimeError"
        )
        assert failures == 5
        # 45 calls of at least 50 ms, none in the buckets under 50 ms.
        assert value(samples, "messaging_process_duration_seconds_sum", **attrs) >= 45 * 0.05
        assert value(samples, "messaging_process_duration_seconds_bucket", le="0.025") == 0
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(30)
        finally:
            if worker.poll() is None:
                worker.kill()
    assert worker.returncode == 0
    # The worker moved the poison task to the dead letters itself, saying why.
    backend = connect(f"pubsub://{PROJECT}", settings=Settings(pubsub_max_delivery_attempts=5))
    try:
        assert isinstance(backend, PubSubBackend)
        (dead,) = list_dead_letters(backend, name, tag=None, limit=10)
    finally:
        backend.close()
    assert dead.delivery.name == "poison" and dead.delivery.payload == b"bad"
    assert dead.last_error == "RuntimeError: always fails"
    assert dead.attempts == 5 and dead.source_subscription == f"{name}-workers"


def test_a_port_in_use_is_a_usage_error() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [
                *(PULLQUEUE, "work", "q", "json:loads", "--url", "memory://"),
                *("--metrics-port", str(port), "--exit-when-idle", "0"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 2
    assert f"cannot serve metrics on port {port}" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("bad", ["65536", "nan"])
def test_a_bad_port_is_refused_by_the_parser(bad: str) -> None:
    result = subprocess.run(
        [PULLQUEUE, "work", "q", "json:loads", "--metrics-port", bad],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--metrics-port" in result.stderr
