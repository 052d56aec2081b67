"""A queue's real backlog on Pub/Sub, read from Cloud Monitoring: undelivered tasks, the oldest
unacknowledged task's age and the dead letters, per subscription of the queue.

Pub/Sub's own API counts nothing, so this is the only source of these figures; Monitoring samples
them about once a minute and publishes them a minute or two late, so every figure comes with the
time it was sampled, and a figure Monitoring cannot give is None with the reason, never 0.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pullqueue.adapters.pubsub.layout import QueueLayout

UNDELIVERED = "pubsub.googleapis.com/subscription/num_undelivered_messages"
OLDEST_UNACKED_AGE = "pubsub.googleapis.com/subscription/oldest_unacked_message_age"
DEAD_LETTERED = "pubsub.googleapis.com/subscription/dead_letter_message_count"
RESOURCE_TYPE = "pubsub_subscription"

WINDOW_SECONDS = 600
"""How far back a read looks for samples (Pub/Sub's are a minute apart and a few minutes late)."""
IDS_PER_FILTER = 100
"""Subscription ids named in one filter's one_of(...), keeping a filter well under its limit."""
PAGE_SIZE = 1000
INSTALL_HINT = "install the monitoring extra: pip install 'pullqueue[monitoring]'"


class MonitoringUnavailable(Exception):
    """Cloud Monitoring cannot be read here; the message says why and what to do."""


@dataclass(frozen=True)
class Subscription:
    """One subscription of a queue, and the part it plays in the queue's layout."""

    subscription_id: str
    role: str
    """'workers' (undeclared tags), 'tag' (one declared tag), 'shard' or 'dead-letter'."""
    label: str = ""
    """The declared tag or shard the subscription serves ('' for the others)."""


@dataclass(frozen=True)
class SubscriptionBacklog:
    """Monitoring's latest figures for one subscription; None where it has no sample."""

    subscription: Subscription
    undelivered: int | None
    oldest_unacked_age: float | None
    """Seconds, as of sampled_at."""
    dead_lettered: int | None
    """Tasks Pub/Sub moved from this subscription to the dead-letter topic in the window."""
    sampled_at: float | None
    """POSIX seconds of the newest sample read for this subscription."""


@dataclass(frozen=True)
class Backlog:
    """A queue's backlog as Monitoring saw it, or why it could not be read."""

    project: str
    queue: str
    read_at: float
    window: float
    subscriptions: list[SubscriptionBacklog] = field(default_factory=list)
    unavailable: str | None = None
    """Why Monitoring could not be read (then every figure is None)."""

    def _live(self) -> list[SubscriptionBacklog]:
        return [s for s in self.subscriptions if s.subscription.role != "dead-letter"]

    def _dead(self) -> list[SubscriptionBacklog]:
        return [s for s in self.subscriptions if s.subscription.role == "dead-letter"]

    @property
    def undelivered(self) -> int | None:
        """Tasks waiting on the queue's working subscriptions; None unless all were sampled."""
        return _total(s.undelivered for s in self._live())

    @property
    def oldest_unacked_age(self) -> float | None:
        """The oldest waiting task's age over the working subscriptions (None if none sampled)."""
        ages = [s.oldest_unacked_age for s in self._live() if s.oldest_unacked_age is not None]
        return max(ages) if ages else None

    @property
    def dead_letters(self) -> int | None:
        """Tasks waiting on the dead-letter subscription."""
        return _total(s.undelivered for s in self._dead())

    @property
    def dead_lettered(self) -> int | None:
        """Tasks moved to the dead-letter topic during the window, over every subscription."""
        return _total(s.dead_lettered for s in self._live())

    @property
    def sampled_at(self) -> float | None:
        """The oldest of the subscriptions' newest samples: every figure is at least this fresh."""
        times = [s.sampled_at for s in self.subscriptions if s.sampled_at is not None]
        return min(times) if times else None

    @property
    def data_age(self) -> float | None:
        """Seconds between the stalest sample shown and the read."""
        sampled = self.sampled_at
        return None if sampled is None else max(self.read_at - sampled, 0.0)

    def as_dict(self) -> dict[str, Any]:
        """The JSON form `pullqueue stats --json` prints under "monitoring" (docs/operations.md)."""
        return {
            "available": self.unavailable is None,
            "reason": self.unavailable,
            "read_at": iso(self.read_at),
            "window_seconds": self.window,
            "sampled_at": iso(self.sampled_at),
            "data_age_seconds": _round(self.data_age),
            "undelivered": self.undelivered,
            "oldest_unacked_age_seconds": _round(self.oldest_unacked_age),
            "dead_letters": self.dead_letters,
            "dead_lettered_in_window": self.dead_lettered,
            "subscriptions": [
                {
                    "subscription": s.subscription.subscription_id,
                    "role": s.subscription.role,
                    "label": s.subscription.label or None,
                    "undelivered": s.undelivered,
                    "oldest_unacked_age_seconds": _round(s.oldest_unacked_age),
                    "dead_lettered_in_window": s.dead_lettered,
                    "sampled_at": iso(s.sampled_at),
                }
                for s in self.subscriptions
            ],
        }


def layout_subscriptions(layout: QueueLayout) -> list[Subscription]:
    """Every subscription of a queue's layout (its shard count's), in the order `stats` shows
    them."""
    return [
        Subscription(layout.worker_subscription_id, "workers"),
        *(
            Subscription(layout.tag_subscription_id(tag), "tag", tag)
            for tag in sorted(layout.declared_tags)
        ),
        *(
            Subscription(layout.shard_subscription_id(k), "shard", str(k))
            for k in range(layout.shards)
        ),
        Subscription(layout.dead_letter_subscription_id, "dead-letter"),
    ]


def _total(values: Iterable[int | None]) -> int | None:
    items = list(values)
    if not items or any(v is None for v in items):
        return None
    return sum(v for v in items if v is not None)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def iso(posix: float | None) -> str | None:
    """POSIX seconds as RFC 3339 UTC to the second (what `stats --json` and the console show);
    None stays None."""
    if posix is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(posix))


