"""The counter service's front end: every hit on a page becomes a pull task tagged with the page.

Written exactly as for App Engine's legacy taskqueue; only the import line changed. Run alone it
adds hits to the queue named by COUNTER_QUEUE on PULLQUEUE_URL and writes the expected totals.
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter

from pullqueue.compat import taskqueue

QUEUE = "counter"


def record_hits(queue: taskqueue.Queue, hits: list[tuple[str, int]]) -> None:
    """Add one task per hit (tag: the counter's key, payload: the amount), 100 per call."""
    tasks = [taskqueue.Task(payload=str(amount), method="PULL", tag=key) for key, amount in hits]
    for start in range(0, len(tasks), taskqueue.MAX_TASKS_PER_ADD):
        queue.add(tasks[start : start + taskqueue.MAX_TASKS_PER_ADD])


def random_hits(count: int, keys: int, seed: int) -> list[tuple[str, int]]:
    """count hits over `keys` pages, a few pages far more popular than the rest."""
    rng = random.Random(seed)
    pages = [f"page-{k}" for k in range(keys)]
    weights = [1 / (k + 1) for k in range(keys)]
    return [(rng.choices(pages, weights)[0], rng.randint(1, 5)) for _ in range(count)]


def expected_totals(hits: list[tuple[str, int]]) -> dict[str, int]:
    totals: Counter[str] = Counter()
    for key, amount in hits:
        totals[key] += amount
    return dict(sorted(totals.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queue", default=QUEUE)
    parser.add_argument("--hits", type=int, default=2000)
    parser.add_argument("--keys", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--expected", help="write the expected totals (JSON) to this file")
    args = parser.parse_args()
    hits = random_hits(args.hits, args.keys, args.seed)
    record_hits(taskqueue.Queue(args.queue), hits)
    if args.expected:
        with open(args.expected, "w") as out:
            json.dump(expected_totals(hits), out)
    print(f"added {len(hits)} hits over {args.keys} counters to queue {args.queue!r}")


if __name__ == "__main__":
    main()
