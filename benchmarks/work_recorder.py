"""`pullqueue work` handlers for `benchmarks/tag_batching.py --work`: record each batch or task.

Each worker process appends one JSON line per batch (time, names, tags) to
$TAGBENCH_OUT/batches-<pid>.jsonl (the per-task handler one line per task, with the number of
the lease that brought it, so the benchmark puts the lease's batch back together) and, at exit,
its lease calls (time, tasks) and the deliveries it gave back unleased, so the benchmark scores
real `pullqueue work` processes as its own loop.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pullqueue.queue import Queue
from pullqueue.task import Task
from pullqueue.worker import batch_handler
from tests.support.realpubsub import AS_SERVICE_ENV, start_as_on_the_service

_OUT = Path(os.environ.get("TAGBENCH_OUT", "."))
_AS_SERVICE = bool(os.environ.get(AS_SERVICE_ENV))
_lock = threading.Lock()
_leases: list[tuple[float, int]] = []
_first_call: list[float] = []
_lease_of: dict[int, int] = {}
"""The number of the lease call (in this process) that returned each task object, by id()."""
_backends: list[Any] = []
_lease = Queue.lease


def _counted(self: Queue, *args: Any, **kwargs: Any) -> list[Task]:
    """Queue.lease, noting when each call returned and how many tasks. Behind the realistic
    layer (AS_SERVICE_ENV), the adapter starts as on the service from its first lease."""
    with _lock:
        if not _first_call:
            _first_call.append(time.time())
    rpc = getattr(self.backend, "rpc", None)
    if _AS_SERVICE and rpc is not None:
        start_as_on_the_service(rpc)
    tasks = _lease(self, *args, **kwargs)
    with _lock:
        _leases.append((time.time(), len(tasks)))
        for task in tasks:
            _lease_of[id(task)] = len(_leases)
        if not _backends:
            _backends.append(self.backend)
    return tasks


Queue.lease = _counted  # type: ignore[method-assign]


def name_of(task: Task) -> str:
    """The task's name as the benchmark wrote it (its payload, less the padding)."""
    return task.payload.decode().rstrip(" ")


@batch_handler
def record(tasks: Sequence[Task]) -> None:
    """Note the batch; returning None has the worker delete every task of it."""
    line = json.dumps(
        {"t": time.time(), "names": [name_of(t) for t in tasks], "tags": [t.tag for t in tasks]}
    )
    with _lock, open(_OUT / f"batches-{os.getpid()}.jsonl", "a") as out:
        out.write(line + "\n")


def record_task(task: Task) -> None:
    """Note the task and the lease it came with; returning has the worker delete it."""
    with _lock:
        lease = _lease_of.pop(id(task), 0)
        line = json.dumps(
            {"t": time.time(), "names": [name_of(task)], "tags": [task.tag], "lease": lease}
        )
        with open(_OUT / f"batches-{os.getpid()}.jsonl", "a") as out:
            out.write(line + "\n")


@atexit.register
def _report() -> None:
    if not _leases and not _backends:
        return  # imported, never run as a handler (no report to leave in the working directory)
    book = getattr(_backends[0], "_book", None) if _backends else None
    skipped = sum(book._skipped.values()) if book is not None else 0
    report = {"leases": _leases, "skipped": skipped, "first_call": _first_call[:1]}
    (_OUT / f"leases-{os.getpid()}.json").write_text(json.dumps(report))
