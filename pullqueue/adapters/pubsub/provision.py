"""Finds, checks and (with auto_create) creates the topics and subscriptions of one queue.

The ids and filters come from the layout module, the same definition the Terraform module uses; a
subscription that exists with another filter or without exactly-once delivery is refused, since
the adapter's guarantees rest on both.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from google.api_core import exceptions as gexc

from pullqueue.adapters.pubsub.claims import CLAIM_DEADLINE, token_messages
from pullqueue.adapters.pubsub.errors import PROVISION_HINT
from pullqueue.adapters.pubsub.layout import (
    LABEL_MAX_BACKOFF,
    LABEL_MAX_DOUBLINGS,
    LABEL_MIN_BACKOFF,
    LABEL_SHARDS,
    SHARDS,
    QueueLayout,
    shard_of,
    shards_label,
    tag_filter,
)
from pullqueue.adapters.pubsub.rpc import PubSubRpc
from pullqueue.adapters.pubsub.wire import SubscriptionRule
from pullqueue.config import Settings
from pullqueue.errors import (
    ConfigurationError,
    Error,
    InvalidTaskRetryOptionsError,
    NotProvisionedError,
    PermissionDeniedError,
)
from pullqueue.links import TERRAFORM_MODULE, source_url
from pullqueue.retry import RetryParameters

log = logging.getLogger(__name__)

DEAD_LETTER_ACK_DEADLINE = 30
"""Seconds a dead letter pulled by `pullqueue dead-letters` stays hidden: short, so one a killed
command held comes back soon (terraform/modules/pullqueue/main.tf sets the same)."""


@dataclass(frozen=True)
class QueueTopology:
    """Where one queue's tasks are published and leased from, and the subscriptions' limits."""

    layout: QueueLayout
    topic: str
    workers: str
    """Path of the worker subscription (every task but those of declared tags)."""
    tags: Mapping[str, str]
    """Declared tag -> path of its filtered subscription."""
    shards: list[str]
    """Path of each shard's subscription, by shard number (tasks of undeclared tags)."""
    shard_topics: list[str]
    """Path of each shard's topic, by shard number."""
    claims: str
    """Path of the claims subscription (one token per shard)."""
    claims_topic: str
    topics: Mapping[str, str]
    """Subscription path -> path of the topic it is attached to."""
    rules: Mapping[str, SubscriptionRule]
    """Subscription path -> which messages it serves (its filter, evaluated here too)."""
    ack_deadline: int
    """The shortest ack deadline (s) of the subscriptions: a pulled message is ours that long."""
    ack_deadlines: Mapping[str, int]
    """Subscription path -> its ack deadline, as read from Pub/Sub (empty when not verified)."""
    max_attempts: int
    """Deliveries before Pub/Sub dead-letters a message (its dead-letter policy)."""
    retention: float
    """Seconds an unacknowledged message is kept after it was published."""
    verified: bool
    """False when the subscriptions could not be read (no pubsub.subscriptions.get)."""
    retry: RetryParameters | None = None
    """The queue's retry parameters as its worker subscription carries them (None: unknown)."""

    @property
    def sources(self) -> list[str]:
        """Every subscription leases pull from: the worker one, the declared tags', the shards'."""
        return [self.workers, *self.tags.values(), *self.shards]

    def sources_of(self, tag: str) -> list[str]:
        """Where a tag's tasks are: its declared subscription; else its shard's subscription,
        then the worker one (tasks of foreign publishers that only know the queue topic)."""
        declared = self.tags.get(tag)
        if declared is not None:
            return [declared]
        return [self.shards[shard_of(tag, len(self.shards))], self.workers]

    def topic_for(self, tag: str | None) -> str:
        """The topic a task is published to: its tag's shard topic, or the queue topic for
        untagged tasks and declared tags."""
        if tag is None or tag in self.tags:
            return self.topic
        return self.shard_topics[shard_of(tag, len(self.shard_topics))]


def _seconds(duration: Any) -> float:
    """A retention as seconds (proto-plus gives a timedelta)."""
    return float(duration.total_seconds())


