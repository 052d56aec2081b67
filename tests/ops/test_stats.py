"""`pullqueue stats` and `migrate --dry-run`: real counts where they exist (memory://, Cloud
Monitoring on Pub/Sub), unknown (null) where nobody can give one, never a made-up 0."""

from __future__ import annotations

import importlib
import json
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from pullqueue import Queue, Task, connect
from pullqueue.adapters.pubsub.layout import SHARDS
from pullqueue.cli import cli
from pullqueue.monitoring import OLDEST_UNACKED_AGE, UNDELIVERED, BacklogReader
from pullqueue.registry import reset_default_backends
from tests.cli.support import PULLQUEUE, clean_env, interruptible, run
from tests.support.emulators import shared_emulator_host
from tests.support.monitoring_fake import MonitoringService, monitoring_service

PROJECT = "pullqueue-stats"
URL = f"pubsub://{PROJECT}"
stats_command = importlib.import_module("pullqueue.cli.stats")


@pytest.fixture
def emulator() -> str:
    return shared_emulator_host("pubsub")


@pytest.fixture
def pubsub_queue(emulator: str) -> Iterator[str]:
    """A provisioned Pub/Sub queue holding 7 tasks, 2 of them leased by another process."""
    name = f"stats-{uuid.uuid4().hex[:8]}"
    backend = connect(URL, auto_create=True, dedupe_url="memory://")
    queue = Queue(name, backend)
    queue.add([Task(b"12345", name=f"t{i}") for i in range(7)])
    assert len(queue.lease(300, 2)) == 2
    yield name
    backend.close()


def test_memory_default_backend_counts_what_this_process_added(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PULLQUEUE_URL", raising=False)
    reset_default_backends()
    try:
        queue = Queue("exact")
        queue.add([Task(b"x", name=f"s{i}") for i in range(3)])
        queue.lease(60, 1)
        result = CliRunner().invoke(cli, ["stats", "exact", "--json"])
    finally:
        reset_default_backends()
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["tasks"], data["leased"], data["whole_queue"]) == (3, 1, True)


def test_on_the_emulator_the_counts_are_unknown_and_say_why(
    pubsub_queue: str, emulator: str
) -> None:
    env = clean_env(PUBSUB_EMULATOR_HOST=emulator)
    result = run("stats", pubsub_queue, "--url", URL, "--json", env=env)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["tasks"] is None and data["leased"] is None and data["whole_queue"] is False
    assert data["monitoring"]["available"] is False
    assert "emulator" in data["monitoring"]["reason"]
    assert data["monitoring"]["undelivered"] is None
    # Still known: the subscriptions that make up the queue.
    subs = [(s["subscription"], s["undelivered"]) for s in data["monitoring"]["subscriptions"]]
    assert subs == [
        (f"{pubsub_queue}-workers", None),
        *((f"{pubsub_queue}-shard-{k}", None) for k in range(SHARDS)),
        (f"{pubsub_queue}-dead-letter", None),
    ]
    table = run("stats", pubsub_queue, "--url", URL, env=env)
    assert table.returncode == 0, table.stderr
    rows = {
        line.split("│")[1].strip(): line.split("│")[2].strip()
        for line in table.stdout.splitlines()
        if line.count("│") == 3
    }
    assert rows["tasks"] == "unknown" and rows["leased"] == "unknown"
    assert "emulator" in table.stdout


def seeded(service: MonitoringService, queue: str, now: float) -> None:
    service.gauge(UNDELIVERED, f"{queue}-workers", 7, at=now - 90)
    service.gauge(OLDEST_UNACKED_AGE, f"{queue}-workers", 42, at=now - 90)
    # Tasks of undeclared tags wait on the shard subscriptions: five on shard 3.
    for k in range(SHARDS):
        service.gauge(UNDELIVERED, f"{queue}-shard-{k}", 5 if k == 3 else 0, at=now - 90)
        service.gauge(OLDEST_UNACKED_AGE, f"{queue}-shard-{k}", 60 if k == 3 else 0, at=now - 90)
    service.gauge(UNDELIVERED, f"{queue}-dead-letter", 2, at=now - 90)
    service.gauge(OLDEST_UNACKED_AGE, f"{queue}-dead-letter", 4000, at=now - 90)


def test_with_monitoring_the_backlog_is_real(
    pubsub_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = time.time()
    with monitoring_service(PROJECT) as service:
        seeded(service, pubsub_queue, now)
        monkeypatch.setattr(
            stats_command,
            "backlog_reader",
            lambda project: BacklogReader(project, service.client(), clock=lambda: now),
        )
        result = CliRunner().invoke(cli, ["stats", pubsub_queue, "--url", URL, "--json"])
        table = CliRunner().invoke(
            cli, ["stats", pubsub_queue, "--url", URL], env={"COLUMNS": "200"}
        )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["tasks"] == 12 and data["leased"] is None and data["approximate"] is True
    monitoring = data["monitoring"]
    assert monitoring["available"] is True
    assert (monitoring["undelivered"], monitoring["dead_letters"]) == (12, 2)
    assert monitoring["oldest_unacked_age_seconds"] == 60
    assert monitoring["data_age_seconds"] == 90
    assert [(s["subscription"], s["role"]) for s in monitoring["subscriptions"]] == [
        (f"{pubsub_queue}-workers", "workers"),
        *((f"{pubsub_queue}-shard-{k}", "shard") for k in range(SHARDS)),
        (f"{pubsub_queue}-dead-letter", "dead-letter"),
    ]
    assert table.exit_code == 0, table.output
    assert "undeclared tags" in table.output and "sampled 90 s before this read" in table.output


def test_watch_refreshes_until_interrupted() -> None:
    watcher = subprocess.Popen(
        [PULLQUEUE, "stats", "q", "--url", "memory://", "--watch", "--interval", "0.2"],
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    )
    assert watcher.stderr is not None
    assert "memory://" in watcher.stderr.readline()  # connected: the view is running
    time.sleep(1.0)
    watcher.send_signal(signal.SIGINT)
    out, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 130, err
    assert "queue 'q' on memory://" in out
    assert "Traceback" not in err


def test_watch_and_json_do_not_mix() -> None:
    result = run("stats", "q", "--url", "memory://", "--watch", "--json")
    assert result.returncode == 2 and "--watch or --json" in result.stderr


def test_a_dry_run_from_pubsub_counts_nothing_it_cannot_know(
    pubsub_queue: str, emulator: str, tmp_path: Path
) -> None:
    env = clean_env(PUBSUB_EMULATOR_HOST=emulator)
    result = run(
        "migrate",
        pubsub_queue,
        "--from",
        URL,
        "--to",
        "memory://",
        "--dry-run",
        "--report",
        str(tmp_path / "dry.json"),
        env=env,
    )
    assert result.returncode == 0, result.stderr
    dry = json.loads((tmp_path / "dry.json").read_text())["dry"]
    assert dry["tasks"] is None and dry["leased_elsewhere"] is None
    assert dry["payload_bytes"] is None and dry["available"] is None
    assert "tasks would move" in result.stdout
    assert "unknown tasks would move" in result.stdout
    assert " 0 tasks" not in result.stdout
