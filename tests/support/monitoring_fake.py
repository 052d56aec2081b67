"""A stand-in for Cloud Monitoring's projects.timeSeries.list, served over real gRPC.

The real google-cloud-monitoring client (which speaks only gRPC) reaches it through a channel to
a loopback server, so a test drives pullqueue's Monitoring reader through the client's own
serialization, paging and error mapping. The model keeps time series as Monitoring does (gauge
points at an instant, DELTA points over an interval, newest first), and applies the request as the
API documents it: the filter grammar (one metric type, resource labels, one_of, starts_with, AND),
the interval (end required, start not after it), ALIGN_NONE/ALIGN_SUM/ALIGN_MAX alignment,
paging with page tokens tied to the query, and injected failures by gRPC status.

    with monitoring_service("proj") as service:
        service.gauge(UNDELIVERED, "q-workers", 42, at=now - 60)
        reader = BacklogReader("proj", service.client())
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.cloud import monitoring_v3
from google.cloud.monitoring_v3.services.metric_service.transports import (
    MetricServiceGrpcTransport,
)

METHOD = "/google.monitoring.v3.MetricService/ListTimeSeries"
SERVICE = "google.monitoring.v3.MetricService"
_TOKEN = re.compile(
    r"\s*(one_of|starts_with|ends_with|AND|OR|NOT|=|!=|\(|\)|,|\"(?:[^\"\\]|\\.)*\"|[A-Za-z_][A-Za-z0-9_.]*)"
)
_SELECTOR = re.compile(
    r"^(metric\.type|resource\.type|project|(metric|resource)\.labels?\.[A-Za-z0-9_]+)$"
)
_ALIGNERS = {"ALIGN_NONE", "ALIGN_SUM", "ALIGN_MAX"}


class ModelError(Exception):
    """A request the real API would refuse: the gRPC status and the message it would give."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Series:
    metric_type: str
    kind: str  # "GAUGE" or "DELTA"
    resource_labels: dict[str, str]
    points: list[tuple[float, float, int]] = field(default_factory=list)
    """(start, end, value), kept in time order."""


@dataclass
class Condition:
    selector: str
    op: str  # "=", "one_of", "starts_with", "ends_with"
    values: list[str]

    def matches(self, series: Series, project: str) -> bool:
        if self.selector == "metric.type":
            actual: str | None = series.metric_type
        elif self.selector == "resource.type":
            actual = "pubsub_subscription"
        elif self.selector == "project":
            actual = project
        elif self.selector.startswith("resource."):
            actual = series.resource_labels.get(self.selector.split(".", 2)[2])
        else:
            actual = None  # the model's series carry no metric labels
        if actual is None:
            return False
        if self.op == "starts_with":
            return actual.startswith(self.values[0])
        if self.op == "ends_with":
            return actual.endswith(self.values[0])
        return actual in self.values


def _unquote(token: str) -> str:
    return re.sub(r"\\(.)", r"\1", token[1:-1])


def parse_filter(text: str) -> list[Condition]:
    """The conjunction of conditions a filter states; ModelError(INVALID_ARGUMENT) otherwise."""
    tokens: list[str] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise ModelError(grpc.StatusCode.INVALID_ARGUMENT, f"Could not parse filter: {text!r}")
        tokens.append(match.group(1))
        pos = match.end()
    conditions: list[Condition] = []
    i = 0

    def expect(token: str) -> None:
        nonlocal i
        if i >= len(tokens) or tokens[i] != token:
            raise ModelError(grpc.StatusCode.INVALID_ARGUMENT, f"Could not parse filter: {text!r}")
        i += 1

    def string() -> str:
        nonlocal i
        if i >= len(tokens) or not tokens[i].startswith('"'):
            raise ModelError(grpc.StatusCode.INVALID_ARGUMENT, f"Could not parse filter: {text!r}")
        i += 1
        return _unquote(tokens[i - 1])

    while True:
        if i >= len(tokens) or not _SELECTOR.match(tokens[i]):
            raise ModelError(grpc.StatusCode.INVALID_ARGUMENT, f"Could not parse filter: {text!r}")
        selector = tokens[i]
        i += 1
        if i < len(tokens) and tokens[i] == "!=":
            raise ModelError(grpc.StatusCode.UNIMPLEMENTED, "the model does not implement '!='")
        expect("=")
        if i < len(tokens) and tokens[i] in ("one_of", "starts_with", "ends_with"):
            op = tokens[i]
            i += 1
            expect("(")
            values = [string()]
            while op == "one_of" and i < len(tokens) and tokens[i] == ",":
                i += 1
                values.append(string())
            expect(")")
        else:
            op, values = "=", [string()]
        conditions.append(Condition(selector, op, values))
        if i == len(tokens):
            break
        if tokens[i] in ("OR", "NOT", "("):
            raise ModelError(
                grpc.StatusCode.UNIMPLEMENTED, f"the model does not implement {tokens[i]}"
            )
        expect("AND")
    types = [c for c in conditions if c.selector == "metric.type"]
    if len(types) != 1 or types[0].op != "=":
        raise ModelError(
            grpc.StatusCode.INVALID_ARGUMENT,
            'A filter must specify exactly one metric type: metric.type = "..."',
        )
    return conditions