def retry_parameters(subscription: Any) -> RetryParameters | None:
    """The retry parameters a subscription carries: its pullqueue retry labels (written by
    `pullqueue plan` from queue.yaml), else its Pub/Sub retry policy; None when it has neither.

    A label that is not a whole number is ignored; an unreadable set falls back to the defaults
    rather than stopping the queue.
    """
    labels = subscription.labels
    found: dict[str, float] = {}
    for label, field_name, scale in (
        (LABEL_MIN_BACKOFF, "min_backoff_seconds", 1000),
        (LABEL_MAX_BACKOFF, "max_backoff_seconds", 1000),
        (LABEL_MAX_DOUBLINGS, "max_doublings", 1),
    ):
        text = labels.get(label, "")
        if text.isascii() and text.isdigit():
            found[field_name] = int(text) / scale if scale != 1 else int(text)
    if not found and "retry_policy" in subscription:
        policy = subscription.retry_policy
        found = {
            "min_backoff_seconds": _seconds(policy.minimum_backoff),
            "max_backoff_seconds": _seconds(policy.maximum_backoff),
        }
    if not found:
        return None
    try:
        return RetryParameters.given(
            found.get("min_backoff_seconds"),
            found.get("max_backoff_seconds"),
            None if "max_doublings" not in found else int(found["max_doublings"]),
        )
    except InvalidTaskRetryOptionsError as exc:
        log.warning("subscription %s: retry parameters ignored (%s)", subscription.name, exc)
        return None


