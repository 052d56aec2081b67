"""Worker processes SIGKILLed at random while a queue drains: every task is still handled.

A killed worker cannot give its leases back; its tasks return when their leases end and another
worker handles them. Tasks it handled but had not yet deleted are handled again: those are the
duplicates, at most one lease's worth per kill. PULLQUEUE_FAULTS_TASKS sets the size (10,000 for
the figures in docs/reliability.md).
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from tests.faults.harness import ACK_DEADLINE, SEED, Fleet, fill, new_project, size
from tests.support.faultreport import record

pytestmark = pytest.mark.faults

WORKERS = 3
BATCH = 50
CONCURRENCY = 4
HANDLER_SECONDS = float(os.environ.get("PULLQUEUE_FAULTS_HANDLER_SECONDS") or 0.005)
"""Each task takes the handler this long, so a kill can fall between handling and deleting."""


def test_workers_killed_at_random_lose_no_task(emulator: str, tmp_path: Path) -> None:
    tasks = size("PULLQUEUE_FAULTS_TASKS", 2000)
    rng = random.Random(SEED)
    project = new_project()
    payloads = fill(project, "drain", tasks)
    fleet = Fleet(
        project,
        "drain",
        tmp_path,
        emulator,
        handler="tests.faults.handlers:slow",
        options=("--batch-size", str(BATCH), "--concurrency", str(CONCURRENCY)),
        environment={"FAULTS_HANDLER_SECONDS": str(HANDLER_SECONDS)},
    )
    started = time.time()
    fleet.start(WORKERS)
    kills = 0
    last_kill = started
    try:
        # Kill the first worker to lease, then every 0.2-2 s one that has leased tasks (and start
        # a fresh one each time), until 90% of the tasks are handled.
        while True:
            time.sleep(rng.uniform(0.2, 2.0) if kills else 0.05)
            done = len(set(fleet.handled().counts))
            if done >= 0.9 * tasks and kills:
                break
            assert time.time() - started < 600, f"seed {SEED}: no progress\n{fleet.logs()}"
            if fleet.kill_one(rng):
                kills += 1
                last_kill = time.time()
                fleet.start()
        handled = fleet.wait_for(payloads, timeout=300)
        finished = max(stamp for stamp, _ in handled.done)
    finally:
        fleet.stop()

    lost = handled.lost(payloads)
    figure = record(
        "workers SIGKILLed at random",
        tasks=tasks,
        lost=len(lost),
        duplicated=handled.duplicated(),
        recovery_seconds=round(finished - last_kill, 1),
        kills=kills,
        workers=WORKERS,
        drain_seconds=round(finished - started, 1),
        ack_deadline=ACK_DEADLINE,
        seed=SEED,
    )
    assert not lost, f"seed {SEED}: lost {lost[:5]}"
    # A killed worker's handled-but-undeleted tasks come back: at most what it held, a batch and
    # the tasks still running from the one before.
    assert figure.duplicated <= kills * (BATCH + CONCURRENCY), f"seed {SEED}"
