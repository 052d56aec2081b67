"""Running `pullqueue migrate` as a subprocess over `filequeue://` files, as a user would.

The subprocess imports the test backend through the PULLQUEUE_PLUGINS hook, so the queues it
drains are SQLite files the test process reads and writes too, before, during and after.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from pullqueue import Queue
from tests.migrate.filequeue import FileQueueBackend

PULLQUEUE = str(Path(sys.executable).with_name("pullqueue"))
ROOT = Path(__file__).resolve().parents[2]


def file_queue(path: Path, name: str = "jobs") -> Queue:
    """A queue in a SQLite file, shared with any subprocess that opens the same file."""
    return Queue(name, FileQueueBackend(str(path)))


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of a migrate subprocess: the test plugin and this checkout importable."""
    env = dict(os.environ)
    env["PULLQUEUE_PLUGINS"] = "tests.migrate.plugin"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.update(extra)
    return env


def migrate_command(
    cwd: Path, *args: str, queue: str = "jobs", to_url: str | None = None
) -> list[str]:
    """`pullqueue migrate QUEUE --from filequeue://cwd/src.db --to ... ARGS`, fast settings."""
    return [
        PULLQUEUE,
        "migrate",
        queue,
        "--from",
        f"filequeue://{cwd / 'src.db'}",
        "--to",
        to_url or f"filequeue://{cwd / 'dst.db'}",
        "--quiet-period",
        "0.3",
        "--lease-seconds",
        "5",
        *args,
    ]


def popen_options(cwd: Path, **env: str) -> dict[str, Any]:
    """subprocess options: run in cwd with cli_env(), text output captured."""
    return {
        "cwd": cwd,
        "env": cli_env(**env),
        "text": True,
        "stdout": subprocess.PIPE,
        "stderr": subprocess.PIPE,
    }


def run_migrate(
    cwd: Path, *args: str, to_url: str | None = None, timeout: float = 120, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run the command to its end and return its exit status and output."""
    return subprocess.run(
        migrate_command(cwd, *args, to_url=to_url),
        timeout=timeout,
        check=False,
        **popen_options(cwd, **env),
    )
