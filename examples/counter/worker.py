"""The counter service's worker: lease one page's hits at a time, add them up, store, delete.

The legacy loop, unchanged but for the import: lease_tasks_by_tag groups the batch by the tag of
the oldest task, a failed batch is left to come back when its lease ends, and empty leases and
TransientError are met with a growing sleep.
"""

from __future__ import annotations

import argparse
import logging
import time

from store import CounterStore

from pullqueue.compat import taskqueue

QUEUE = "counter"
LEASE_SECONDS = 60
log = logging.getLogger("counter.worker")


def work(
    queue: taskqueue.Queue, store: CounterStore, *, exit_when_idle: float | None = None
) -> int:
    """Fold batches into the store until the queue stays empty exit_when_idle seconds (or
    forever); return how many tasks were folded in."""
    folded = 0
    delay = 0.1
    idle_since = time.monotonic()
    while True:
        try:
            tasks = queue.lease_tasks_by_tag(LEASE_SECONDS, 1000, deadline=60)
        except taskqueue.TransientError:
            log.warning("lease failed; retrying in %.1f s", delay, exc_info=True)
            time.sleep(delay)
            delay = min(delay * 2, 10)
            continue
        if not tasks:
            if exit_when_idle is not None and time.monotonic() - idle_since >= exit_when_idle:
                return folded
            time.sleep(delay)
            delay = min(delay * 2, 2)
            continue
        delay = 0.1
        key = tasks[0].tag
        store.apply(key, [(task.name, int(task.payload)) for task in tasks])
        queue.delete_tasks(tasks)
        folded += len(tasks)
        idle_since = time.monotonic()
        log.info("counter %s: folded %d hits", key, len(tasks))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queue", default=QUEUE)
    parser.add_argument("--db", default="counters.sqlite")
    parser.add_argument("--exit-when-idle", type=float, help="stop after this many idle seconds")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    store = CounterStore(args.db)
    try:
        folded = work(taskqueue.Queue(args.queue), store, exit_when_idle=args.exit_when_idle)
    finally:
        store.close()
    print(f"folded {folded} hits into {args.db}")


if __name__ == "__main__":
    main()
