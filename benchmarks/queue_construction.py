"""Benchmark: building `taskqueue.Queue('q')` with pullqueue.compat against the App Engine SDK.

Legacy workers build a Queue per request or per loop turn, so its cost is on their hot path.
Both are built in this process, interleaved round by round on the testbed stub (SDK) and on the
process-wide default backend (pullqueue, memory:// unless PULLQUEUE_URL says otherwise); it
prints the median cost per construction of each and their ratio (the goal: under 10x).

Run: python benchmarks/queue_construction.py [--calls 20000] [--rounds 9]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from google.appengine.api import taskqueue as sdk

from pullqueue.compat import taskqueue as compat
from tests.support.appengine_testbed import appengine_testbed


def per_call(build: Callable[[], Any], calls: int) -> float:
    """Seconds per call of build(), over `calls` calls."""
    started = time.perf_counter()
    for _ in range(calls):
        build()
    return (time.perf_counter() - started) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000, help="constructions per round")
    parser.add_argument("--rounds", type=int, default=9, help="rounds (medians are printed)")
    args = parser.parse_args()

    with appengine_testbed(["q"]):
        sdk.Queue("q")
        compat.Queue("q")
        legacy, ours = [], []
        for _ in range(args.rounds):
            legacy.append(per_call(lambda: sdk.Queue("q"), args.calls))
            ours.append(per_call(lambda: compat.Queue("q"), args.calls))
    sdk_us, ours_us = statistics.median(legacy) * 1e6, statistics.median(ours) * 1e6
    print(f"SDK taskqueue.Queue('q'):              {sdk_us:8.2f} us (median of {args.rounds})")
    print(f"pullqueue.compat taskqueue.Queue('q'): {ours_us:8.2f} us (median of {args.rounds})")
    print(f"ratio pullqueue/SDK: {ours_us / sdk_us:.2f}x")


if __name__ == "__main__":
    main()
