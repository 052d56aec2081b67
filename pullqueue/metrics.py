"""OpenTelemetry metrics of queues and workers, named after the messaging semantic conventions.

The library records through the OpenTelemetry API alone (a no-op until the service installs an
SDK), so any exporter a service already runs sees pullqueue's figures; `serve_prometheus` sets up
the SDK with a Prometheus endpoint for `pullqueue work --metrics-port` (docs/operations.md).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from opentelemetry import metrics as otel

SYSTEM = "messaging.system"
DESTINATION = "messaging.destination.name"
OPERATION = "messaging.operation.name"
ERROR_TYPE = "error.type"
TAG = "pullqueue.tag"

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30)
"""Seconds: the semantic conventions' advice for messaging durations, plus 30 s."""

_SYSTEMS = {
    "pubsub": "gcp_pubsub",
    "memory": "pullqueue_memory",
    "cloudtasks": "gcp_cloud_tasks",
    "appengine": "gcp_appengine_taskqueue",
}

_meter = otel.get_meter("pullqueue")
sent = _meter.create_counter(
    "messaging.client.sent.messages", "{message}", "Tasks added to a queue."
)
consumed = _meter.create_counter(
    "messaging.client.consumed.messages", "{message}", "Tasks handed out by lease calls."
)
process_duration = _meter.create_histogram(
    "messaging.process.duration",
    "s",
    "Time a worker's handler took over a task (or a batch, for a batch handler).",
    explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
)
completed = _meter.create_counter(
    "pullqueue.worker.tasks.completed", "{task}", "Tasks whose handler succeeded."
)
failed = _meter.create_counter(
    "pullqueue.worker.tasks.failed", "{task}", "Tasks whose handler raised (released to retry)."
)
retried = _meter.create_counter(
    "pullqueue.worker.tasks.retried", "{task}", "Leased tasks that had been leased before."
)
dead_lettered = _meter.create_counter(
    "pullqueue.worker.tasks.dead_lettered",
    "{task}",
    "Tasks that failed on their last allowed attempt: the queue sets them aside.",
)
released = _meter.create_counter(
    "pullqueue.worker.tasks.released", "{task}", "Tasks released unhandled as the worker stopped."
)
lease_extensions = _meter.create_counter(
    "pullqueue.worker.lease.extensions", "{lease}", "Leases the worker extended."
)
leases_lost = _meter.create_counter(
    "pullqueue.worker.leases.lost", "{lease}", "Leases that ran out while the handler ran."
)


def system_of(url: str) -> str:
    """The messaging.system value for a backend URL."""
    scheme = url.partition("://")[0]
    return _SYSTEMS.get(scheme, scheme)


def queue_attributes(url: str, queue: str) -> dict[str, str]:
    """The attributes every measurement of one queue carries."""
    return {SYSTEM: system_of(url), DESTINATION: queue}


class _Holding(Protocol):
    def held_tasks(self) -> int: ...


class _HeldGauge:
    """The held-tasks gauge: one observation per live worker, read when metrics are collected."""

    def __init__(self) -> None:
        self._workers: weakref.WeakKeyDictionary[Any, dict[str, str]] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        _meter.create_observable_gauge(
            "pullqueue.worker.tasks.held",
            [self._observe],
            "{task}",
            "Tasks a worker holds a lease on right now (waiting for or inside the handler).",
        )

    def watch(self, worker: _Holding, attributes: dict[str, str]) -> None:
        with self._lock:
            self._workers[worker] = attributes

    def forget(self, worker: _Holding) -> None:
        with self._lock:
            self._workers.pop(worker, None)

    def _observe(self, _options: otel.CallbackOptions) -> Iterable[otel.Observation]:
        with self._lock:
            items = list(self._workers.items())
        totals: dict[tuple[tuple[str, str], ...], int] = {}
        for worker, attributes in items:
            key = tuple(sorted(attributes.items()))
            totals[key] = totals.get(key, 0) + worker.held_tasks()
        return [otel.Observation(value, dict(key)) for key, value in totals.items()]


held = _HeldGauge()

_COUNTERS: dict[str, otel.Counter] = {
    "processed": completed,
    "failed": failed,
    "retried": retried,
    "released": released,
    "dead_lettered": dead_lettered,
    "lease_extensions": lease_extensions,
    "leases_lost": leases_lost,
}


def worker_recorder(attributes: dict[str, str]) -> Callable[[dict[str, int]], None]:
    """A WorkerStats observer: adds each counter delta to its instrument."""

    def record(deltas: dict[str, int]) -> None:
        for name, delta in deltas.items():
            counter = _COUNTERS.get(name)
            if counter is not None and delta:
                counter.add(delta, attributes)

    return record


class PrometheusEndpoint:
    """A running /metrics endpoint serving every pullqueue instrument as Prometheus text."""

    def __init__(self, server: Any, thread: threading.Thread, port: int) -> None:
        self._server = server
        self._thread = thread
        self.port = port

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def serve_prometheus(port: int, host: str = "0.0.0.0") -> PrometheusEndpoint:
    """Install the OpenTelemetry SDK with a Prometheus reader and serve it on host:port.

    Raises ImportError naming the extra when the SDK or exporter is missing, OSError when the
    port cannot be bound.
    """
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.resources import Resource
        from prometheus_client import start_http_server
    except ImportError as exc:
        raise ImportError(
            "serving metrics needs the OpenTelemetry SDK and Prometheus exporter: pip install"
            " 'pullqueue[metrics]'"
        ) from exc
    reader = PrometheusMetricReader()
    provider = MeterProvider(
        metric_readers=[reader],
        resource=Resource.create({"service.name": "pullqueue-worker"}),
    )
    otel.set_meter_provider(provider)
    server, thread = start_http_server(port, host)
    return PrometheusEndpoint(server, thread, server.server_port)
