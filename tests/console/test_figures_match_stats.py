"""The console's figures are `pullqueue stats`'s: the same object for the same queue, on
memory://, on the Pub/Sub emulator (unknown, with the reason) and with Cloud Monitoring."""

from __future__ import annotations

import importlib
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from pullqueue import Queue, Task, connect
from pullqueue.adapters.pubsub.layout import SHARDS
from pullqueue.cli import cli
from pullqueue.console import create_app
from pullqueue.monitoring import OLDEST_UNACKED_AGE, UNDELIVERED, BacklogReader
from pullqueue.registry import default_backend, reset_default_backends
from tests.cli.support import clean_env, run
from tests.support.emulators import shared_emulator_host
from tests.support.monitoring_fake import monitoring_service

stats_command = importlib.import_module("pullqueue.cli.stats")


def console_stats(app_backend: Any, queue: str, **options: Any) -> dict[str, Any]:
    with TestClient(create_app(app_backend, sample_in_background=False, **options)) as client:
        response = client.get(f"/api/queues/{queue}")
        assert response.status_code == 200
        figures = response.json()
        page = client.get("/").text
        subscriptions = client.get(f"/queues/{queue}/figures?part=subscriptions").text
    figures["page"] = page
    figures["subscriptions"] = subscriptions
    return figures


def without_read_times(data: dict[str, Any]) -> dict[str, Any]:
    out = dict(data)
    if "monitoring" in out:
        out["monitoring"] = {k: v for k, v in out["monitoring"].items() if k != "read_at"}
    return out


@pytest.fixture
def shared_memory(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("PULLQUEUE_URL", raising=False)
    reset_default_backends()
    yield
    reset_default_backends()


def test_memory_figures_are_the_stats_figures(shared_memory: None) -> None:
    queue = Queue("counters")
    queue.add([Task(b"x", name=f"s{i}", tag=f"u{i % 4}") for i in range(40)])
    queue.delete(queue.lease(60, 5)[:2])
    result = CliRunner().invoke(cli, ["stats", "counters", "--json"])
    assert result.exit_code == 0, result.output
    expected = json.loads(result.stdout)
    figures = console_stats(default_backend(), "counters")
    assert figures["stats"] == expected
    assert figures["backlog"]["value"] == expected["tasks"] == 38
    assert figures["leases_per_minute"]["value"] == expected["executed_last_minute"] == 5
    assert figures["completions_per_minute"]["value"] == 2


@pytest.fixture
def pubsub_queue() -> Iterator[tuple[str, str]]:
    emulator = shared_emulator_host("pubsub")
    project = f"pq-figures-{uuid.uuid4().hex[:8]}"
    name = f"q{uuid.uuid4().hex[:6]}"
    backend = connect(f"pubsub://{project}", auto_create=True)
    Queue(name, backend).add([Task(b"12345") for _ in range(7)])
    yield project, name
    backend.close()
    assert emulator


def test_on_the_emulator_both_say_unknown_for_the_same_reason(
    pubsub_queue: tuple[str, str],
) -> None:
    project, name = pubsub_queue
    emulator = shared_emulator_host("pubsub")
    result = run(
        "stats", name, "--url", f"pubsub://{project}", "--json",
        env=clean_env(PUBSUB_EMULATOR_HOST=emulator),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    expected = json.loads(result.stdout)
    backend = connect(f"pubsub://{project}")
    try:
        figures = console_stats(backend, name)
    finally:
        backend.close()
    assert without_read_times(figures["stats"]) == without_read_times(expected)
    assert expected["tasks"] is None and figures["backlog"]["value"] is None
    assert figures["backlog"]["reason"] == expected["monitoring"]["reason"]
    assert "emulator" in figures["backlog"]["reason"]


def test_with_monitoring_both_show_the_same_backlog(
    pubsub_queue: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    project, name = pubsub_queue
    now = time.time()
    with monitoring_service(project) as service:
        service.gauge(UNDELIVERED, f"{name}-workers", 7, at=now - 90)
        service.gauge(OLDEST_UNACKED_AGE, f"{name}-workers", 42, at=now - 90)
        for k in range(SHARDS):
            service.gauge(UNDELIVERED, f"{name}-shard-{k}", 5 if k == 3 else 0, at=now - 90)
            service.gauge(OLDEST_UNACKED_AGE, f"{name}-shard-{k}", 60 if k == 3 else 0, at=now - 90)
        service.gauge(UNDELIVERED, f"{name}-dead-letter", 2, at=now - 90)

        def reader(project_id: str) -> BacklogReader:
            return BacklogReader(project_id, service.client(), clock=lambda: now)

        monkeypatch.setattr(stats_command, "backlog_reader", reader)
        result = CliRunner().invoke(cli, ["stats", name, "--url", f"pubsub://{project}", "--json"])
        assert result.exit_code == 0, result.output
        expected = json.loads(result.stdout)
        backend = connect(f"pubsub://{project}")
        try:
            figures = console_stats(backend, name, reader=reader)
        finally:
            backend.close()
    assert figures["stats"] == expected
    assert (figures["backlog"]["value"], figures["backlog"]["exact"]) == (12, False)
    assert figures["oldest_age_seconds"]["value"] == 60
    assert figures["dead_letters"]["value"] == 2
    row = figures["page"].split(f'data-queue="{name}"', 1)[1].split("</tr>", 1)[0]
    assert "~12" in row and "~60 s" in row and "~2<" in row.replace("\n", "").replace(" ", "")
    # Per subscription: the workers' own row, the 16 shards folded into one that opens.
    subscriptions = figures["subscriptions"]
    workers = subscriptions.split(f">{name}-workers<", 1)[1].split("</tr>", 1)[0]
    assert '<td class="num">7</td>' in workers
    folded = subscriptions.split('<details id="shards">', 1)[1]
    assert "<summary>16 shards of the undeclared tags: 5 undelivered</summary>" in folded
    assert folded.count('<span class="cut" title="' + name + "-shard-") == SHARDS
