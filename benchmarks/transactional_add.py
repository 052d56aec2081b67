"""Benchmark: a transactional add (the outbox) against a plain add, in the same run.

Each round runs the same ndb transactions (one entity written) on the SDK's datastore stub served
over /rpc_http (as the App Engine API serves it), interleaved: `plain` adds one task after the
transaction commits, `transactional` adds it inside with transactional=True (staged, published
after the commit, staging deleted). On memory:// and on the Pub/Sub emulator with a name registry
(the outbox publishes named tasks; a plain add there is unnamed). Prints per backend the median
over rounds of the seconds per transaction (with its add), the ratio transactional / plain, and
per transaction the datastore calls by method, the backend adds and the registry claims, and the
duplicate window: the median time from Pub/Sub (or memory://) taking a transaction's tasks to
their staging being deleted, when a crash leaves them staged though published.

    python benchmarks/transactional_add.py [--backends memory emulator] [--rounds 5] [--txns 100]

Honours PUBSUB_EMULATOR_HOST; otherwise starts the emulator from the gcloud SDK.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

QUEUE = "txbench"


class Counting:
    """Wraps a backend (or registry) and counts the calls of the methods named."""

    def __init__(self, inner: Any, counts: Counter[str], *methods: str) -> None:
        self._inner, self._counts, self._methods = inner, counts, methods

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if name not in self._methods:
            return value

        def counted(*args: Any, **kwargs: Any) -> Any:
            self._counts[name] += 1
            return value(*args, **kwargs)

        return counted


def make_backend(kind: str, counts: Counter[str]) -> Any:
    from pullqueue.adapters.memory import MemoryBackend

    if kind == "memory":
        return MemoryBackend()
    from pullqueue.adapters.pubsub import PubSubBackend
    from pullqueue.dedupe import MemoryNameRegistry
    from tests.support.emulators import shared_emulator_host

    shared_emulator_host("pubsub")
    registry = Counting(MemoryNameRegistry(tombstone_seconds=3600), counts, "claim")
    return PubSubBackend(f"pq-{uuid.uuid4().hex[:12]}", auto_create=True, names=registry)


def run(kind: str, rounds: int, txns: int) -> dict[str, Any]:
    from google.appengine.ext import ndb

    from pullqueue.compat import taskqueue
    from tests.support.datastore_server import DatastoreServer, use_datastore_at

    server = DatastoreServer().start()
    use_datastore_at(server.host)
    context = ndb.get_context()
    context.set_cache_policy(False)
    context.set_memcache_policy(False)

    class Order(ndb.Model):
        number = ndb.IntegerProperty()

    counts = {"plain": Counter[str](), "transactional": Counter[str]()}
    seconds: dict[str, list[float]] = {"plain": [], "transactional": []}
    backends = {
        mode: Counting(make_backend(kind, counts[mode]), counts[mode], "add") for mode in counts
    }
    queues = {mode: taskqueue.Queue(QUEUE, backend=backends[mode]) for mode in counts}
    for mode in counts:  # warm up: topics made, connections open
        queues[mode].add(taskqueue.Task(payload=b"warm", method="PULL"))
    for mode in counts:
        counts[mode].clear()

    def plain(number: int) -> None:
        ndb.transaction(lambda: Order(number=number).put())
        queues["plain"].add(taskqueue.Task(payload=b"%d" % number, method="PULL"))

    def transactional(number: int) -> None:
        def body() -> None:
            Order(number=number).put()
            queues["transactional"].add(
                taskqueue.Task(payload=b"%d" % number, method="PULL"), transactional=True
            )

        ndb.transaction(body)

    windows = _time_windows()
    try:
        for _ in range(rounds):
            for mode, step in (("plain", plain), ("transactional", transactional)):
                before = dict(server.calls)
                started = time.perf_counter()
                for number in range(txns):
                    step(number)
                seconds[mode].append((time.perf_counter() - started) / txns)
                for method, total in server.calls.items():
                    counts[mode][f"datastore {method}"] += total - before.get(method, 0)
    finally:
        for backend in backends.values():
            backend.close()
        server.stop()
    calls = {
        mode: {k: v / (rounds * txns) for k, v in sorted(c.items()) if v}
        for mode, c in counts.items()
    }
    result: dict[str, Any] = {
        mode: (statistics.median(seconds[mode]), calls[mode]) for mode in counts
    }
    result["window"] = statistics.median(windows) if windows else None
    return result


def _time_windows() -> list[float]:
    """Records, per transactional add, the seconds from its publish returning to its staging
    deleted (pullqueue.compat.transactional's two steps)."""
    from google.appengine.datastore import datastore_rpc

    import pullqueue.compat.transactional as transactional

    windows: list[float] = []
    published: list[float] = []
    publish = transactional.publish_committed  # type: ignore[attr-defined]
    delete = datastore_rpc.Connection.delete

    def timed_publish(*args: Any) -> Any:
        result = publish(*args)
        published.append(time.perf_counter())
        return result

    def timed_delete(self: Any, *args: Any) -> Any:
        result = delete(self, *args)
        if published:
            windows.append(time.perf_counter() - published.pop())
        return result

    transactional.publish_committed = timed_publish  # type: ignore[attr-defined]
    datastore_rpc.Connection.delete = timed_delete
    return windows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=["memory", "emulator"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--txns", type=int, default=100)
    args = parser.parse_args(argv)
    for kind in args.backends:
        result = run("memory" if kind == "memory" else "pubsub", args.rounds, args.txns)
        (plain, plain_calls), (tx, tx_calls) = result["plain"], result["transactional"]
        print(f"{kind}: {args.rounds} rounds of {args.txns} transactions, medians")
        print(f"  plain add after the commit: {plain * 1000:7.2f} ms per transaction")
        print(f"  transactional add (outbox): {tx * 1000:7.2f} ms per transaction")
        print(f"  ratio transactional / plain: {tx / plain:.2f}")
        if result["window"] is not None:
            window = result["window"] * 1000
            print(f"  duplicate window (publish taken to staging deleted): {window:.2f} ms")
        for mode, calls in (("plain", plain_calls), ("transactional", tx_calls)):
            shown = ", ".join(f"{name} {value:g}" for name, value in calls.items())
            print(f"  calls per transaction, {mode}: {shown}")


if __name__ == "__main__":
    main()
