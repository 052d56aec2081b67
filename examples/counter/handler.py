"""The same worker with the loop left to `pullqueue work`: only the batch handler remains.

    COUNTER_DB=counters.sqlite pullqueue work counter handler:count --group-by-tag --batch-size 1000

pullqueue.worker leases by tag, keeps leases alive, deletes the batch when this returns and
releases it when it raises, backs off, rate-limits and stops cleanly on SIGTERM.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from store import CounterStore

from pullqueue import Task
from pullqueue.worker import batch_handler

_store = CounterStore(os.environ.get("COUNTER_DB", "counters.sqlite"))


@batch_handler
def count(tasks: Sequence[Task]) -> None:
    """Fold one page's hits into its counter."""
    key = tasks[0].tag or ""
    _store.apply(key, [(task.name or "", int(task.payload)) for task in tasks])
