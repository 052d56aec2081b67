"""The counter example runs as its README says, on memory and on the Pub/Sub emulator."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.support.emulators import shared_emulator_host

COUNTER = Path(__file__).resolve().parent.parent / "examples" / "counter"
PULLQUEUE = str(Path(sys.executable).with_name("pullqueue"))


def env(**extra: str) -> dict[str, str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PULLQUEUE_") and k != "PUBSUB_EMULATOR_HOST"
    }
    return {**base, **extra}


def run(args: list[str], environment: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        args, cwd=COUNTER, env=environment, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def totals(db: Path) -> dict[str, int]:
    with sqlite3.connect(db) as conn:
        return dict(conn.execute("SELECT key, n FROM counter").fetchall())


def test_the_counter_service_runs_on_memory() -> None:
    done = run([sys.executable, "run.py", "--hits", "1500", "--keys", "15"], env())
    assert "1500 hits produced, 1500 folded in, on memory://" in done.stdout
    assert done.stdout.count(" ok\n") == 15
    assert "all counters match" in done.stdout


@pytest.fixture
def pubsub_env() -> dict[str, str]:
    return env(
        PUBSUB_EMULATOR_HOST=shared_emulator_host("pubsub"),
        PULLQUEUE_URL="pubsub://pullqueue-test",
        PULLQUEUE_AUTO_CREATE="1",
    )


@pytest.mark.parametrize("worker", ["worker.py", "pullqueue work"])
def test_producer_and_worker_processes_on_the_emulator(
    worker: str, pubsub_env: dict[str, str], tmp_path: Path
) -> None:
    queue = f"counter-{uuid.uuid4().hex[:8]}"
    expected_file, db = tmp_path / "expected.json", tmp_path / "counters.sqlite"
    produce = [sys.executable, "producer.py", "--queue", queue, "--hits", "1200", "--keys", "12"]
    run([*produce, "--expected", str(expected_file)], pubsub_env)
    if worker == "worker.py":
        command = [sys.executable, "worker.py", "--queue", queue, "--db", str(db)]
        run([*command, "--exit-when-idle", "3"], pubsub_env)
    else:
        command = [PULLQUEUE, "work", queue, "handler:count", "--group-by-tag", "--batch", "1000"]
        run([*command, "--exit-when-idle", "3"], {**pubsub_env, "COUNTER_DB": str(db)})
    expected = json.loads(expected_file.read_text())
    assert len(expected) == 12
    assert totals(db) == expected
