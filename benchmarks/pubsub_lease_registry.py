"""Benchmark: what the name registry adds to a lease on pubsub://, in one run.

A lease that finds tasks asks the registry once which of their names were deleted by name in
another process (one batched read), so a worker with a Firestore registry pays one read per
non-empty lease. This adds the same named tasks to queues with no registry, the in-memory one and
Firestore, then times `lease(60, N)` + `delete` of what came, interleaved round by round, on the
Pub/Sub and Firestore emulators. Prints the median seconds per lease call and per delete call,
and each mode's lease time relative to no registry.

    python benchmarks/pubsub_lease_registry.py [--rounds 7] [--batch 100]

Emulator figures compare modes with each other; they are not production latencies.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pullqueue import Queue, Settings, Task
from pullqueue.adapters.pubsub import PubSubBackend
from pullqueue.dedupe import connect_registry
from pullqueue.dedupe.base import NameRegistry
from tests.support.emulators import shared_emulator_host

_names = itertools.count()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds per mode")
    parser.add_argument("--batch", type=int, default=100, help="tasks per lease (<=1000)")
    args = parser.parse_args(argv)
    shared_emulator_host("pubsub")
    shared_emulator_host("firestore")
    project = f"bench-{uuid.uuid4().hex[:8]}"
    collection = f"bench-names-{uuid.uuid4().hex[:8]}"
    registries: dict[str, NameRegistry | None] = {
        "no registry": None,
        "memory://": connect_registry("memory://"),
        "firestore://": connect_registry(f"firestore://{project}?collection={collection}"),
    }
    queues = {
        mode: Queue(
            f"lease-{i}",
            PubSubBackend(
                project,
                settings=Settings(),
                auto_create=True,
                names=names,
                accept_duplicate_names=names is None,  # the baseline: names unchecked
            ),
        )
        for i, (mode, names) in enumerate(registries.items())
    }
    leases: dict[str, list[float]] = {mode: [] for mode in queues}
    deletes: dict[str, list[float]] = {mode: [] for mode in queues}
    modes = list(queues)
    for round_ in range(args.rounds):
        for mode in modes[round_ % len(modes) :] + modes[: round_ % len(modes)]:
            queue = queues[mode]
            for start in range(0, args.batch, 100):
                size = min(100, args.batch - start)
                queue.add([Task(b"x" * 64, name=f"b-{next(_names)}") for _ in range(size)])
            got = []
            started = time.perf_counter()
            while len(got) < args.batch:
                got += queue.lease(60, args.batch - len(got))
            leases[mode].append(time.perf_counter() - started)
            started = time.perf_counter()
            queue.delete(got)
            deletes[mode].append(time.perf_counter() - started)
    base = statistics.median(leases["no registry"])
    print(f"{'mode':<16}{'median s/lease':>16}{'median s/delete':>17}{'lease vs none':>15}")
    for mode in modes:
        lease = statistics.median(leases[mode])
        delete = statistics.median(deletes[mode])
        print(f"{mode:<16}{lease:>16.4f}{delete:>17.4f}{lease / base:>14.2f}x")
    for queue in queues.values():
        queue.backend.close()


if __name__ == "__main__":
    main()
