"""SIGKILL `pullqueue migrate` at random moments, rerun it: every task arrives, none stays behind.

The source is a `filequeue://` SQLite file (legacy lease semantics, durable across the kill);
the destination is a real Pub/Sub emulator, which keeps no name registry here, so a task sent
twice really is there twice: the test counts such duplicates and holds them to the number the
report gives as possible (the crash window between the destination's confirmation and the
journal write). Set PULLQUEUE_CRASH_SEED to replay a run's kill moments.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials
from google.pubsub_v1 import SubscriberClient

from pullqueue import Task
from pullqueue.adapters.pubsub.layout import SHARDS
from tests.migrate.clitools import file_queue, migrate_command, popen_options
from tests.support.emulators import shared_emulator_host
from tests.support.faultreport import record

pytestmark = pytest.mark.faults

TASKS = 5000
KILLS = 6
"""Trials whose kill left tasks to move (a kill after the last delete proves little)."""
MAX_TRIALS = 16
PHASES = [TASKS + 1, 5000, 4000, 3000, 2000]
"""Where a kill falls: the start (import, preflight, batch 1), else the batch after the one that
brought the source's count under the number. The first kill of trial n is in phase n (cycling),
so every phase is hit; the moment within it, and the rerun's kill, are drawn at random."""
SEED = int(os.environ.get("PULLQUEUE_CRASH_SEED") or time.time_ns() % 1_000_000)


@pytest.fixture(scope="module")
def emulator() -> str:
    return shared_emulator_host("pubsub")


@pytest.fixture(scope="module")
def subscriber(emulator: str) -> Iterator[SubscriberClient]:
    client = SubscriberClient(credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
    yield client
    client.transport.close()  # type: ignore[no-untyped-call]


@dataclass
class Trial:
    """One source file, one destination project, and the command between them."""

    cwd: Path
    project: str
    emulator: str

    def command(self, report: str) -> list[str]:
        return migrate_command(
            self.cwd,
            "--report",
            report,
            "--lease-seconds",
            "3",
            "--lease-rate",
            "20",
            to_url=f"pubsub://{self.project}",
        )

    def options(self) -> dict[str, Any]:
        return popen_options(
            self.cwd,
            PUBSUB_EMULATOR_HOST=self.emulator,
            PULLQUEUE_AUTO_CREATE="1",
            # The journal is what keeps a rerun from sending twice here, not a name registry.
            PULLQUEUE_ACCEPT_DUPLICATE_NAMES="1",
        )

    def source_count(self) -> int:
        with sqlite3.connect(self.cwd / "src.db", timeout=30) as db:
            (count,) = db.execute("SELECT count(*) FROM tasks").fetchone()
        return int(count)


def fill_source(cwd: Path) -> set[str]:
    """TASKS tasks: most named, some unnamed (the source names them), some tagged."""
    queue = file_queue(cwd / "src.db")
    names: set[str] = set()
    for start in range(0, TASKS, 100):
        batch = [
            Task(
                f"payload-{i}".encode(),
                name=f"task-{i}" if i % 5 else None,
                tag=f"user{i % 7}" if i % 3 == 0 else None,
            )
            for i in range(start, start + 100)
        ]
        queue.add(batch)
        names.update(task.name or "" for task in batch)
    queue.backend.close()
    return names


def kill_at_random(trial: Trial, rng: random.Random, report: str, threshold: int) -> bool:
    """Start the command and SIGKILL it at a random moment of the phase `threshold` names
    (PHASES); True if tasks were left to move."""
    process = subprocess.Popen(trial.command(report), **trial.options())
    try:
        deadline = time.monotonic() + 60
        if threshold > TASKS:  # a moment measured from the start: import, preflight, batch 1
            time.sleep(rng.uniform(0.3, 1.2))
        else:  # a moment within the batch after the one that brought the count under threshold
            while trial.source_count() >= threshold and process.poll() is None:
                assert time.monotonic() < deadline, "the migration made no progress"
                time.sleep(0.005)
            time.sleep(rng.uniform(0.0, 0.15))
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=30)
    finally:
        process.kill()
    return process.returncode == -signal.SIGKILL and trial.source_count() > 0


