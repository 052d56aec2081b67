"""A downstream outage under `pullqueue work` on the emulator: failed tasks back off, none dies.

10 tasks, 4 handler threads, a handler that raises for 5 s from its first call (so the worker's
start-up takes nothing off the outage) and then succeeds, the queue auto-created with its
dead-letter policy (100 attempts). Released at once, each task came back dozens of times inside
the outage (a median of 31 and 43 times in two runs of `benchmarks/outage.py --outage 5`); with
the retry delay each is tried a few times, none is dead-lettered, and all are done soon after the
outage ends.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from google.auth.credentials import AnonymousCredentials
from google.pubsub_v1 import SubscriberClient

from pullqueue import Queue, Task, connect
from tests.support.emulators import shared_emulator_host

PULLQUEUE = str(Path(sys.executable).with_name("pullqueue"))
OUTAGE = 5.0
TASKS = 10
HANDLER = """
import os, threading, time

OUTAGE = float(os.environ["OUTAGE_SECONDS"])
OUT = os.environ["OUTAGE_OUT"]
LOCK = threading.Lock()
UNTIL = None

def handle(task):
    global UNTIL
    with LOCK:
        now = time.time()
        if UNTIL is None:  # the outage starts with the first call
            UNTIL = now + OUTAGE
            with open(OUT + ".until.tmp", "w") as until:
                until.write(repr(UNTIL))
            os.replace(OUT + ".until.tmp", OUT + ".until")
        with open(OUT, "a") as calls:
            calls.write(f"{now!r} {task.name} {'ok' if now >= UNTIL else 'fail'}\\n")
    if now < UNTIL:
        raise RuntimeError("downstream unavailable")
"""


def _dead_lettered(project: str) -> int:
    """Messages on the queue's dead-letter subscription. The emulator answers a pull with what
    waits at once but holds an empty one ~9 s; return_immediately ends that wait (anything
    dead-lettered was published seconds before, not "just published")."""
    subscriber = SubscriberClient(credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
    path = subscriber.subscription_path(project, "outage-dead-letter")
    try:
        response = subscriber.pull(
            request={"subscription": path, "max_messages": 100, "return_immediately": True},
            timeout=10,
        )
        return len(response.received_messages)
    finally:
        subscriber.transport.close()  # type: ignore[no-untyped-call]


@pytest.mark.slow
def test_a_handler_outage_backs_off_and_nothing_is_dead_lettered(tmp_path: Path) -> None:
    host = shared_emulator_host("pubsub")
    project = f"pq-{uuid.uuid4().hex[:12]}"
    backend = connect(f"pubsub://{project}", auto_create=True, dedupe_url="memory://")
    try:
        Queue("outage", backend).add([Task(f"{i}", name=f"task{i}") for i in range(TASKS)])
    finally:
        backend.close()
    (tmp_path / "outage_handler.py").write_text(textwrap.dedent(HANDLER))
    calls_file = tmp_path / "calls.txt"
    calls_file.touch()
    until_file = tmp_path / "calls.txt.until"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULLQUEUE_")}
    env.update(
        PULLQUEUE_AUTO_CREATE="1",
        PUBSUB_EMULATOR_HOST=host,
        OUTAGE_SECONDS=str(OUTAGE),
        OUTAGE_OUT=str(calls_file),
    )
    worker = subprocess.Popen(
        [
            *(PULLQUEUE, "work", "outage", "outage_handler:handle"),
            "--concurrency",
            "4",
            "--url",
            f"pubsub://{project}",
        ],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    calls: list[list[str]] = []
    until = time.time() + 60 + OUTAGE  # until the first call: 60 s for the worker to start
    try:
        while time.time() < until + 60:
            if until_file.exists():
                until = float(until_file.read_text())
            calls = [line.split() for line in calls_file.read_text().splitlines()]
            if len({name for _, name, outcome in calls if outcome == "ok"}) == TASKS:
                break
            time.sleep(0.2)
    finally:
        worker.send_signal(signal.SIGTERM)
        _, log = worker.communicate(timeout=60)
    assert worker.returncode == 0, log
    during = Counter(name for stamp, name, _ in calls if float(stamp) < until)
    done = {name: float(stamp) - until for stamp, name, outcome in calls if outcome == "ok"}
    assert len(done) == TASKS, (done, log[-2000:])
    assert max(done.values()) < 60
    assert set(during) == set(done) and max(during.values()) <= 15, during
    assert 'retry="1s..600s x2^16"' in log and "leasable again in" in log
    assert _dead_lettered(project) == 0
