"""`pullqueue demo` reconciles on memory and on the Pub/Sub emulator, and catches a lost task."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult

import pytest
from rich.console import Console

import pullqueue
from pullqueue.adapters.memory import MemoryBackend
from pullqueue.demo import DemoOptions, destination, render, run_demo
from pullqueue.errors import Error
from pullqueue.task import Task
from tests.support.emulators import shared_emulator_host

PULLQUEUE = str(Path(sys.executable).with_name("pullqueue"))


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PULLQUEUE_") and k != "PUBSUB_EMULATOR_HOST"
    }
    env.update(extra)
    return env


def test_the_demo_reconciles_on_a_fresh_install_with_no_configuration(tmp_path: Path) -> None:
    done = subprocess.run(
        [PULLQUEUE, "demo", "--tasks", "1500", "--seed", "3"],
        cwd=tmp_path,
        env=clean_env(COLUMNS="120"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "memory:// (through pullqueue.compat.taskqueue) -> memory://" in done.stdout
    total = next(line for line in done.stdout.splitlines() if "total" in line)
    produced, migrated, processed, sum_produced, sum_counted = map(int, re.findall(r"\d+", total))
    assert produced == migrated == processed == 1500
    assert sum_produced == sum_counted >= 1500
    assert "reconciled: all 1500 tasks" in done.stdout
    assert "processed" in done.stderr and "1500/1500" in done.stderr


class LossyBackend(MemoryBackend):
    """Confirms every add but silently drops the 7th task: what reconciliation must catch."""

    def __init__(self) -> None:
        super().__init__()
        self.url = "lossy://"
        self.added = 0

    def add(self, queue: str, tasks: Sequence[Task]) -> list[Error | None]:
        kept = []
        for task in tasks:
            self.added += 1
            if self.added != 7:
                kept.append(task)
        super().add(queue, kept)
        return [None] * len(tasks)


@pytest.fixture
def lossy() -> Iterator[None]:
    def factory(url: SplitResult, options: dict[str, Any]) -> LossyBackend:
        return LossyBackend()

    pullqueue.register("lossy", factory)
    yield


def test_a_lost_task_fails_the_reconciliation(lossy: None) -> None:
    result = run_demo(
        "lossy://",
        DemoOptions(tasks=300, tags=4, seed=1, timeout=2),
        show_progress=False,
    )
    assert not result.ok
    bad = [row for row in result.rows if not row.ok]
    assert len(bad) == 1
    assert bad[0].migrated == bad[0].produced
    assert bad[0].processed == bad[0].produced - 1
    console = Console(record=True, width=120)
    render(result, console)
    text = console.export_text()
    assert "MISMATCH" in text and "NOT reconciled" in text


def test_the_destination_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PULLQUEUE_URL", raising=False)
    monkeypatch.delenv("PUBSUB_EMULATOR_HOST", raising=False)
    assert destination(None) == ("memory://", {})
    monkeypatch.delenv("PULLQUEUE_DEDUPE_URL", raising=False)
    monkeypatch.delenv("PULLQUEUE_ACCEPT_DUPLICATE_NAMES", raising=False)
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", "127.0.0.1:8085")
    # The demo's tasks are named: on Pub/Sub an in-process registry keeps them unique ...
    in_process = {"auto_create": True, "dedupe_url": "memory://"}
    assert destination(None) == ("pubsub://pullqueue-demo", in_process)
    monkeypatch.setenv("PULLQUEUE_URL", "pubsub://prod-project")
    assert destination(None) == ("pubsub://prod-project", {"dedupe_url": "memory://"})
    assert destination("memory://") == ("memory://", {})
    # ... unless the environment names a registry or accepts duplicates.
    monkeypatch.setenv("PULLQUEUE_DEDUPE_URL", "firestore://prod-project")
    assert destination(None) == ("pubsub://prod-project", {})
    monkeypatch.delenv("PULLQUEUE_DEDUPE_URL")
    monkeypatch.setenv("PULLQUEUE_ACCEPT_DUPLICATE_NAMES", "1")
    assert destination(None) == ("pubsub://prod-project", {})


def test_bad_options_say_what_to_fix(tmp_path: Path) -> None:
    done = subprocess.run(
        [PULLQUEUE, "demo", "--url", "kafka://x"],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "unknown URL scheme 'kafka'" in done.stderr


def test_the_demo_reconciles_on_the_pubsub_emulator(tmp_path: Path) -> None:
    host = shared_emulator_host("pubsub")
    queue = f"demo-{uuid.uuid4().hex[:8]}"
    done = subprocess.run(
        [PULLQUEUE, "demo", "--tasks", "1500", "--queue", queue],
        cwd=tmp_path,
        env=clean_env(PUBSUB_EMULATOR_HOST=host, COLUMNS="160"),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "-> pubsub://pullqueue-demo" in done.stdout
    assert "reconciled: all 1500 tasks" in done.stdout
