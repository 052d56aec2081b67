"""The worker on the real Pub/Sub emulator, and `pullqueue work` getting SIGTERM mid-batch."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from pullqueue import Backend, Queue, Task, connect
from pullqueue.worker import Backoff, Worker, batch_handler
from tests.support.emulators import shared_emulator_host
from tests.support.processes import lease_what_is_left

PROJECT = "pullqueue-test"
URL = f"pubsub://{PROJECT}"
PULLQUEUE = str(Path(sys.executable).with_name("pullqueue"))
FAST = {"lease_requests_per_second": 50.0, "backoff": Backoff(0.05, 0.2)}
_ids = itertools.count(1)


@pytest.fixture(scope="module")
def emulator() -> str:
    return shared_emulator_host("pubsub")


@pytest.fixture
def backend(emulator: str) -> Iterator[Backend]:
    opened = connect(URL, auto_create=True, dedupe_url="memory://")
    yield opened
    opened.close()


def queue_name() -> str:
    return f"work-{uuid.uuid4().hex[:8]}-{next(_ids)}"


def fill(queue: Queue, count: int, tags: Sequence[str | None] = (None,)) -> list[str]:
    names = [f"p{i:04d}" for i in range(count)]
    for start in range(0, count, 100):
        queue.add(
            [
                Task(f"{i}", name=names[i], tag=tags[i % len(tags)])
                for i in range(start, min(start + 100, count))
            ]
        )
    return names


def lease_everything(name: str, expected: int, timeout: float = 30.0) -> list[Task]:
    """What another process would find in the queue: lease until expected tasks or timeout."""
    other = connect(URL, auto_create=True)
    try:
        queue = Queue(name, other)
        found = lease_what_is_left(queue, expected, timeout)
        if len(found) == expected:
            found += queue.lease(300, 1000)
        return found
    finally:
        other.close()


def test_every_task_is_handled_once_and_acknowledged(backend: Backend) -> None:
    queue = Queue(queue_name(), backend)
    names = fill(queue, 120)
    seen: list[str] = []
    lock = threading.Lock()

    def record(task: Task) -> None:
        with lock:
            seen.append(task.name or "")

    stats = Worker(queue, record, batch_size=25, concurrency=4, exit_when_idle=1.5, **FAST).run()
    assert sorted(seen) == names
    assert (stats.processed, stats.failed) == (120, 0)
    assert lease_everything(queue.name, 0, timeout=2) == []


def test_a_failed_task_comes_back_and_is_handled_again(backend: Backend) -> None:
    queue = Queue(queue_name(), backend)
    fill(queue, 12)
    attempts: Counter[str] = Counter()

    def flaky(task: Task) -> None:
        attempts[task.name or ""] += 1
        if int(task.payload) % 4 == 0 and attempts[task.name or ""] == 1:
            raise RuntimeError("first attempt fails")

    stats = Worker(queue, flaky, batch_size=12, exit_when_idle=1.5, **FAST).run()
    assert (stats.processed, stats.failed) == (12, 3)
    assert sorted(n for n, c in attempts.items() if c == 2) == ["p0000", "p0004", "p0008"]
    assert stats.retried == 3
    assert lease_everything(queue.name, 0, timeout=2) == []


def test_group_by_tag_batches_hold_one_tag_each(backend: Backend) -> None:
    queue = Queue(queue_name(), backend)
    fill(queue, 60, tags=["user-1", "user-2", "user-3"])
    batches: list[set[str | None]] = []
    counts: Counter[str | None] = Counter()

    @batch_handler
    def count(tasks: Sequence[Task]) -> None:
        batches.append({t.tag for t in tasks})
        counts.update(t.tag for t in tasks)

    stats = Worker(
        queue, count, group_by_tag=True, batch_size=100, exit_when_idle=1.5, **FAST
    ).run()
    assert all(len(tags) == 1 for tags in batches)
    assert counts == {"user-1": 20, "user-2": 20, "user-3": 20}
    assert stats.processed == 60


def test_a_slow_handler_keeps_its_lease(backend: Backend) -> None:
    queue = Queue(queue_name(), backend)
    fill(queue, 1)
    started = threading.Event()

    def slow(task: Task) -> None:
        started.set()
        time.sleep(3.0)

    worker = Worker(queue, slow, lease_seconds=1.0, exit_when_idle=0.5, **FAST)
    thread = threading.Thread(target=worker.run, kwargs={"handle_signals": False})
    thread.start()
    assert started.wait(20)
    other = connect(URL, auto_create=True)
    try:
        stolen = []
        while thread.is_alive():
            stolen += Queue(queue.name, other).lease(30, 10)
    finally:
        other.close()
        thread.join()
    assert stolen == []
    assert worker.stats.lease_extensions >= 2
    assert (worker.stats.processed, worker.stats.leases_lost) == (1, 0)


def sigterm_once_done(
    worker: subprocess.Popen[str], done_file: Path, count: int
) -> tuple[list[str], str]:
    """SIGTERM to a `pullqueue work` process once its handler wrote `count` names to
    done_file; the names written by its exit (none twice), and its log. It must exit 0."""
    deadline = time.monotonic() + 60
    while not done_file.exists() or len(done_file.read_text().split()) < count:
        assert worker.poll() is None, worker.communicate()
        assert time.monotonic() < deadline, "the worker handled nothing"
        time.sleep(0.02)
    worker.send_signal(signal.SIGTERM)
    _, log = worker.communicate(timeout=60)
    assert worker.returncode == 0, log
    done = done_file.read_text().split()
    assert len(done) == len(set(done)), "a task was handled twice"
    return done, log


WORK_OPTIONS = ["--batch-size", "50", "--concurrency", "2"]
HANDLER = """
import os, time

def handle(task):
    time.sleep(0.05)
    with open(os.environ["DONE_FILE"], "a") as out:
        out.write(task.name + "\\n")
"""


def test_sigterm_mid_batch_loses_nothing(backend: Backend, emulator: str, tmp_path: Path) -> None:
    name = queue_name()
    queue = Queue(name, backend)
    names = fill(queue, 150)
    (tmp_path / "slow_handler.py").write_text(textwrap.dedent(HANDLER))
    done_file = tmp_path / "done.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULLQUEUE_")}
    env.update(
        PUBSUB_EMULATOR_HOST=emulator,
        PULLQUEUE_AUTO_CREATE="1",
        DONE_FILE=str(done_file),
    )
    worker = subprocess.Popen(
        [PULLQUEUE, "work", name, "slow_handler:handle", "--url", URL, *WORK_OPTIONS],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    done, log = sigterm_once_done(worker, done_file, 20)
    assert 20 <= len(done) < 50, "stopped within the first batch"
    assert "signal=SIGTERM" in log
    left = lease_everything(name, len(names) - len(done))
    assert sorted(t.name for t in left) == sorted(set(names) - set(done))
