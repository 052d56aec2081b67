"""Handlers the fault suite's `pullqueue work` processes run: they log every task they handle.

Each process appends `<unix time> <payload>` lines to $FAULTS_LOG with single O_APPEND writes, so
a line written before a SIGKILL is on disk and lines from several processes never interleave.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from pullqueue import Task

_LOG = os.open(os.environ["FAULTS_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)


def _write(kind: str, task: Task) -> None:
    os.write(_LOG, f"{time.time():.3f} {kind} {task.payload.decode()}\n".encode())


def record(task: Task) -> None:
    """Handle a task: note it as done (the worker then deletes it)."""
    _write("done", task)


def slow(task: Task) -> None:
    """Handle a task in $FAULTS_HANDLER_SECONDS (a handler that does some work), then record it."""
    time.sleep(float(os.environ["FAULTS_HANDLER_SECONDS"]))
    _write("done", task)


def outage(task: Task) -> None:
    """Fail while the file $FAULTS_OUTAGE exists (a downstream outage), then handle as record."""
    if Path(os.environ["FAULTS_OUTAGE"]).exists():
        _write("failed", task)
        raise ConnectionError("downstream service unavailable")
    _write("done", task)
