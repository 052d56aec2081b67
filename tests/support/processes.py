"""Worker processes started together: each writes ready-N, then waits for go, like workers
already running when tasks arrive (so no process gets a head start on the queue); and what
another process finds in the queue once they stopped."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from pullqueue import Queue, Task


def run_together(
    commands: Sequence[Sequence[str]],
    tmp_path: Path,
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float,
) -> None:
    """Start every command, wait until each wrote tmp_path/ready-*, write tmp_path/go, and
    wait for all to exit 0 within `timeout` seconds each. A worker's standard error goes to
    tmp_path/stderr-N.txt, and the end of it into the failure of one that did not exit 0."""
    logs = [tmp_path / f"stderr-{n}.txt" for n in range(len(commands))]
    workers = []
    for command, log in zip(commands, logs, strict=True):
        with log.open("wb") as err:
            workers.append(subprocess.Popen(list(command), cwd=cwd, env=dict(env), stderr=err))

    def said(n: int) -> str:
        return logs[n].read_text(errors="replace")[-2000:]

    try:
        while len(list(tmp_path.glob("ready-*"))) < len(workers):
            exited = [n for n, w in enumerate(workers) if w.poll() is not None]
            assert not exited, f"worker {exited[0]} exited before it was ready: {said(exited[0])}"
            time.sleep(0.05)
        (tmp_path / "go").write_text("")
        for n, worker in enumerate(workers):
            code = worker.wait(timeout=timeout)
            assert code == 0, f"worker {n} exited with {code}: {said(n)}"
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()


def lease_what_is_left(queue: Queue, count: int, seconds: float) -> list[Task]:
    """Lease (300 s) until `count` tasks came or `seconds` passed: what another process finds."""
    found: list[Task] = []
    until = time.monotonic() + seconds
    while len(found) < count and time.monotonic() < until:
        found += queue.lease(300, 1000)
    return found
