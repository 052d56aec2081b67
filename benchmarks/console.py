"""Benchmark: how fast the web console answers on memory://, over real HTTP.

The console runs under uvicorn in a thread of this process, and httpx2 asks for each page as a
browser would. Pages: the queues page with 50 queues (1,000 tasks each over 10 tags), once with
the figures from the last reading (how an open page refreshes) and once reading all 50 queues on
the request (the first visit); a queue page with 100,000 tasks in the queue (first page, a page
50,000 tasks in, a tag's page). Targets on a 2-core machine: queues page under 300 ms, tasks page
under 500 ms. It prints the median and 90th percentile wall time of each page, and its ratio to
the baseline run in the same process: a static file from the same server (the HTTP floor).
The same pages are then timed in-process through Starlette's TestClient (no socket), which shows
the console's own cost without the loopback round trip.

Run: python benchmarks/console.py [--repeat 30]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import httpx2
from starlette.testclient import TestClient

from pullqueue import Queue, Task
from pullqueue.adapters.memory import MemoryBackend
from pullqueue.console import create_app
from pullqueue.console.server import BackgroundConsole
from pullqueue.listen import bind

QUEUES = 50
TASKS_PER_QUEUE = 1000
BIG = 100_000
TAGS = 10


def fill(backend: MemoryBackend, queue: str, count: int, tags: int) -> None:
    q = Queue(queue, backend)
    for start in range(0, count, 100):
        q.add(
            [
                Task(b"x" * 200, name=f"t{i}", tag=f"user-{i % tags}")
                for i in range(start, min(start + 100, count))
            ]
        )


def timed(get: Callable[[], httpx2.Response], repeat: int) -> list[float]:
    get()  # warm up (templates compiled, first reading taken)
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        response = get()
        times.append(time.perf_counter() - started)
        assert response.status_code == 200, response.status_code
    return times


def line(label: str, times: list[float], baseline: float, target: float | None) -> str:
    median = statistics.median(times)
    p90 = sorted(times)[int(len(times) * 0.9) - 1]
    verdict = "" if target is None else ("  ok" if median < target else "  OVER TARGET")
    goal = "" if target is None else f" (target < {target * 1000:.0f} ms)"
    return (
        f"{label:<48} median {median * 1000:7.1f} ms  p90 {p90 * 1000:7.1f} ms"
        f"  x{median / baseline:6.1f} of baseline{goal}{verdict}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()

    many = MemoryBackend()
    for k in range(QUEUES):
        fill(many, f"queue-{k:02d}", TASKS_PER_QUEUE, TAGS)
    big = MemoryBackend()
    fill(big, "big", BIG, 100)

    servers = {
        "cached": BackgroundConsole(create_app(many, period=3600), bind("127.0.0.1", 0)),
        "cold": BackgroundConsole(
            create_app(many, period=0.0, sample_in_background=False), bind("127.0.0.1", 0)
        ),
        "big": BackgroundConsole(create_app(big, period=3600), bind("127.0.0.1", 0)),
    }
    try:
        with httpx2.Client(timeout=30) as client:
            base = servers["cached"].url

            def page(url: str) -> Callable[[], httpx2.Response]:
                return lambda: client.get(url)

            baseline = statistics.median(timed(page(base + "static/console.css"), args.repeat))
            cursor = sorted((t.eta_posix or 0.0, t.name or "") for t in big.list_tasks("big"))[
                BIG // 2
            ]
            deep = f"big?after={round(cursor[0] * 1e6)}~{cursor[1]}"
            rows = [
                ("baseline: a static file", base + "static/console.css", None),
                (f"queues page, {QUEUES} queues, last reading", base, 0.3),
                (f"queues page, {QUEUES} queues, read on request", servers["cold"].url, 0.3),
                (f"queue page, {BIG:,} tasks, first page", servers["big"].url + "queues/big", 0.5),
                (
                    f"queue page, {BIG:,} tasks, 50,000 in",
                    servers["big"].url + f"queues/{deep}",
                    0.5,
                ),
                (
                    f"queue page, {BIG:,} tasks, one tag's page",
                    servers["big"].url + "queues/big?tag=user-7",
                    0.5,
                ),
            ]
            print(f"{args.repeat} requests per page, wall time over HTTP on 127.0.0.1")
            for label, url, target in rows:
                print(line(label, timed(page(url), args.repeat), baseline, target))
        print(f"\n{args.repeat} requests per page, in-process (ASGI through TestClient, no socket)")
        apps = {name: server.app for name, server in servers.items()}
        with (
            TestClient(apps["cached"]) as cached,
            TestClient(apps["cold"]) as cold,
            TestClient(apps["big"]) as bigc,
        ):
            local = [
                ("baseline: a static file", cached, "/static/console.css", None),
                (f"queues page, {QUEUES} queues, last reading", cached, "/", 0.3),
                (f"queues page, {QUEUES} queues, read on request", cold, "/", 0.3),
                (f"queue page, {BIG:,} tasks, first page", bigc, "/queues/big", 0.5),
                (f"queue page, {BIG:,} tasks, 50,000 in", bigc, f"/queues/{deep}", 0.5),
                (f"queue page, {BIG:,} tasks, one tag's page", bigc, "/queues/big?tag=user-7", 0.5),
            ]
            floor = statistics.median(timed(lambda: cached.get("/static/console.css"), args.repeat))
            for label, client_, path, target in local:
                times = timed(lambda c=client_, p=path: c.get(p), args.repeat)  # type: ignore[misc]
                print(line(label, times, floor, target))
    finally:
        for server in servers.values():
            server.stop()


if __name__ == "__main__":
    main()
