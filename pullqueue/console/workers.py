"""Leases and completions per minute from the workers' own metrics, where the backend counts none.

Pub/Sub counts neither; every `pullqueue work --metrics-port` process does (its Prometheus
endpoint, docs/operations.md). Given those endpoints (`pullqueue console --metrics URL`), the
console scrapes each at every reading and reports, per queue, the increase of the workers'
counters over the last minute, summed over the workers; a counter that went down is a restarted
worker, counted from zero. A worker that cannot be scraped makes the figure unknown, not smaller.
"""

from __future__ import annotations

import time
import urllib.request
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from pullqueue.metrics import system_of

CONSUMED = "messaging_client_consumed_messages"
COMPLETED = "pullqueue_worker_tasks_completed"
WINDOW = 60.0
SCRAPE_TIMEOUT = 3.0


@dataclass(frozen=True)
class Rate:
    """Tasks per minute over the workers, or None with the reason."""

    value: float | None
    reason: str | None = None
    exact: bool = True


def parse(text: str, system: str) -> dict[tuple[str, str], float]:
    """(counter, queue) -> total over the samples of one exposition, for one messaging system."""
    from prometheus_client.parser import text_string_to_metric_families

    totals: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        if family.name not in (CONSUMED, COMPLETED):
            continue
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue
            labels = sample.labels
            if labels.get("messaging_system") != system:
                continue
            key = (family.name, labels.get("messaging_destination_name", ""))
            totals[key] = totals.get(key, 0.0) + sample.value
    return totals


def fetch(url: str) -> str:
    """One scrape of a Prometheus endpoint."""
    with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT) as response:
        body: bytes = response.read()
    return body.decode("utf-8", errors="replace")


class WorkerMetrics:
    """Scrapes the workers' endpoints and keeps a minute of their counters."""

    def __init__(
        self,
        endpoints: list[str],
        backend_url: str,
        *,
        fetch: Callable[[str], str] = fetch,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.endpoints = list(endpoints)
        self.system = system_of(backend_url)
        self._fetch = fetch
        self._clock = clock
        self._samples: dict[str, deque[tuple[float, dict[tuple[str, str], float]]]] = {
            url: deque() for url in self.endpoints
        }
        self._failed: dict[str, str] = {}

    def scrape(self) -> None:
        """Read every endpoint once (an unreachable one is remembered with why)."""
        for url in self.endpoints:
            now = self._clock()
            try:
                totals = parse(self._fetch(url), self.system)
            except Exception as exc:
                self._failed[url] = f"{type(exc).__name__}: {exc}"
                continue
            self._failed.pop(url, None)
            history = self._samples[url]
            history.append((now, totals))
            while len(history) > 2 and history[1][0] <= now - WINDOW:
                history.popleft()

    def rate(self, counter: str, queue: str) -> Rate:
        """The counter's increase over the last minute for the queue, summed over workers."""
        if self._failed:
            url, why = next(iter(self._failed.items()))
            return Rate(None, f"worker metrics at {url} could not be read ({why})")
        total = 0.0
        short = False
        for url, history in self._samples.items():
            if len(history) < 2:
                return Rate(None, f"worker metrics at {url}: a rate needs a second scrape")
            newest_at, newest = history[-1]
            start_at, start = history[0]
            for at, totals in history:
                if at <= newest_at - WINDOW:
                    start_at, start = at, totals
            short = short or newest_at - start_at < WINDOW - 1
            now_value = newest.get((counter, queue), 0.0)
            then_value = start.get((counter, queue), 0.0)
            total += now_value - then_value if now_value >= then_value else now_value
        return Rate(total, exact=not short)
