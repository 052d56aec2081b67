"""Benchmark: named-task adds on pubsub:// with and without a task-name registry, in one run.

It shows what deduplication costs a producer: the same adds of named tasks through
`pullqueue.Queue` with no registry, the in-memory one, and Firestore (fresh names, then names
already taken), on the Pub/Sub and Firestore emulators, interleaved round by round (each round
starting with the next mode) so drift hits every mode alike. Prints median seconds per add
call, tasks per second, and the ratio of each mode's rate to the no-registry rate.

    python benchmarks/pubsub_named.py [--rounds 7] [--calls 10] [--batch 100]

Honours PUBSUB_EMULATOR_HOST / FIRESTORE_EMULATOR_HOST; otherwise starts both emulators
from the gcloud SDK (and stops them at exit). Emulator figures compare modes with each other;
they are not production latencies.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pullqueue import Queue, Settings, Task, TaskAlreadyExistsError
from pullqueue.adapters.pubsub import PubSubBackend
from pullqueue.dedupe import connect_registry
from pullqueue.dedupe.base import NameRegistry
from tests.support.emulators import shared_emulator_host

_names = itertools.count()


def fresh_batch(size: int) -> list[Task]:
    return [Task(b"x" * 64, name=f"bench-{next(_names)}") for _ in range(size)]


def timed_adds(queue: Queue, batches: list[list[Task]], expect_refusal: bool) -> list[float]:
    """Seconds per add call, one per batch."""
    seconds: list[float] = []
    for batch in batches:
        start = time.perf_counter()
        try:
            queue.add(batch)
        except TaskAlreadyExistsError:
            if not expect_refusal:
                raise
        seconds.append(time.perf_counter() - start)
    return seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds per mode")
    parser.add_argument("--calls", type=int, default=10, help="add calls per mode and round")
    parser.add_argument("--batch", type=int, default=100, help="named tasks per add call (<=100)")
    args = parser.parse_args(argv)
    run(rounds=args.rounds, calls=args.calls, batch=args.batch)


def run(*, rounds: int, calls: int, batch: int) -> None:
    """Time every mode and print the table."""
    pubsub_host = shared_emulator_host("pubsub")
    firestore_host = shared_emulator_host("firestore")
    project = f"bench-{uuid.uuid4().hex[:8]}"
    collection = f"bench-names-{uuid.uuid4().hex[:8]}"
    registries: dict[str, NameRegistry | None] = {
        "no registry": None,
        "memory://": connect_registry("memory://"),
        "firestore://": connect_registry(f"firestore://{project}?collection={collection}"),
    }
    backends = {
        mode: PubSubBackend(
            project,
            settings=Settings(),
            auto_create=True,
            names=names,
            accept_duplicate_names=names is None,  # the baseline: names unchecked
        )
        for mode, names in registries.items()
    }
    queues = {
        mode: Queue(f"bench-{i}", backend) for i, (mode, backend) in enumerate(backends.items())
    }
    for queue in queues.values():
        queue.add(fresh_batch(1))  # provision the topic and warm the channels

    duplicate_queue = queues["firestore://"]
    taken: list[list[Task]] = []

    def duplicates() -> list[list[Task]]:
        """Batches re-using names already added on the Firestore queue (all refused)."""
        return [[Task(b"x", name=t.name) for t in added] for added in taken[:calls]]

    modes: dict[str, tuple[Queue, Callable[[], list[list[Task]]], bool]] = {
        mode: (queue, lambda: [fresh_batch(batch) for _ in range(calls)], False)
        for mode, queue in queues.items()
    }
    modes["firestore:// (names taken)"] = (duplicate_queue, duplicates, True)

    samples: dict[str, list[float]] = {mode: [] for mode in modes}
    order = list(modes)
    for round_number in range(rounds):
        shift = round_number % len(order)
        for mode in order[shift:] + order[:shift]:
            queue, make, refused = modes[mode]
            batches = make()
            if not batches:
                continue
            samples[mode] += timed_adds(queue, batches, refused)
            if mode == "firestore://":
                taken.extend(batches)

    print(f"Pub/Sub emulator {pubsub_host}, Firestore emulator {firestore_host}")
    print(
        f"{rounds} rounds x {calls} add calls x {batch} named tasks per mode"
        " (medians over every call)\n"
    )
    base_rate = batch / statistics.median(samples["no registry"])
    print(f"{'mode':<28} {'median s/add':>13} {'tasks/s':>9} {'rate vs no registry':>20}")
    for mode, seconds in samples.items():
        median = statistics.median(seconds)
        rate = batch / median
        print(f"{mode:<28} {median:>13.4f} {rate:>9.0f} {rate / base_rate:>19.2f}x")

    for backend in backends.values():
        backend.close()
    for registry in registries.values():
        if registry is not None:
            registry.close()


if __name__ == "__main__":
    main()