def quote(value: str) -> str:
    """A Monitoring filter string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def series_filter(metric_type: str, subscription_ids: Sequence[str]) -> str:
    """The timeSeries.list filter for one metric over the given subscriptions."""
    ids = ", ".join(quote(s) for s in subscription_ids)
    return (
        f"metric.type = {quote(metric_type)} AND resource.type = {quote(RESOURCE_TYPE)}"
        f" AND resource.labels.subscription_id = one_of({ids})"
    )


class BacklogReader:
    """Reads a queue's backlog from Cloud Monitoring's timeSeries.list.

    `client` is a google.cloud.monitoring_v3 MetricServiceClient (built from the default
    credentials when not given); `retry_deadline` bounds the retries of an unavailable service.
    """

    def __init__(
        self,
        project: str,
        client: Any = None,
        *,
        window: float = WINDOW_SECONDS,
        retry_deadline: float = 10.0,
        page_size: int = PAGE_SIZE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.project = project
        self.window = window
        self.retry_deadline = retry_deadline
        self.page_size = page_size
        self._client = client
        self._clock = clock

    def _metric_client(self) -> Any:
        if self._client is not None:
            return self._client
        if os.environ.get("PUBSUB_EMULATOR_HOST"):
            raise MonitoringUnavailable(
                "the Pub/Sub emulator has no Cloud Monitoring, so the backlog is not known"
            )
        try:
            from google.cloud import monitoring_v3
        except ImportError as exc:
            raise MonitoringUnavailable(
                f"google-cloud-monitoring is missing; {INSTALL_HINT}"
            ) from exc
        from google.auth.exceptions import DefaultCredentialsError

        try:
            self._client = monitoring_v3.MetricServiceClient()
        except DefaultCredentialsError as exc:
            raise MonitoringUnavailable(
                "no Google credentials to read Cloud Monitoring: run `gcloud auth"
                " application-default login` or set GOOGLE_APPLICATION_CREDENTIALS"
            ) from exc
        return self._client

    def read(self, queue: str, subscriptions: Sequence[Subscription]) -> Backlog:
        """The backlog of the queue's subscriptions; `unavailable` says why when unreadable."""
        now = self._clock()
        try:
            client = self._metric_client()
            undelivered = self._latest(client, UNDELIVERED, subscriptions, now)
            ages = self._latest(client, OLDEST_UNACKED_AGE, subscriptions, now)
            dead = self._sums(client, DEAD_LETTERED, subscriptions, now)
        except MonitoringUnavailable as exc:
            # What is still known: which subscriptions make up the queue; every figure unknown.
            unknown = [SubscriptionBacklog(sub, None, None, None, None) for sub in subscriptions]
            return Backlog(self.project, queue, now, self.window, unknown, unavailable=str(exc))
        rows = []
        for sub in subscriptions:
            sid = sub.subscription_id
            count = undelivered.get(sid)
            age = ages.get(sid)
            times = [s[0] for s in (count, age) if s is not None]
            dead_count = dead.get(sid)
            if dead_count is None and count is not None and sub.role != "dead-letter":
                # A DELTA metric has no point for a window in which nothing was dead-lettered.
                dead_count = 0
            rows.append(
                SubscriptionBacklog(
                    subscription=sub,
                    undelivered=None if count is None else int(count[1]),
                    oldest_unacked_age=None if age is None else float(age[1]),
                    dead_lettered=None if sub.role == "dead-letter" else dead_count,
                    sampled_at=max(times) if times else None,
                )
            )
        return Backlog(self.project, queue, now, self.window, rows)

    def _series(
        self,
        client: Any,
        metric_type: str,
        subscriptions: Sequence[Subscription],
        now: float,
        aggregation: dict[str, Any] | None,
    ) -> Iterable[Any]:
        from google.api_core import exceptions as gexc
        from google.api_core import retry as gretry

        retry = gretry.Retry(
            initial=0.2,
            maximum=2.0,
            multiplier=2.0,
            timeout=self.retry_deadline,
            predicate=gretry.if_exception_type(gexc.ServiceUnavailable, gexc.DeadlineExceeded),
        )
        ids = [s.subscription_id for s in subscriptions]
        for start in range(0, len(ids), IDS_PER_FILTER):
            request: dict[str, Any] = {
                "name": f"projects/{self.project}",
                "filter": series_filter(metric_type, ids[start : start + IDS_PER_FILTER]),
                "interval": {
                    "start_time": {"seconds": int(now - self.window)},
                    "end_time": {"seconds": int(now)},
                },
                "view": "FULL",
                "page_size": self.page_size,
            }
            if aggregation is not None:
                request["aggregation"] = aggregation
            try:
                yield from client.list_time_series(
                    request=request, retry=retry, timeout=self.retry_deadline
                )
            except gexc.PermissionDenied as exc:
                raise MonitoringUnavailable(
                    f"no permission to read Cloud Monitoring in project {self.project}: grant"
                    " roles/monitoring.viewer to the caller"
                ) from exc
            except gexc.TooManyRequests as exc:
                raise MonitoringUnavailable(
                    "Cloud Monitoring's read quota is used up for now; try again in a minute"
                ) from exc
            except (gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.RetryError) as exc:
                raise MonitoringUnavailable(
                    f"Cloud Monitoring did not answer within {self.retry_deadline:g} s; try"
                    " again later"
                ) from exc
            except gexc.GoogleAPICallError as exc:
                raise MonitoringUnavailable(f"Cloud Monitoring refused the read: {exc}") from exc

    def _latest(
        self, client: Any, metric_type: str, subscriptions: Sequence[Subscription], now: float
    ) -> dict[str, tuple[float, float]]:
        """subscription id -> (sampled at, value) of the newest point of a gauge."""
        found: dict[str, tuple[float, float]] = {}
        for series in self._series(client, metric_type, subscriptions, now, None):
            sid = series.resource.labels["subscription_id"]
            for point in series.points:
                at = point.interval.end_time.timestamp()
                if sid not in found or at > found[sid][0]:
                    found[sid] = (at, float(point.value.int64_value))
        return found

    def _sums(
        self, client: Any, metric_type: str, subscriptions: Sequence[Subscription], now: float
    ) -> dict[str, int]:
        """subscription id -> the sum of a DELTA metric over the window (one aligned point)."""
        aggregation = {
            "alignment_period": {"seconds": int(self.window)},
            "per_series_aligner": "ALIGN_SUM",
        }
        found: dict[str, int] = {}
        for series in self._series(client, metric_type, subscriptions, now, aggregation):
            sid = series.resource.labels["subscription_id"]
            found[sid] = found.get(sid, 0) + sum(int(p.value.int64_value) for p in series.points)
        return found
