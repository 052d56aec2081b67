"""Worker processes started together: each writes ready-N, then waits for go, like workers
already running when tasks arrive (so no process gets a head start on the queue)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path


def run_together(
    commands: Sequence[Sequence[str]],
    tmp_path: Path,
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float,
) -> None:
    """Start every command, wait until each wrote tmp_path/ready-*, write tmp_path/go, and
    wait for all to exit 0 within `timeout` seconds each."""
    workers = [subprocess.Popen(list(c), cwd=cwd, env=dict(env)) for c in commands]
    try:
        while len(list(tmp_path.glob("ready-*"))) < len(workers):
            assert all(w.poll() is None for w in workers), "a worker exited before it was ready"
            time.sleep(0.05)
        (tmp_path / "go").write_text("")
        for worker in workers:
            assert worker.wait(timeout=timeout) == 0
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
