"""A downstream outage under the worker on the Pub/Sub emulator: release at once or after a delay.

10 tasks, 4 handler threads, a handler that raises for the first 10 s and then succeeds, the queue
auto-created with its dead-letter policy (100 attempts). The same run is made twice in this
process: with failed tasks released at once (RetryParameters(0, 0), the old behaviour) and with
the default retry delay. Each prints the handler calls per task during the outage (median and
most), the seconds from the outage's end until the last task was done, and how many tasks were
dead-lettered; then the ratio of calls.

The emulator is PUBSUB_EMULATOR_HOST when set, else one started (and stopped) here.

Run: python benchmarks/outage.py [--outage 10] [--tasks 10] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from google.auth.credentials import AnonymousCredentials
from google.pubsub_v1 import SubscriberClient

from pullqueue import Queue, Task, connect
from pullqueue.retry import RetryParameters
from pullqueue.worker import Worker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.emulators import start_emulator


@dataclass
class Outcome:
    calls_median: float
    calls_most: int
    done: int
    last_done_after: float
    dead_lettered: int


def run(retry: RetryParameters, tasks: int, outage: float, concurrency: int) -> Outcome:
    project = f"outage-{uuid.uuid4().hex[:8]}"
    backend = connect(f"pubsub://{project}", auto_create=True, accept_duplicate_names=True)
    queue = Queue("outage", backend)
    queue.add([Task(f"{i}", name=f"task{i}") for i in range(tasks)])
    calls: list[tuple[float, str, bool]] = []
    lock = threading.Lock()
    until = time.time() + outage

    def handle(task: Task) -> None:
        now = time.time()
        with lock:
            calls.append((now, task.name or "", now >= until))
        if now < until:
            raise RuntimeError("downstream unavailable")

    worker = Worker(queue, handle, concurrency=concurrency, retry=retry)
    thread = threading.Thread(target=worker.run, kwargs={"handle_signals": False})
    thread.start()
    while time.time() < until + 120:
        with lock:
            if len({name for _, name, ok in calls if ok}) == tasks:
                break
        time.sleep(0.1)
    worker.stop()
    thread.join()
    backend.close()
    during = Counter(name for stamp, name, _ in calls if stamp < until)
    done = {name: stamp - until for stamp, name, ok in calls if ok}
    subscriber = SubscriberClient(credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
    path = subscriber.subscription_path(project, "outage-dead-letter")
    dead = subscriber.pull(request={"subscription": path, "max_messages": 1000}, timeout=10)
    subscriber.transport.close()  # type: ignore[no-untyped-call]
    return Outcome(
        calls_median=statistics.median(during.values()) if during else 0.0,
        calls_most=max(during.values(), default=0),
        done=len(done),
        last_done_after=max(done.values(), default=float("nan")),
        dead_lettered=len(dead.received_messages),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outage", type=float, default=10.0)
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    emulator = None
    if not os.environ.get("PUBSUB_EMULATOR_HOST"):
        emulator = start_emulator("pubsub")
        os.environ["PUBSUB_EMULATOR_HOST"] = emulator.host
    try:
        results = {}
        for label, retry in (
            ("released at once", RetryParameters(0, 0, 0)),
            ("retry delay (default)", RetryParameters()),
        ):
            outcome = run(retry, args.tasks, args.outage, args.concurrency)
            results[label] = outcome
            print(
                f"{label:22} calls per task during the outage: median {outcome.calls_median:g},"
                f" most {outcome.calls_most}; done {outcome.done}/{args.tasks}, the last"
                f" {outcome.last_done_after:.1f} s after the outage; dead-lettered"
                f" {outcome.dead_lettered}"
            )
        before, after = results["released at once"], results["retry delay (default)"]
        print(
            f"calls per task during the outage: {before.calls_median / after.calls_median:.1f}x"
            " fewer with the retry delay (medians)"
        )
    finally:
        if emulator is not None:
            emulator.stop()


if __name__ == "__main__":
    main()
