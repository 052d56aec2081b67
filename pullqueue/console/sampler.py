"""The console's reader: every queue's figures every few seconds, and an hour of backlog history.

One background thread reads the backend, so however many browsers poll, the backend sees one
reader; pages show its latest reading, and the backlog plots draw from its ring buffer.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace

from pullqueue.adapters.base import Backend, QueueListingBackend
from pullqueue.console.figures import Figure, QueueFigures, read_figures
from pullqueue.console.workers import COMPLETED, CONSUMED, WorkerMetrics
from pullqueue.monitoring import BacklogReader

log = logging.getLogger(__name__)

HISTORY_SECONDS = 3600.0
"""How far back the backlog plots reach."""
PUBSUB_PERIOD = 60.0
"""Seconds between readings on Pub/Sub: Cloud Monitoring samples once a minute."""
DEFAULT_PERIOD = 5.0
"""Seconds between readings elsewhere."""
MIN_WAIT = 0.5
"""The background reader never reads more often than this, whatever the period."""


def default_period(url: str) -> float:
    """How often the console reads a backend's figures."""
    return PUBSUB_PERIOD if url.startswith("pubsub://") else DEFAULT_PERIOD


class Sampler:
    """Reads every queue's figures each `period` seconds and keeps their backlog for an hour."""

    def __init__(
        self,
        backend: Backend,
        *,
        period: float | None = None,
        reader: Callable[[str], BacklogReader] = BacklogReader,
        workers: WorkerMetrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.backend = backend
        self.workers = workers
        self.period = default_period(backend.url) if period is None else period
        # One reader (one Cloud Monitoring client) per project for the console's life, not one
        # per queue per reading.
        self.reader = functools.cache(reader)
        self._clock = clock
        self._lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._latest: dict[str, QueueFigures] = {}
        self._history: dict[str, deque[tuple[float, float | None]]] = {}
        self._queues: list[str] = []
        self._listing_error: str | None = None
        self._read_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._extra: set[str] = set()

    @property
    def can_list(self) -> bool:
        return isinstance(self.backend, QueueListingBackend)

    def watch(self, queue: str) -> None:
        """Also read a queue the backend does not list (one opened by name)."""
        with self._lock:
            self._extra.add(queue)

    def _list(self) -> list[str]:
        names: set[str] = set()
        if isinstance(self.backend, QueueListingBackend):
            try:
                names.update(self.backend.list_queues())
                self._listing_error = None
            except Exception as exc:
                self._listing_error = f"could not list the queues: {exc}"
                names.update(self._queues)
        with self._lock:
            names.update(self._extra)
        return sorted(names)

    def read(self) -> None:
        """Read every queue now and add its backlog to the history."""
        with self._read_lock:
            queues = self._list()
            readings = {q: read_figures(self.backend, q, self.reader) for q in queues}
            if self.workers is not None:
                self.workers.scrape()
                readings = {q: self._with_worker_rates(f) for q, f in readings.items()}
            now = self._clock()
            with self._lock:
                self._queues = queues
                self._latest = readings
                keep = int(HISTORY_SECONDS / max(self.period, 0.1)) + 2
                for queue, figures in readings.items():
                    history = self._history.get(queue)
                    if history is None or history.maxlen != keep:
                        history = self._history[queue] = deque(history or (), maxlen=keep)
                    history.append((now, figures.backlog.value))
                for gone in set(self._history) - set(queues):
                    del self._history[gone]
                self._read_at = now

    def _with_worker_rates(self, figures: QueueFigures) -> QueueFigures:
        """Leases and completions from the workers' metrics where the backend counts none."""

        def rate(figure: Figure, counter: str) -> Figure:
            if figure.value is not None or self.workers is None:
                return figure
            found = self.workers.rate(counter, figures.queue)
            return Figure(found.value, found.reason, found.exact)

        return replace(
            figures,
            leases_per_minute=rate(figures.leases_per_minute, CONSUMED),
            completions_per_minute=rate(figures.completions_per_minute, COMPLETED),
        )

    def fresh(self, max_age: float | None = None) -> None:
        """Read now unless the latest reading is younger than max_age (default: the period)."""
        limit = self.period if max_age is None else max_age
        if self._clock() - self._read_at >= limit:
            self.read()

    @property
    def listing_error(self) -> str | None:
        return self._listing_error

    def queues(self) -> list[str]:
        with self._lock:
            return list(self._queues)

    def latest(self, queue: str) -> QueueFigures | None:
        with self._lock:
            return self._latest.get(queue)

    def history(self, queue: str) -> list[tuple[float, float | None]]:
        """(time, backlog) pairs of the last hour, oldest first; None where it was unknown."""
        cutoff = self._clock() - HISTORY_SECONDS
        with self._lock:
            return [p for p in self._history.get(queue, ()) if p[0] >= cutoff]

    def start(self) -> None:
        """Read in a daemon thread every period until stop()."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="console-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.fresh(self.period * 0.9)
            except Exception:  # keep sampling; the page shows each queue's own error
                log.exception("the console could not read the figures")
            self._stop.wait(max(self.period, MIN_WAIT))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None
