"""Run a handler over a pull queue as legacy workers did, without writing the loop by hand.

`Worker(queue, handler).run()` leases, calls the handler, deletes what succeeded, releases what
failed, keeps leases alive, backs off, rate-limits and shuts down gracefully (docs/worker.md).
"""

from __future__ import annotations

from pullqueue.worker.backoff import Backoff
from pullqueue.worker.handler import (
    BatchHandler,
    TaskHandler,
    batch_handler,
    is_batch_handler,
    load_handler,
)
from pullqueue.worker.retry import release_for_retry
from pullqueue.worker.runner import Worker, run_worker
from pullqueue.worker.stats import WorkerStats

__all__ = [
    "Backoff",
    "BatchHandler",
    "TaskHandler",
    "Worker",
    "WorkerStats",
    "batch_handler",
    "is_batch_handler",
    "load_handler",
    "release_for_retry",
    "run_worker",
]