def pull_everything(subscriber: SubscriberClient, project: str) -> Counter[str]:
    """task_name of every message on the destination's worker and shard subscriptions (acked as
    read): untagged tasks arrive on the first, tagged ones on their tag's shard. The
    subscriptions are drained side by side (each until three pulls in a row come back empty)."""
    subscriptions = ["jobs-workers", *(f"jobs-shard-{k}" for k in range(SHARDS))]
    names: Counter[str] = Counter()
    with ThreadPoolExecutor(max_workers=len(subscriptions)) as pool:
        for found in pool.map(lambda s: pull_subscription(subscriber, project, s), subscriptions):
            names.update(found)
    return names


def pull_subscription(
    subscriber: SubscriberClient, project: str, subscription: str
) -> Counter[str]:
    """task_name of every message on one subscription, acked as read, until three empty pulls."""
    names: Counter[str] = Counter()
    path = f"projects/{project}/subscriptions/{subscription}"
    empty = 0
    while empty < 3:
        with warnings.catch_warnings():  # deprecated on Pub/Sub, still what an emulator needs
            warnings.simplefilter("ignore", DeprecationWarning)
            response = subscriber.pull(
                request={
                    "subscription": path,
                    "max_messages": 1000,
                    "return_immediately": True,
                },
                timeout=10,
            )
        if not response.received_messages:
            empty += 1
            time.sleep(0.1)
            continue
        empty = 0
        for received in response.received_messages:
            names[received.message.attributes["task_name"]] += 1
        subscriber.acknowledge(
            request={
                "subscription": path,
                "ack_ids": [r.ack_id for r in response.received_messages],
            }
        )
    return names


def test_killed_migrations_finish_on_rerun_with_nothing_lost(
    tmp_path: Path, emulator: str, subscriber: SubscriberClient
) -> None:
    rng = random.Random(SEED)
    killed = number = 0
    duplicated = reported = 0
    reruns: list[float] = []
    while killed < KILLS:
        number += 1
        assert number <= MAX_TRIALS, f"seed {SEED}: only {killed} kills left tasks to move"
        cwd = tmp_path / f"trial{number}"
        cwd.mkdir()
        names = fill_source(cwd)
        trial = Trial(cwd, f"pq-crash-{uuid.uuid4().hex[:10]}", emulator)
        where = f"seed {SEED}, trial {number}"

        phase = PHASES[(number - 1) % len(PHASES)]
        killed += kill_at_random(trial, rng, "killed.json", phase)
        if number % 4 == 3:  # kill the rerun as well
            kill_at_random(trial, rng, "killed-again.json", rng.choice(PHASES))
        started = time.monotonic()
        done = subprocess.run(trial.command("rerun.json"), timeout=120, **trial.options())
        reruns.append(time.monotonic() - started)
        assert done.returncode == 0, f"{where}: {done.stdout}\n{done.stderr}"
        report = json.loads((cwd / "rerun.json").read_text())

        arrived = pull_everything(subscriber, trial.project)
        assert set(arrived) == names, f"{where}: missing {sorted(names - set(arrived))[:5]}"
        assert trial.source_count() == 0, where
        duplicates = sum(arrived.values()) - len(arrived)
        possible = report["possible_duplicates"]
        assert duplicates <= possible, f"{where}: {duplicates} duplicates, {possible} reported"
        assert possible <= 1000 * (2 if number % 4 == 3 else 1), where  # one batch per kill
        duplicated += duplicates
        reported += possible

    record(
        "pullqueue migrate SIGKILLed at random, then rerun",
        tasks=TASKS * number,
        lost=0,
        duplicated=duplicated,
        recovery_seconds=round(max(reruns), 1),
        kills=killed,
        possible_duplicates_reported=reported,
        seed=SEED,
    )
