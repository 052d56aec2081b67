"""Two messages with one task name (no name registry) drain like any others, on the emulator.

Without a registry a retried add or a foreign publisher can put one name on the topic twice. A
lease hands each name out once, the other copy in a later lease, so the legacy loop that deletes
its batch in one call and `pullqueue work` both finish the queue: every payload handled, none
more than twice, nothing left.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from pullqueue import Queue, Task, connect
from pullqueue.compat import taskqueue
from tests.pubsub.conftest import MakeBackend
from tests.support.emulators import shared_emulator_host

pytestmark = pytest.mark.unchecked_names  # a name published twice, on purpose: no registry

PULLQUEUE = str(Path(sys.executable).with_name("pullqueue"))
NAMES = 25
PAYLOADS = {f"{i}-{copy}".encode() for i in range(NAMES) for copy in ("first", "second")}


def _add_twice(queue: Queue) -> None:
    for copy in ("first", "second"):
        queue.add([Task(f"{i}-{copy}", name=f"dup{i:02d}") for i in range(NAMES)])


def _left(queue: Queue, quiet: float) -> list[Task]:
    """What the queue still hands out over `quiet` seconds (leases of 5 s come back within)."""
    found: list[Task] = []
    end = time.monotonic() + quiet
    while time.monotonic() < end:
        found += queue.lease(60, 1000)
    return found


def test_a_lease_hands_each_name_out_once(make_backend: MakeBackend) -> None:
    queue = Queue("twice", make_backend())
    _add_twice(queue)
    first = queue.lease(60, 100)
    second = queue.lease(60, 100)
    assert len(first) == len({t.name for t in first}) == NAMES
    assert len(second) == len({t.name for t in second}) == NAMES
    assert {t.payload for t in first + second} == PAYLOADS
    queue.delete(first)
    queue.delete(second)
    assert all(t.was_deleted for t in first + second)


def test_the_legacy_loop_drains_duplicate_names(make_backend: MakeBackend) -> None:
    backend = make_backend()
    _add_twice(Queue("legacy-loop", backend))
    queue = taskqueue.Queue("legacy-loop", backend=backend)
    handled: Counter[bytes] = Counter()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and set(handled) != PAYLOADS:
        batch = queue.lease_tasks(5, 100)
        handled.update(task.payload for task in batch)
        if batch:
            queue.delete_tasks(batch)
    assert set(handled) == PAYLOADS and max(handled.values()) <= 2, handled
    assert _left(Queue("legacy-loop", backend), quiet=6) == []


def test_pullqueue_work_drains_duplicate_names(make_backend: MakeBackend, tmp_path: Path) -> None:
    project = make_backend().project
    backend = connect(f"pubsub://{project}", auto_create=True, accept_duplicate_names=True)
    try:
        _add_twice(Queue("work-twice", backend))
    finally:
        backend.close()
    out = tmp_path / "handled.txt"
    (tmp_path / "twice_handler.py").write_text(
        textwrap.dedent(
            f"""
            def handle(task):
                with open({str(out)!r}, "a") as handled:
                    handled.write(task.payload.decode() + "\\n")
            """
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULLQUEUE_")}
    env.update(PULLQUEUE_AUTO_CREATE="1", PUBSUB_EMULATOR_HOST=shared_emulator_host("pubsub"))
    started = time.monotonic()
    result = subprocess.run(
        [
            *(PULLQUEUE, "work", "work-twice", "twice_handler:handle", "--lease-seconds", "5"),
            *("--url", f"pubsub://{project}", "--exit-when-idle", "2", "--concurrency", "4"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    took = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    handled = Counter(line.encode() for line in out.read_text().splitlines())
    assert set(handled) == PAYLOADS and max(handled.values()) <= 2, handled
    assert "delete_failed" not in result.stderr and took < 30, (took, result.stderr)
    assert _left(Queue("work-twice", make_backend()), quiet=6) == []
