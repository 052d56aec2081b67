"""Round trips and calls per pubsub:// operation, and drain rate against the raw client, on a
Pub/Sub that answers like the service (tests/support/realpubsub.py in front of the emulator).

For each round-trip time (0, 10 and 30 ms by default) with every knob on (partial pulls,
filters, held empty pulls, the 600 s cap; no lost acks unless --lost-acks), one process:
- per operation, the medians over --repeat runs (after a first lease) of the rounds (calls one
  after another), the calls, and the milliseconds;
- tasks/s draining --tasks small tasks with lease_tasks(60, 100) + delete_tasks, against the raw
  google-cloud-pubsub client doing pull(100) + ack on the same layer, and their ratio.
Usage:

    python benchmarks/pubsub_service.py [--rtt-ms 0,10,30] [--repeat 7] [--tasks 2000]

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
from google.pubsub_v1 import PublisherClient, SubscriberClient

from pullqueue import Queue, Settings, Task
from pullqueue.adapters.pubsub import PubSubBackend
from tests.support.emulators import start_emulator
from tests.support.realpubsub import Knobs, RealisticPubSub

TAGS = 50


def measure(
    layer: RealisticPubSub,
    run: Callable[[], object],
    repeat: int,
    before: Callable[[], object] | None = None,
    after: Callable[[], object] | None = None,
) -> tuple[float, ...]:
    """Median rounds, calls and milliseconds of `run` over `repeat` runs (`before`, untimed)."""
    rounds, calls, millis = [], [], []
    for _ in range(repeat):
        if before is not None:
            before()
            time.sleep(0.1)
        with layer.counting() as seen:
            start = time.perf_counter()
            run()
            millis.append((time.perf_counter() - start) * 1000)
        if after is not None:
            after()
        rounds.append(seen.rounds())
        calls.append(seen.count)
    return statistics.median(rounds), statistics.median(calls), statistics.median(millis)


def new_backend(layer: RealisticPubSub, project: str) -> PubSubBackend:
    with layer.as_emulator():
        return PubSubBackend(project, settings=Settings(), auto_create=True)


def operations(layer: RealisticPubSub, repeat: int) -> list[tuple[str, tuple[float, ...]]]:
    project = f"svc-{uuid.uuid4().hex[:8]}"
    backend = new_backend(layer, project)
    rows: list[tuple[str, tuple[float, ...]]] = []
    try:
        name = f"ops-{uuid.uuid4().hex[:6]}"
        queue = Queue(name, backend)
        queue.stats()

        def add() -> None:
            queue.add([Task(b"x", tag=f"tag-{i % TAGS}") for i in range(100)])

        rows.append(("Queue.add of 100 tasks over 50 tags", measure(layer, add, repeat)))
        for _ in range(40):
            add()
        queue.delete(queue.lease(60, 100))  # the first lease

        def plain() -> None:
            queue.delete(queue.lease(60, 100))

        def add_named() -> None:
            queue.add([Task(b"x", tag="tag-7") for _ in range(100)])

        def named() -> None:
            queue.delete(queue.lease(60, 100, tag="tag-7", group_by_tag=True))

        def oldest() -> None:
            queue.delete(queue.lease(60, 100, group_by_tag=True))

        rows.append(("lease_tasks(60, 100) + delete_tasks", measure(layer, plain, repeat)))
        by_name = measure(layer, named, repeat, before=add_named)
        rows.append(("lease_tasks_by_tag(60, 100, 'tag-7') + delete", by_name))
        rows.append(
            ("lease_tasks_by_tag(60, 100) (oldest) + delete", measure(layer, oldest, repeat))
        )
        held = queue.lease(60, 1)

        def modify() -> None:
            queue.modify_lease(held[0], 60)

        rows.append(("modify_task_lease", measure(layer, modify, repeat)))
        queue.delete(held)
        empty = Queue(f"empty-{uuid.uuid4().hex[:6]}", backend)
        empty.stats()
        empty.lease(60, 100)
        rows.append(
            ("empty lease_tasks, empty queue", measure(layer, lambda: empty.lease(60, 100), repeat))
        )
        rows.append(
            (
                "empty lease by oldest tag, empty queue",
                measure(layer, lambda: empty.lease(60, 100, group_by_tag=True), repeat),
            )
        )

        fresh: list[PubSubBackend] = []

        def first() -> None:
            fresh.append(new_backend(layer, project))
            Queue(name, fresh[-1]).lease(60, 10)

        first_lease = measure(layer, first, repeat, after=lambda: fresh.pop().close())
        rows.append(("the first lease of a new process (10 tasks)", first_lease))
    finally:
        backend.close()
    return rows


def drain_pullqueue(layer: RealisticPubSub, tasks: int) -> float:
    backend = new_backend(layer, f"drq-{uuid.uuid4().hex[:8]}")
    try:
        queue = Queue(f"drain-{uuid.uuid4().hex[:6]}", backend)
        queue.stats()
        for _ in range(tasks // 100):
            queue.add([Task(b"x" * 100) for _ in range(100)])
        queue.delete(queue.lease(60, 1))
        done, start = 1, time.perf_counter()
        while done < tasks:
            leased = queue.lease(60, 100)
            queue.delete(leased)
            done += len(leased)
        return (tasks - 1) / (time.perf_counter() - start)
    finally:
        backend.close()


def drain_raw(layer: RealisticPubSub, tasks: int) -> float:
    project = f"drr-{uuid.uuid4().hex[:8]}"
    with layer.as_emulator():
        publisher = PublisherClient(credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
        subscriber = SubscriberClient(credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
    try:
        topic = publisher.create_topic(name=f"projects/{project}/topics/raw-drain").name
        sub = subscriber.create_subscription(
            request={
                "name": f"projects/{project}/subscriptions/raw-drain",
                "topic": topic,
                "ack_deadline_seconds": 60,
            }
        ).name
        for _ in range(tasks // 100):
            publisher.publish(topic=topic, messages=[{"data": b"x" * 100} for _ in range(100)])
        done, start = 0, time.perf_counter()
        while done < tasks:
            answer = subscriber.pull(request={"subscription": sub, "max_messages": 100}, timeout=5)
            ids = [m.ack_id for m in answer.received_messages]
            if ids:
                subscriber.acknowledge(request={"subscription": sub, "ack_ids": ids})
            done += len(ids)
        return tasks / (time.perf_counter() - start)
    finally:
        publisher.transport.close()  # type: ignore[no-untyped-call]
        subscriber.transport.close()  # type: ignore[no-untyped-call]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rtt-ms", default="0,10,30")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--lost-acks", type=float, default=0.0)
    args = parser.parse_args()
    emulator = None
    host = os.environ.get("PUBSUB_EMULATOR_HOST")
    if not host:
        emulator = start_emulator("pubsub")
        host = emulator.host
    try:
        for rtt_ms in [float(x) for x in args.rtt_ms.split(",")]:
            with RealisticPubSub(
                host, Knobs.service(rtt_ms / 1000, lost_acks=args.lost_acks)
            ) as layer:
                print(
                    f"\n## {rtt_ms:g} ms round trips, every knob on (lost acks {args.lost_acks:g})"
                )
                print("| operation | rounds | calls | ms |\n| --- | ---: | ---: | ---: |")
                for label, (rounds, calls, millis) in operations(layer, args.repeat):
                    print(f"| {label} | {rounds:g} | {calls:g} | {millis:.0f} |")
                ours = drain_pullqueue(layer, args.tasks)
                raw = drain_raw(layer, args.tasks)
                print(
                    f"| drain {args.tasks} tasks: pullqueue lease 100 + delete / raw pull 100 + ack"
                    f" | | | {ours:.0f} / {raw:.0f} tasks/s = {ours / raw:.2f}x |"
                )
                sys.stdout.flush()
    finally:
        if emulator is not None:
            emulator.stop()


if __name__ == "__main__":
    main()
