"""The backlog read from Cloud Monitoring, through the real client against a model of
timeSeries.list: figures, freshness, paging, chunked filters and every way a read can fail."""

from __future__ import annotations

import time

import grpc
import pytest

from pullqueue.monitoring import (
    DEAD_LETTERED,
    OLDEST_UNACKED_AGE,
    UNDELIVERED,
    BacklogReader,
    Subscription,
)
from tests.support.monitoring_fake import ModelError, monitoring_service, parse_filter

PROJECT = "proj"
NOW = 1_800_000_000.0
SUBS = [
    Subscription("q-workers", "workers"),
    Subscription("q-tag-hot", "tag", "hot"),
    Subscription("q-dead-letter", "dead-letter"),
]


def reader(service, **options) -> BacklogReader:
    return BacklogReader(PROJECT, service.client(), clock=lambda: NOW, retry_deadline=3, **options)


def seed(service) -> None:
    for sid, counts in {
        "q-workers": [50, 42],
        "q-tag-hot": [7, 9],
        "q-dead-letter": [3, 4],
    }.items():
        for ago, count in zip((180, 120), counts, strict=True):
            service.gauge(UNDELIVERED, sid, count, at=NOW - ago)
            service.gauge(OLDEST_UNACKED_AGE, sid, 600 + count, at=NOW - ago)
    # Dead-lettered: 2 + 3 in the window, 100 an hour ago (outside it).
    service.delta(DEAD_LETTERED, "q-workers", 2, start=NOW - 300, end=NOW - 240)
    service.delta(DEAD_LETTERED, "q-workers", 3, start=NOW - 240, end=NOW - 180)
    service.delta(DEAD_LETTERED, "q-workers", 100, start=NOW - 3660, end=NOW - 3600)


def test_backlog_per_subscription_with_totals_and_data_age() -> None:
    with monitoring_service(PROJECT) as service:
        seed(service)
        service.gauge(UNDELIVERED, "other-queue-workers", 1000, at=NOW - 60)
        backlog = reader(service).read("q", SUBS)
    assert backlog.unavailable is None
    by_id = {row.subscription.subscription_id: row for row in backlog.subscriptions}
    assert by_id["q-workers"].undelivered == 42  # the newest sample, not the first
    assert by_id["q-tag-hot"].undelivered == 9
    assert by_id["q-workers"].oldest_unacked_age == 642
    assert by_id["q-workers"].dead_lettered == 5
    assert by_id["q-tag-hot"].dead_lettered == 0
    assert backlog.undelivered == 51  # the working subscriptions, not the dead letters
    assert backlog.dead_letters == 4
    assert backlog.dead_lettered == 5
    assert backlog.oldest_unacked_age == 642
    assert backlog.data_age == 120
    out = backlog.as_dict()
    assert out["undelivered"] == 51
    assert out["data_age_seconds"] == 120.0
    assert out["sampled_at"] == "2027-01-15T07:58:00Z"
    assert [s["role"] for s in out["subscriptions"]] == ["workers", "tag", "dead-letter"]


def test_a_subscription_without_samples_is_unknown_and_so_is_the_total() -> None:
    with monitoring_service(PROJECT) as service:
        seed(service)
        service.gauge(UNDELIVERED, "q-tag-cold", 77, at=NOW - 3600)  # older than the window
        subs = [*SUBS, Subscription("q-tag-cold", "tag", "cold")]
        backlog = reader(service).read("q", subs)
    cold = backlog.subscriptions[-1]
    assert cold.undelivered is None and cold.sampled_at is None and cold.dead_lettered is None
    assert backlog.undelivered is None
    assert backlog.as_dict()["undelivered"] is None


def test_pages_are_followed_and_long_subscription_lists_are_split() -> None:
    subs = [Subscription(f"q-tag-t{i:03}", "tag", f"t{i:03}") for i in range(230)]
    with monitoring_service(PROJECT) as service:
        for sub in subs:
            service.gauge(UNDELIVERED, sub.subscription_id, 1, at=NOW - 90)
            service.gauge(OLDEST_UNACKED_AGE, sub.subscription_id, 5, at=NOW - 90)
        backlog = reader(service, page_size=40).read("q", subs)
        requests = service.model.requests
    assert backlog.undelivered == 230
    undelivered = [r for r in requests if UNDELIVERED in r.filter]
    assert sum(1 for r in undelivered if not r.page_token) == 3  # 100 + 100 + 30 ids
    assert sum(1 for r in undelivered if r.page_token) == 2 + 2  # 100 ids: 3 pages of 40
    assert max(r.filter.count('"q-tag-') for r in requests) == 100


def test_the_dead_letter_sum_is_aligned_over_the_window() -> None:
    with monitoring_service(PROJECT) as service:
        seed(service)
        reader(service).read("q", SUBS)
        [request] = [r for r in service.model.requests if DEAD_LETTERED in r.filter]
    assert request.aggregation.alignment_period.total_seconds() == 600
    assert request.aggregation.per_series_aligner.name == "ALIGN_SUM"


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (grpc.StatusCode.PERMISSION_DENIED, "roles/monitoring.viewer"),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, "quota"),
        (grpc.StatusCode.UNAVAILABLE, "did not answer within 3 s"),
    ],
)
def test_a_failed_read_says_why_and_shows_no_figure(code: grpc.StatusCode, words: str) -> None:
    with monitoring_service(PROJECT) as service:
        seed(service)
        service.model.fail(code, times=1000)
        started = time.monotonic()
        backlog = reader(service).read("q", SUBS)
    assert time.monotonic() - started < 10
    assert backlog.unavailable is not None and words in backlog.unavailable
    assert backlog.undelivered is None and backlog.dead_letters is None
    assert backlog.as_dict()["available"] is False


def test_a_brief_outage_is_retried() -> None:
    with monitoring_service(PROJECT) as service:
        seed(service)
        service.model.fail(grpc.StatusCode.UNAVAILABLE, times=2)
        backlog = reader(service).read("q", SUBS)
    assert backlog.unavailable is None and backlog.undelivered == 51


def test_the_emulator_has_no_monitoring(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", "127.0.0.1:1")
    backlog = BacklogReader(PROJECT).read("q", SUBS)
    assert backlog.unavailable is not None and "emulator" in backlog.unavailable
    assert backlog.undelivered is None


@pytest.mark.parametrize(
    "bad",
    [
        'resource.type = "pubsub_subscription"',  # no metric type
        'metric.type = "a" AND metric.type = "b"',
        'metric.type = "a" AND resource.labels.subscription_id = one_of("x",',
        'metric.type = "a" resource.type = "b"',
    ],
)
def test_the_model_refuses_filters_the_api_refuses(bad: str) -> None:
    with pytest.raises(ModelError) as caught:
        parse_filter(bad)
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_the_model_refuses_a_reversed_interval_and_a_foreign_page_token() -> None:
    from google.api_core import exceptions as gexc

    with monitoring_service(PROJECT) as service:
        client = service.client()
        base = {"name": f"projects/{PROJECT}", "filter": f'metric.type = "{UNDELIVERED}"'}
        with pytest.raises(gexc.InvalidArgument):
            list(
                client.list_time_series(
                    request={
                        **base,
                        "interval": {"start_time": {"seconds": 20}, "end_time": {"seconds": 10}},
                    }
                )
            )
        with pytest.raises(gexc.InvalidArgument):
            list(
                client.list_time_series(
                    request={**base, "interval": {"end_time": {"seconds": 10}}, "page_token": "x:1"}
                )
            )
