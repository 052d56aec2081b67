"""Benchmark: what the pause check costs a Pub/Sub worker, in calls per minute, against its leases.

A `pullqueue.worker.Worker` (the loop `pullqueue work` runs) leases a queue on the emulator for
`--seconds`, with a producer keeping tasks coming; the script counts the pause label reads
(one `topics.get` each) and the lease calls the worker made, and prints both per minute and
their ratio. Then the queue is paused and the same is counted while every lease answers empty.

    python benchmarks/pause_cost.py [--seconds 60] [--check 10]

Honours PUBSUB_EMULATOR_HOST, else starts the emulator from the gcloud SDK.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pullqueue import Queue, Settings, Task
from pullqueue.adapters.pubsub import PubSubBackend
from pullqueue.worker import Worker
from pullqueue.worker.backoff import Backoff
from tests.support.emulators import shared_emulator_host


def measure(backend: PubSubBackend, producer: Queue, seconds: float) -> tuple[int, int]:
    """(label reads, lease calls) of one worker leasing for `seconds`, tasks added meanwhile."""
    queue = Queue(producer.name, backend)
    worker = Worker(queue, lambda task: None, backoff=Backoff(maximum=1.0))
    stop = threading.Event()

    def produce() -> None:
        while not stop.is_set():
            producer.add([Task(b"job") for _ in range(10)])
            stop.wait(0.2)

    feeder = threading.Thread(target=produce)
    reads, leases = backend._pauses.reads, worker.stats.snapshot().lease_requests
    runner = threading.Thread(target=lambda: worker.run(handle_signals=False))
    feeder.start()
    runner.start()
    time.sleep(seconds)
    stop.set()
    worker.stop()
    runner.join()
    feeder.join()
    return backend._pauses.reads - reads, worker.stats.snapshot().lease_requests - leases


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--check", type=float, default=10.0, help="PULLQUEUE_PUBSUB_PAUSE_CHECK")
    args = parser.parse_args(argv)
    host = shared_emulator_host("pubsub")
    project = f"bench-{uuid.uuid4().hex[:10]}"
    backend = PubSubBackend(
        project, settings=Settings(pubsub_pause_check=args.check), auto_create=True
    )
    operator = PubSubBackend(project, auto_create=True)
    producer = Queue("paused", operator)
    producer.add(Task(b"open"))
    print(f"emulator {host}, pause check {args.check:g} s, {args.seconds:g} s per phase")
    print(f"{'phase':<8} {'marker looks/min':>16} {'lease calls/min':>16} {'looks per lease':>16}")
    try:
        for phase in ("running", "paused"):
            if phase == "paused":
                operator.set_paused("paused", True)
            reads, leases = measure(backend, producer, args.seconds)
            per_minute = 60 / args.seconds
            print(
                f"{phase:<8} {reads * per_minute:>16.1f} {leases * per_minute:>16.1f}"
                f" {reads / max(leases, 1):>16.3f}"
            )
    finally:
        backend.close()
        operator.close()


if __name__ == "__main__":
    main()
