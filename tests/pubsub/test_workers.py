"""Many workers on one Pub/Sub queue, and a worker killed mid-lease: nothing doubled, nothing lost.

Workers here are what a service runs: threads each with its own backend, and a separate process
killed with SIGKILL, whose long-leased tasks must come back within one lease-keeper window.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import defaultdict
from pathlib import Path

from pullqueue import Queue, Task
from tests.pubsub.conftest import MakeBackend

REPO = Path(__file__).resolve().parents[2]


def test_eight_workers_share_5000_tasks_without_doubles_or_losses(
    make_backend: MakeBackend,
) -> None:
    producer = Queue("shared", make_backend())
    added: set[str] = set()
    for _ in range(50):
        added |= {t.name for t in producer.add([Task(b"job") for _ in range(100)]) if t.name}
    holds: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    deleted: list[str] = []
    lock = threading.Lock()
    done = threading.Event()
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        queue = Queue("shared", make_backend())
        chance = random.Random(worker)
        try:
            while not done.is_set():
                leased = queue.lease(2, 100)
                got = time.time()
                if not leased:
                    time.sleep(0.05)
                    continue
                kept = []
                with lock:
                    for task in leased:
                        assert task.name is not None and task.eta_posix is not None
                        holds[task.name].append((got, task.eta_posix, worker))
                for task in leased:
                    # Some workers "crash" on a task: its lease runs out and it comes back.
                    if chance.random() >= 0.03:
                        kept.append(task)
                for task in queue.delete(kept):
                    if task.was_deleted:
                        with lock:
                            deleted.append(task.name or "")
                with lock:
                    if len(deleted) >= len(added):
                        done.set()
        except BaseException as exc:
            errors.append(exc)
            done.set()

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    finished = done.wait(120)
    done.set()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert finished, f"{len(deleted)} of {len(added)} deleted in 120 s"
    assert sorted(deleted) == sorted(added)  # each task deleted exactly once
    redelivered = 0
    for name, spans in holds.items():
        spans.sort()
        redelivered += len(spans) - 1
        for (_, expires, _), (start, _, _) in itertools.pairwise(spans):
            assert start >= expires, f"{name} handed to a second holder while leased"
    assert redelivered > 0  # abandoned tasks did come back


_CHILD = textwrap.dedent(
    """
    import json, sys, time
    from pullqueue import Queue, Settings
    from pullqueue.adapters.pubsub import PubSubBackend

    settings = Settings(pubsub_keeper_period=0.5, pubsub_lease_window=2)
    queue = Queue("crashy", PubSubBackend(sys.argv[1], settings=settings, auto_create=True))
    leased = queue.lease(3600, 1000)
    print(json.dumps([t.name for t in leased]), flush=True)
    time.sleep(600)
    """
)


def test_tasks_of_a_worker_killed_mid_lease_come_back(
    make_backend: MakeBackend, project: str
) -> None:
    producer = Queue("crashy", make_backend())
    added = {t.name for t in producer.add([Task(f"{i}") for i in range(40)])}
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, project],
        stdout=subprocess.PIPE,
        cwd=REPO,
        env={**os.environ},
    )
    try:
        assert child.stdout is not None
        held = set(json.loads(child.stdout.readline()))
        assert held == added
        # The child's keeper holds the hour-long leases in 2 s windows while it lives.
        watcher = Queue("crashy", make_backend())
        alive_until = time.monotonic() + 5
        while time.monotonic() < alive_until:
            assert watcher.lease(60, 100) == []
            time.sleep(0.25)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    killed = time.monotonic()
    back: set[str | None] = set()
    while len(back) < len(added) and time.monotonic() - killed < 15:
        back |= {t.name for t in watcher.lease(60, 100)}
        time.sleep(0.1)
    assert back == added
    # Within one window (2 s) of the kill, plus Pub/Sub's whole-second rounding and polling.
    assert time.monotonic() - killed < 4.5