@dataclass
class Fault:
    code: grpc.StatusCode
    times: int = 1


class MonitoringModel:
    """Time series of one project and the timeSeries.list that reads them."""

    def __init__(self, project: str) -> None:
        self.project = project
        self.series: dict[tuple[str, str], Series] = {}
        self.requests: list[monitoring_v3.ListTimeSeriesRequest] = []
        self.faults: list[Fault] = []
        self.lock = threading.Lock()

    def _series(self, metric_type: str, subscription: str, kind: str) -> Series:
        key = (metric_type, subscription)
        if key not in self.series:
            labels = {"project_id": self.project, "subscription_id": subscription}
            self.series[key] = Series(metric_type, kind, labels)
        return self.series[key]

    def gauge(self, metric_type: str, subscription: str, value: int, *, at: float) -> None:
        """A gauge sample at an instant."""
        with self.lock:
            series = self._series(metric_type, subscription, "GAUGE")
            series.points.append((at, at, value))
            series.points.sort()

    def delta(
        self, metric_type: str, subscription: str, value: int, *, start: float, end: float
    ) -> None:
        """A DELTA sample: value counted over (start, end]."""
        with self.lock:
            series = self._series(metric_type, subscription, "DELTA")
            series.points.append((start, end, value))
            series.points.sort()

    def fail(self, code: grpc.StatusCode, times: int = 1) -> None:
        """Answer the next `times` requests with this status."""
        self.faults.append(Fault(code, times))

    def list_time_series(
        self, request: monitoring_v3.ListTimeSeriesRequest
    ) -> monitoring_v3.ListTimeSeriesResponse:
        with self.lock:
            self.requests.append(request)
            if self.faults:
                fault = self.faults[0]
                fault.times -= 1
                if fault.times <= 0:
                    self.faults.pop(0)
                raise ModelError(fault.code, f"injected {fault.code.name}")
            return self._list(request)

    def _list(
        self, request: monitoring_v3.ListTimeSeriesRequest
    ) -> monitoring_v3.ListTimeSeriesResponse:
        if request.name != f"projects/{self.project}":
            raise ModelError(grpc.StatusCode.NOT_FOUND, f"Project {request.name} not found")
        conditions = parse_filter(request.filter)
        if not request.interval or "end_time" not in request.interval:
            raise ModelError(
                grpc.StatusCode.INVALID_ARGUMENT, "Field interval.end_time had an invalid value"
            )
        end = request.interval.end_time.timestamp()
        start = request.interval.start_time.timestamp() if "start_time" in request.interval else end
        if start > end:
            raise ModelError(
                grpc.StatusCode.INVALID_ARGUMENT,
                "Field interval.start_time had an invalid value: must not be later than end_time",
            )
        aligner = "ALIGN_NONE"
        period = 0.0
        if "aggregation" in request:
            aggregation = request.aggregation
            aligner = monitoring_v3.Aggregation.Aligner(aggregation.per_series_aligner).name
            if aligner not in _ALIGNERS:
                raise ModelError(
                    grpc.StatusCode.UNIMPLEMENTED, f"the model does not implement {aligner}"
                )
            if aggregation.cross_series_reducer:
                raise ModelError(
                    grpc.StatusCode.UNIMPLEMENTED, "the model does not implement reducers"
                )
            period = (
                aggregation.alignment_period.total_seconds()
                if "alignment_period" in aggregation
                else 0.0
            )
            if aligner != "ALIGN_NONE" and period < 60:
                raise ModelError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "The alignment period must be at least 60 seconds",
                )
        matching = sorted(
            (
                s
                for s in self.series.values()
                if all(c.matches(s, self.project) for c in conditions)
            ),
            key=lambda s: sorted(s.resource_labels.items()),
        )
        out: list[monitoring_v3.TimeSeries] = []
        for series in matching:
            # A point is in the interval when its end time is: (start, end] for an interval that
            # has a length, the instant itself for a zero-length one.
            points = [p for p in series.points if (start < p[1] <= end) or (start == end == p[1])]
            if not points:
                continue
            out.append(self._render(series, self._align(series, points, aligner, period, end)))
        query = hashlib.sha256(
            monitoring_v3.ListTimeSeriesRequest.serialize(
                monitoring_v3.ListTimeSeriesRequest(
                    name=request.name,
                    filter=request.filter,
                    interval=request.interval,
                    aggregation=request.aggregation,
                )
            )
        ).hexdigest()[:16]
        offset = 0
        if request.page_token:
            token_query, _, raw = request.page_token.partition(":")
            if token_query != query or not raw.isdigit():
                raise ModelError(
                    grpc.StatusCode.INVALID_ARGUMENT, "The pagination token is invalid"
                )
            offset = int(raw)
        size = request.page_size or 100_000
        page = out[offset : offset + size]
        token = f"{query}:{offset + size}" if offset + size < len(out) else ""
        return monitoring_v3.ListTimeSeriesResponse(time_series=page, next_page_token=token)

    @staticmethod
    def _align(
        series: Series,
        points: list[tuple[float, float, int]],
        aligner: str,
        period: float,
        end: float,
    ) -> list[tuple[float, float, int]]:
        if aligner == "ALIGN_NONE":
            return points
        if aligner == "ALIGN_SUM" and series.kind == "GAUGE":
            raise ModelError(
                grpc.StatusCode.INVALID_ARGUMENT,
                "The aligner ALIGN_SUM is not valid for a GAUGE metric of type INT64",
            )
        buckets: dict[int, list[int]] = {}
        for _, point_end, value in points:
            # Output points sit at end, end - period, ...: each point goes to the first after it.
            index = int((end - point_end) // period)
            buckets.setdefault(index, []).append(value)
        combine = sum if aligner == "ALIGN_SUM" else max
        return [
            (
                end - (k + 1) * period if series.kind == "DELTA" else end - k * period,
                end - k * period,
                combine(v),
            )
            for k, v in sorted(buckets.items(), reverse=True)
        ]

    @staticmethod
    def _render(series: Series, points: list[tuple[float, float, int]]) -> monitoring_v3.TimeSeries:
        def stamp(t: float) -> dict[str, int]:
            return {"seconds": int(t), "nanos": round((t - int(t)) * 1e9)}

        return monitoring_v3.TimeSeries(
            metric={"type": series.metric_type},
            resource={"type": "pubsub_subscription", "labels": series.resource_labels},
            metric_kind=series.kind,
            value_type="INT64",
            points=[
                {
                    "interval": {"start_time": stamp(start), "end_time": stamp(end)},
                    "value": {"int64_value": value},
                }
                # Monitoring returns points newest first.
                for start, end, value in sorted(points, key=lambda p: p[1], reverse=True)
            ],
        )


class MonitoringService:
    """The model behind a loopback gRPC server, and clients for it."""

    def __init__(self, model: MonitoringModel) -> None:
        self.model = model
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handler = grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "ListTimeSeries": grpc.unary_unary_rpc_method_handler(
                    self._handle,
                    request_deserializer=monitoring_v3.ListTimeSeriesRequest.deserialize,
                    response_serializer=monitoring_v3.ListTimeSeriesResponse.serialize,
                )
            },
        )
        self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self._channels: list[grpc.Channel] = []

    def _handle(self, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return self.model.list_time_series(request)
        except ModelError as exc:
            context.abort(exc.code, str(exc))

    def client(self) -> monitoring_v3.MetricServiceClient:
        """The real client, over a gRPC channel to this server."""
        channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        self._channels.append(channel)
        return monitoring_v3.MetricServiceClient(
            transport=MetricServiceGrpcTransport(channel=channel)
        )

    def gauge(self, metric_type: str, subscription: str, value: int, *, at: float) -> None:
        self.model.gauge(metric_type, subscription, value, at=at)

    def delta(
        self, metric_type: str, subscription: str, value: int, *, start: float, end: float
    ) -> None:
        self.model.delta(metric_type, subscription, value, start=start, end=end)


@contextmanager
def monitoring_service(project: str) -> Iterator[MonitoringService]:
    """A running Monitoring stand-in for `project`, stopped afterwards."""
    service = MonitoringService(MonitoringModel(project))
    service.server.start()
    try:
        yield service
    finally:
        for channel in service._channels:
            channel.close()
        service.server.stop(None)
