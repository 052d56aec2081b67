"""Throughput of pubsub:// against the raw google-cloud-pubsub client, on one Pub/Sub emulator.

Both sides publish N tasks (pullqueue: Queue.add of 100; raw: the client's batched publish with
futures) and consume them (pullqueue: lease 1000 + delete; raw: synchronous pull of 1000 + ack)
on identical subscriptions (exactly-once delivery, dead-letter policy). After one warm-up run per
side, runs alternate (ABBA), and the medians over the repetitions and their ratios are printed.
Usage:

    python benchmarks/pubsub_vs_raw.py [--tasks N] [--repeat R] [--payload BYTES] [--named]

--named also times named adds with no task-name registry, the in-memory one and Firestore
(benchmarks/pubsub_named.py, which starts the Firestore emulator unless FIRESTORE_EMULATOR_HOST
is set).

The emulator is PUBSUB_EMULATOR_HOST when set, else one started (and stopped) here.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from google.auth.credentials import AnonymousCredentials
from google.cloud import pubsub_v1
from google.pubsub_v1 import SubscriberClient

from pullqueue import Queue, Settings, Task
from pullqueue.adapters.pubsub import PubSubBackend
from pullqueue.adapters.pubsub.layout import QueueLayout
from tests.support.emulators import start_emulator


def pullqueue_round(project: str, tasks: int, payload: bytes) -> tuple[float, float]:
    """Seconds to add `tasks` through pullqueue, then to lease and delete them all."""
    backend = PubSubBackend(project, settings=Settings(), auto_create=True)
    try:
        queue = Queue(f"bench-{uuid.uuid4().hex[:8]}", backend)
        queue.stats()  # create the topic and subscriptions outside the timings
        start = time.perf_counter()
        for _ in range(tasks // 100):
            queue.add([Task(payload) for _ in range(100)])
        published = time.perf_counter() - start
        start = time.perf_counter()
        done = 0
        while done < tasks:
            leased = queue.lease(60, 1000)
            queue.delete(leased)
            done += len(leased)
        consumed = time.perf_counter() - start
        return published, consumed
    finally:
        backend.close()


def raw_round(project: str, tasks: int, payload: bytes) -> tuple[float, float]:
    """The same work with google-cloud-pubsub alone."""
    name = f"raw-{uuid.uuid4().hex[:8]}"
    layout = QueueLayout(project=project, queue=name)
    publisher = pubsub_v1.PublisherClient()
    subscriber = SubscriberClient(credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
    topic = layout.topic_path
    dead_letter = f"projects/{project}/topics/{layout.dead_letter_topic_id}"
    subscription = layout.subscription_path(layout.worker_subscription_id)
    publisher.create_topic(request={"name": topic})
    publisher.create_topic(request={"name": dead_letter})
    subscriber.create_subscription(
        request={
            "name": subscription,
            "topic": topic,
            "ack_deadline_seconds": 60,
            "enable_exactly_once_delivery": True,
            "dead_letter_policy": {"dead_letter_topic": dead_letter, "max_delivery_attempts": 100},
        }
    )
    try:
        start = time.perf_counter()
        futures = [publisher.publish(topic, payload, task_name=f"t{i}") for i in range(tasks)]
        for future in futures:
            future.result()
        published = time.perf_counter() - start
        start = time.perf_counter()
        done = 0
        while done < tasks:
            response = subscriber.pull(
                request={"subscription": subscription, "max_messages": 1000}, timeout=10
            )
            ack_ids = [m.ack_id for m in response.received_messages]
            if ack_ids:
                subscriber.acknowledge(request={"subscription": subscription, "ack_ids": ack_ids})
            done += len(ack_ids)
        consumed = time.perf_counter() - start
        return published, consumed
    finally:
        publisher.transport.close()  # type: ignore[no-untyped-call]
        subscriber.transport.close()  # type: ignore[no-untyped-call]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=10_000, help="tasks per run (default 10000)")
    parser.add_argument("--repeat", type=int, default=7, help="runs per side (default 7)")
    parser.add_argument("--payload", type=int, default=100, help="payload bytes (default 100)")
    parser.add_argument(
        "--named", action="store_true", help="also time named adds with and without a registry"
    )
    args = parser.parse_args()
    emulator = None
    if not os.environ.get("PUBSUB_EMULATOR_HOST"):
        emulator = start_emulator("pubsub")
        os.environ["PUBSUB_EMULATOR_HOST"] = emulator.host
    try:
        project = f"bench-{uuid.uuid4().hex[:8]}"
        payload = b"x" * args.payload
        sides: dict[str, Callable[[str, int, bytes], tuple[float, float]]] = {
            "pullqueue": pullqueue_round,
            "raw": raw_round,
        }
        for run in sides.values():  # warm up both sides (and the emulator's JIT)
            run(project, args.tasks, payload)
        rates: dict[str, dict[str, list[float]]] = {
            side: {"publish": [], "lease+delete": []} for side in sides
        }
        for repetition in range(args.repeat):
            # Alternate which side goes first, so drift in the emulator favours neither.
            order = list(sides.items())
            for side, run in order if repetition % 2 == 0 else reversed(order):
                published, consumed = run(project, args.tasks, payload)
                rates[side]["publish"].append(args.tasks / published)
                rates[side]["lease+delete"].append(args.tasks / consumed)
        host = os.environ["PUBSUB_EMULATOR_HOST"]
        print(f"{args.tasks} tasks of {args.payload} bytes, {args.repeat} runs, emulator {host}")
        print(f"{'direction':<14}{'pullqueue/s':>14}{'raw/s':>12}{'ratio':>8}")
        for direction in ("publish", "lease+delete"):
            ours = statistics.median(rates["pullqueue"][direction])
            theirs = statistics.median(rates["raw"][direction])
            print(f"{direction:<14}{ours:>14.0f}{theirs:>12.0f}{ours / theirs:>8.2f}")
        if args.named:
            from pubsub_named import run as run_named

            print("\nnamed adds (benchmarks/pubsub_named.py)")
            run_named(rounds=args.repeat, calls=10, batch=100)
    finally:
        if emulator is not None:
            emulator.stop()


if __name__ == "__main__":
    main()