class Provisioner:
    """Checks a queue's resources once, creating what is missing when auto_create is on."""

    def __init__(self, rpc: PubSubRpc, settings: Settings, auto_create: bool) -> None:
        self.rpc = rpc
        self.settings = settings
        self.auto_create = auto_create

    def open(self, layout: QueueLayout) -> QueueTopology:
        """The queue's topology, after checking (and with auto_create creating) its resources;
        its shard count is the one the queue topic's label says."""
        layout = self._sharded(layout)
        queue = layout.queue
        topic = self.rpc.topic_path(layout.topic_id)
        dead_letter_topic = self.rpc.topic_path(layout.dead_letter_topic_id)
        shard_topics = [self.rpc.topic_path(layout.shard_topic_id(k)) for k in range(layout.shards)]
        claims_topic = self.rpc.topic_path(layout.claims_topic_id)
        claims = self.rpc.subscription_path(layout.claims_subscription_id)
        dead_letters = self.rpc.subscription_path(layout.dead_letter_subscription_id)
        workers = self.rpc.subscription_path(layout.worker_subscription_id)
        # Subscription path -> (its topic, its filter).
        wanted = {workers: (topic, layout.worker_filter)}
        tags: dict[str, str] = {}
        rules: dict[str, SubscriptionRule] = {}
        declared = frozenset(layout.declared_tags)
        rules[workers] = SubscriptionRule(tag=None, declared=declared)
        for tag in layout.declared_tags:
            path = self.rpc.subscription_path(layout.tag_subscription_id(tag))
            wanted[path] = (topic, tag_filter(tag))
            tags[tag] = path
            rules[path] = SubscriptionRule(tag=tag, declared=declared)
        shards = [
            self.rpc.subscription_path(layout.shard_subscription_id(k))
            for k in range(layout.shards)
        ]
        for k, (path, shard_topic) in enumerate(zip(shards, shard_topics, strict=True)):
            wanted[path] = (shard_topic, "")
            rules[path] = SubscriptionRule(tag=None, shard=k, shards=layout.shards)
        deadlines: dict[str, int] = {}
        retry: RetryParameters | None = None
        attempts: list[int] = []
        retentions: list[float] = []
        verified = True
        # One round of calls side by side (a new process's first lease waits for it): every
        # subscription read, with auto_create every topic made sure of; then what is missing.
        reads = [*wanted, claims, dead_letters]
        calls: list[Callable[[], Any]] = [
            functools.partial(self._subscription, path, queue) for path in reads
        ]
        if self.auto_create:
            calls += [
                functools.partial(self._ensure_topic, path, queue)
                for path in [dead_letter_topic, claims_topic, *shard_topics]
            ]
        answers = self.rpc.run_each(calls)
        failure = next((a for a in answers if isinstance(a, Error)), None)
        if failure is not None:
            raise failure
        subscriptions: dict[str, Any] = dict(zip(reads, answers, strict=False))
        if self.auto_create and subscriptions[dead_letters] is None:
            self._ensure_subscription(
                dead_letters,
                {"topic": dead_letter_topic, "ack_deadline_seconds": DEAD_LETTER_ACK_DEADLINE},
                queue,
            )
        for path, (source_topic, expected_filter) in wanted.items():
            found = subscriptions[path]
            if found is None and self.auto_create:
                found = self._ensure_subscription(
                    path,
                    {
                        "topic": source_topic,
                        "filter": expected_filter,
                        "ack_deadline_seconds": self.settings.pubsub_ack_deadline,
                        "enable_exactly_once_delivery": True,
                        "message_retention_duration": {
                            "seconds": self.settings.pubsub_retention_seconds
                        },
                        "dead_letter_policy": {
                            "dead_letter_topic": dead_letter_topic,
                            "max_delivery_attempts": self.settings.pubsub_max_delivery_attempts,
                        },
                    },
                    queue,
                )
            if found is None:
                raise NotProvisionedError(
                    f"Pub/Sub subscription {path} does not exist: {PROVISION_HINT}", queue=queue
                )
            if found is False:
                verified = False
                continue
            self._check(found, path, source_topic, expected_filter, queue)
            deadlines[path] = int(found.ack_deadline_seconds)
            if path == workers:
                retry = retry_parameters(found)
            attempts.append(int(found.dead_letter_policy.max_delivery_attempts))
            retentions.append(_seconds(found.message_retention_duration))
        self._open_claims(claims, claims_topic, queue, layout.shards, subscriptions[claims])
        return QueueTopology(
            layout=layout,
            topic=topic,
            workers=workers,
            tags=tags,
            shards=shards,
            shard_topics=shard_topics,
            claims=claims,
            claims_topic=claims_topic,
            topics={path: source_topic for path, (source_topic, _) in wanted.items()},
            rules=rules,
            ack_deadline=min(deadlines.values(), default=self.settings.pubsub_ack_deadline),
            ack_deadlines=deadlines if verified else {},
            max_attempts=min(attempts, default=self.settings.pubsub_max_delivery_attempts),
            retention=min(retentions, default=float(self.settings.pubsub_retention_seconds)),
            verified=verified,
            retry=retry,
        )

    def _sharded(self, layout: QueueLayout) -> QueueLayout:
        """The layout with the queue's shard count: its topic's LABEL_SHARDS (SHARDS without
        one), which PULLQUEUE_PUBSUB_SHARDS, when set, must equal; auto_create creates the
        topic with that setting's count."""
        queue = layout.queue
        topic = self.rpc.topic_path(layout.topic_id)
        wanted = self.settings.pubsub_shards
        found = self._topic(topic, queue)
        if found is None and self.auto_create:
            self._create_topic(topic, {LABEL_SHARDS: str(wanted or SHARDS)}, queue)
            found = self._topic(topic, queue)
        if found is None:
            raise NotProvisionedError(
                f"Pub/Sub topic {topic} does not exist: {PROVISION_HINT}", queue=queue
            )
        if found is False:
            count = wanted or SHARDS
            log.warning(
                "cannot read Pub/Sub topic %s (no pubsub.topics.get): assuming %d shards"
                " (PULLQUEUE_PUBSUB_SHARDS); grant roles/pubsub.viewer on the topic to read its"
                " %s label",
                topic,
                count,
                LABEL_SHARDS,
            )
        else:
            text = found.labels.get(LABEL_SHARDS)
            count = shards_label(text, queue)
            if wanted is not None and wanted != count:
                said = f"label {LABEL_SHARDS}={text}" if text is not None else "no shard label"
                raise ConfigurationError(
                    f"PULLQUEUE_PUBSUB_SHARDS={wanted} but the queue was provisioned with"
                    f" {count} shards (topic {topic}, {said}); a task's shard is crc32(tag) mod"
                    " the count, so publishers and workers must agree: unset"
                    f" PULLQUEUE_PUBSUB_SHARDS or set it to {count}. Changing a queue's shard"
                    f" count is a migration ({source_url('docs/pubsub.md')}, 'Shard count')",
                    queue=queue,
                )
        return dataclasses.replace(layout, shards=count)

    def _topic(self, path: str, queue: str) -> Any:
        """The topic, None when missing, False when we may not read it."""

        def get(timeout: float) -> Any:
            try:
                return self.rpc.publisher.get_topic(
                    request={"topic": path}, retry=None, timeout=timeout
                )
            except gexc.NotFound:
                return None

        try:
            return self.rpc.call(get, queue=queue, resource=path)
        except PermissionDeniedError:
            return False

    def _create_topic(self, path: str, labels: dict[str, str], queue: str) -> None:
        def create(timeout: float) -> None:
            with contextlib.suppress(gexc.AlreadyExists):
                self.rpc.publisher.create_topic(
                    request={"name": path, "labels": labels}, retry=None, timeout=timeout
                )

        self.rpc.call(create, queue=queue, resource=path)

    def _open_claims(
        self, claims: str, claims_topic: str, queue: str, shards: int, found: Any
    ) -> None:
        """Check the claims subscription (`found`, as _subscription read it); auto_create
        creates it with one token per shard."""
        if found is None and self.auto_create:
            created = self._create_subscription(
                claims,
                {
                    "topic": claims_topic,
                    "ack_deadline_seconds": CLAIM_DEADLINE,
                    "enable_exactly_once_delivery": True,
                    "message_retention_duration": {
                        "seconds": self.settings.pubsub_retention_seconds
                    },
                },
                queue,
            )
            if created:
                self.rpc.publish(
                    claims_topic,
                    token_messages(range(shards)),
                    queue=queue,
                )
            return
        if found is None:
            raise NotProvisionedError(
                f"Pub/Sub subscription {claims} does not exist: {PROVISION_HINT}", queue=queue
            )
        if found is not False and not found.enable_exactly_once_delivery:
            raise ConfigurationError(
                f"Pub/Sub subscription {claims} needs exactly-once delivery (a shard claim could"
                f" go to two holders); recreate it with the Terraform module {TERRAFORM_MODULE}",
                queue=queue,
            )

    def _check(self, found: Any, path: str, topic: str, expected_filter: str, queue: str) -> None:
        problems = []
        if found.topic != topic:
            problems.append(f"it is attached to {found.topic!r}, not {topic!r}")
        if found.filter != expected_filter:
            problems.append(
                f"its filter is {found.filter!r} where the declared tags"
                f" ({self._declared(queue)}) need {expected_filter!r}"
            )
        if not found.enable_exactly_once_delivery:
            problems.append("exactly-once delivery is off (a lease could go to two holders)")
        if not found.dead_letter_policy.dead_letter_topic:
            problems.append("it has no dead-letter policy (retry counts need delivery attempts)")
        if problems:
            raise ConfigurationError(
                f"Pub/Sub subscription {path} does not match the queue's layout: "
                + "; ".join(problems)
                + f". Recreate it with the Terraform module {TERRAFORM_MODULE} (a"
                " subscription's filter cannot change), or set PULLQUEUE_PUBSUB_DECLARED_TAGS"
                " to the tags it was created with",
                queue=queue,
            )

    def _declared(self, queue: str) -> str:
        tags = self.settings.pubsub_declared_tags.get(queue, [])
        return "declared: " + ", ".join(tags) if tags else "none declared"

    def _subscription(self, path: str, queue: str) -> Any:
        """The subscription, None when missing, False when we may not read it."""

        def get(timeout: float) -> Any:
            try:
                return self.rpc.subscriber.get_subscription(
                    request={"subscription": path}, retry=None, timeout=timeout
                )
            except gexc.NotFound:
                return None

        try:
            return self.rpc.call(get, queue=queue, resource=path)
        except PermissionDeniedError:
            log.warning(
                "cannot read Pub/Sub subscription %s (no pubsub.subscriptions.get): its filter"
                " and exactly-once delivery are not checked; grant roles/pubsub.viewer to check",
                path,
            )
            return False

    def _ensure_topic(self, topic: str, queue: str) -> None:
        def create(timeout: float) -> None:
            try:
                self.rpc.publisher.get_topic(request={"topic": topic}, retry=None, timeout=timeout)
            except gexc.NotFound:
                with contextlib.suppress(gexc.AlreadyExists):
                    self.rpc.publisher.create_topic(
                        request={"name": topic}, retry=None, timeout=timeout
                    )

        self.rpc.call(create, queue=queue, resource=topic)

    def _create_subscription(self, path: str, spec: dict[str, Any], queue: str) -> bool:
        """Create the subscription; False when someone else created it first."""

        def create(timeout: float) -> bool:
            try:
                self.rpc.subscriber.create_subscription(
                    request={"name": path, **spec}, retry=None, timeout=timeout
                )
            except gexc.AlreadyExists:
                return False
            return True

        return self.rpc.call(create, queue=queue, resource=path)

    def _ensure_subscription(self, path: str, spec: dict[str, Any], queue: str) -> Any:
        def create(timeout: float) -> Any:
            try:
                return self.rpc.subscriber.create_subscription(
                    request={"name": path, **spec}, retry=None, timeout=timeout
                )
            except gexc.AlreadyExists:
                return self.rpc.subscriber.get_subscription(
                    request={"subscription": path}, retry=None, timeout=timeout
                )

        return self.rpc.call(create, queue=queue, resource=path)
