"""Benchmark: what a kill-safe redrive of dead letters costs against a plain one, in one run.

`redrive()` keeps a copy of every task it publishes in a subscription of its own, so a killed
run publishes nothing twice; the baseline is the plain loop (pull a batch of dead letters,
publish copies, acknowledge) that duplicates a batch when killed between the two steps. Both
move the same number of dead letters on the Pub/Sub emulator, rounds interleaved so drift hits
both alike. Prints the median seconds per run, tasks per second and the ratio of the rates.

    python benchmarks/redrive.py [--rounds 5] [--tasks 2000]

Honours PUBSUB_EMULATOR_HOST, else starts the emulator from the gcloud SDK. Emulator figures
compare the two with each other; they are not production latencies.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pullqueue import Settings
from pullqueue.adapters.pubsub import PubSubBackend
from pullqueue.adapters.pubsub.deadletters import _copy, _paths, redrive
from pullqueue.adapters.pubsub.peek import pull_all
from pullqueue.adapters.pubsub.wire import SOURCE_DELIVERIES, PubsubMessagePb
from tests.support.emulators import shared_emulator_host


def fill(backend: PubSubBackend, queue: str, count: int) -> None:
    topic = backend.rpc.topic_path(backend.topology(queue).layout.dead_letter_topic_id)
    messages = [
        PubsubMessagePb(data=b"x" * 64, attributes={"task_name": f"t{i}", SOURCE_DELIVERIES: "5"})
        for i in range(count)
    ]
    for start in range(0, count, 500):
        backend.rpc.publish(topic, messages[start : start + 500], queue=queue)


def plain(backend: PubSubBackend, queue: str) -> int:
    """The baseline: publish copies then acknowledge, with nothing to survive a kill."""
    topic, dead, _ = _paths(backend, queue)
    moved = 0
    while True:
        kept, _ = pull_all(backend, queue, dead, 100, lambda d: True)
        if not kept:
            return moved
        backend.rpc.publish(topic, [_copy(d) for d in kept], queue=queue)
        backend.rpc.ack(dead, [d.ack_id for d in kept], queue=queue)
        moved += len(kept)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=2000)
    args = parser.parse_args()
    shared_emulator_host("pubsub")
    backend = PubSubBackend(f"bench-{uuid.uuid4().hex[:8]}", settings=Settings(), auto_create=True)
    times: dict[str, list[float]] = {"plain": [], "redrive": []}
    try:
        for n in range(args.rounds):
            modes = ["plain", "redrive"] if n % 2 == 0 else ["redrive", "plain"]
            for mode in modes:
                queue = f"bench-{mode}-{n}"
                fill(backend, queue, args.tasks)
                started = time.perf_counter()
                if mode == "plain":
                    moved = plain(backend, queue)
                else:
                    moved = redrive(backend, queue, tag=None, limit=10**9).redriven
                times[mode].append(time.perf_counter() - started)
                assert moved == args.tasks, (mode, moved)
    finally:
        backend.close()
    base = statistics.median(times["plain"])
    print(f"{args.tasks} dead letters, {args.rounds} rounds, median of each:")
    for mode, values in times.items():
        median = statistics.median(values)
        print(
            f"  {mode:8} {median:6.2f} s  {args.tasks / median:7.0f} tasks/s"
            f"  rate ratio to plain {base / median:.2f}"
        )


if __name__ == "__main__":
    main()
