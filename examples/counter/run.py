"""Run the counter service end to end in one process and check every counter.

On memory:// (the default) the producer and the worker must share a process, so this script
runs one after the other; on Pub/Sub (PULLQUEUE_URL=pubsub://PROJECT) they may equally run as
separate processes (producer.py, worker.py). Exit status 0 when every counter is right.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

from producer import expected_totals, random_hits, record_hits
from store import CounterStore
from worker import work

from pullqueue.compat import taskqueue


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queue", default="counter")
    parser.add_argument("--hits", type=int, default=2000)
    parser.add_argument("--keys", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    backend = os.environ.get("PULLQUEUE_URL", "memory://")
    queue = taskqueue.Queue(args.queue)
    hits = random_hits(args.hits, args.keys, args.seed)
    record_hits(queue, hits)
    with tempfile.TemporaryDirectory() as tmp:
        store = CounterStore(os.path.join(tmp, "counters.sqlite"))
        folded = work(queue, store, exit_when_idle=2.0)
        totals = store.totals()
        store.close()
    expected = expected_totals(hits)
    for key, value in expected.items():
        mark = "ok" if totals.get(key) == value else "WRONG"
        print(f"{key:<10} expected {value:>6}  counted {totals.get(key, 0):>6}  {mark}")
    print(f"{len(hits)} hits produced, {folded} folded in, on {backend}")
    if totals != expected:
        print("counters do NOT match", file=sys.stderr)
        return 1
    print("all counters match")
    return 0


if __name__ == "__main__":
    sys.exit(main())
