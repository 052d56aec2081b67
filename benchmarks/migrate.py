"""Throughput of drain(): memory -> memory, and the App Engine SDK stub -> the Pub/Sub emulator.

Each case drains N tasks with the journal on (a SQLite file in a temporary directory); the Pub/Sub
case also measures, in the same run and on the same emulator, the raw google-cloud-pubsub
publisher (batched, futures) publishing N tasks of the same size. Medians over the repetitions
and the ratio to the raw rate are printed. Usage:

    python benchmarks/migrate.py [--tasks N] [--repeat R] [--payload BYTES] [--lease-rate R]

The source lease rate is uncapped by default (a benchmark measures the drain, not the legacy
service's 10 lease calls per second, which caps a real drain at 10,000 tasks/s); pass
--lease-rate 10 to see the capped figure. The emulator is PUBSUB_EMULATOR_HOST when set, else
one started (and stopped) here.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import math
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from google.appengine.api import taskqueue
from google.cloud import pubsub_v1

from pullqueue import Queue, Settings, Task
from pullqueue.adapters.memory import MemoryBackend
from pullqueue.adapters.pubsub import PubSubBackend
from pullqueue.adapters.pubsub.layout import QueueLayout
from pullqueue.migrate import MigrationReport, drain
from tests.support.appengine_testbed import appengine_testbed
from tests.support.emulators import start_emulator


def drain_options(lease_rate: float, journal: Path | None) -> dict[str, object]:
    return {"journal": journal, "lease_rate": lease_rate, "quiet_period": 0.0, "max_wait": 0.0}


def check(report: MigrationReport, tasks: int) -> None:
    if not report.ok or report.written != tasks:
        raise SystemExit(f"the drain did not move every task:\n{report.render()}")


def memory_round(tasks: int, payload: bytes, lease_rate: float, journal: bool) -> float:
    """tasks/s of one memory -> memory drain (the drain's own elapsed time)."""
    source, dest = Queue("bench", MemoryBackend()), Queue("bench", MemoryBackend())
    for start in range(0, tasks, 100):
        source.add([Task(payload, name=f"t{i}") for i in range(start, start + 100)])
    gc.collect()  # the filling's garbage is not the drain's: start every case from the same heap
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "journal" if journal else None
        report = drain(source, dest, **drain_options(lease_rate, path))  # type: ignore[arg-type]
    check(report, tasks)
    return report.tasks_per_second


def stub_to_pubsub_round(project: str, tasks: int, payload: bytes, lease_rate: float) -> float:
    """tasks/s of one SDK stub (appengine://) -> Pub/Sub emulator drain."""
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    with appengine_testbed([queue]) as bed:
        eta = dt.datetime.fromtimestamp(bed.clock(), tz=dt.timezone.utc)
        for start in range(0, tasks, 100):
            taskqueue.Queue(queue).add(
                [
                    taskqueue.Task(payload=payload, method="PULL", name=f"t{i}", eta=eta)
                    for i in range(start, start + 100)
                ]
            )
        bed.clock.advance(1)
        # Measured against a raw publish of the same tasks: the names go out unchecked as there.
        dest_backend = PubSubBackend(
            project, settings=Settings(), auto_create=True, accept_duplicate_names=True
        )
        try:
            dest = Queue(queue, dest_backend)
            dest.stats()  # create the topic and subscriptions outside the timing
            with tempfile.TemporaryDirectory() as tmp:
                report = drain(
                    Queue(queue, bed.backend()),
                    dest,
                    **drain_options(lease_rate, Path(tmp) / "journal"),  # type: ignore[arg-type]
                )
        finally:
            dest_backend.close()
    check(report, tasks)
    return report.tasks_per_second


def raw_publish_round(project: str, tasks: int, payload: bytes) -> float:
    """tasks/s of the raw publisher client (batched, futures) to a fresh topic."""
    layout = QueueLayout(project=project, queue=f"raw-{uuid.uuid4().hex[:8]}")
    publisher = pubsub_v1.PublisherClient()
    publisher.create_topic(request={"name": layout.topic_path})
    try:
        start = time.perf_counter()
        futures = [
            publisher.publish(layout.topic_path, payload, task_name=f"t{i}") for i in range(tasks)
        ]
        for future in futures:
            future.result()
        return tasks / (time.perf_counter() - start)
    finally:
        publisher.transport.close()  # type: ignore[no-untyped-call]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=20_000, help="tasks per run (default 20000)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per case (default 5)")
    parser.add_argument("--payload", type=int, default=100, help="payload bytes (default 100)")
    parser.add_argument(
        "--lease-rate", type=float, default=math.inf, help="source lease calls/s (default: no cap)"
    )
    args = parser.parse_args()
    payload = b"x" * args.payload
    rate = args.lease_rate
    print(
        f"{args.tasks} tasks of {args.payload} bytes, {args.repeat} runs each, journal on,"
        f" source lease rate {'uncapped' if math.isinf(rate) else f'{rate:g}/s'}"
    )
    memory_round(1000, payload, rate, True)  # warm up
    memory = [memory_round(args.tasks, payload, rate, True) for _ in range(args.repeat)]
    no_journal = [memory_round(args.tasks, payload, rate, False) for _ in range(args.repeat)]
    print(f"memory -> memory            {statistics.median(memory):>10.0f} tasks/s")
    print(f"memory -> memory, no journal{statistics.median(no_journal):>10.0f} tasks/s")

    emulator = None
    if not os.environ.get("PUBSUB_EMULATOR_HOST"):
        emulator = start_emulator("pubsub")
        os.environ["PUBSUB_EMULATOR_HOST"] = emulator.host
    try:
        project = f"bench-{uuid.uuid4().hex[:8]}"
        raw_publish_round(project, 1000, payload)  # warm up
        stub_to_pubsub_round(project, 1000, payload, rate)
        raw: list[float] = []
        ours: list[float] = []
        for _ in range(args.repeat):
            raw.append(raw_publish_round(project, args.tasks, payload))
            ours.append(stub_to_pubsub_round(project, args.tasks, payload, rate))
        raw_rate, our_rate = statistics.median(raw), statistics.median(ours)
        print(f"raw Pub/Sub publish         {raw_rate:>10.0f} tasks/s")
        ratio = our_rate / raw_rate
        print(f"SDK stub -> Pub/Sub         {our_rate:>10.0f} tasks/s   ratio {ratio:.2f}")
    finally:
        if emulator is not None:
            emulator.stop()


if __name__ == "__main__":
    main()
