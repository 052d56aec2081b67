"""The Pub/Sub wire format of a task, and the rule deciding which subscription serves a message.

Workers in other languages share a topic with pullqueue, so the format is small and stable
(data = payload; attributes task_name, tag, eta, retry_limit) and documented in docs/pubsub.md.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from google.pubsub_v1.types import pubsub as pubsub_types

from pullqueue import limits
from pullqueue.adapters.pubsub.layout import ATTR_ETA, ATTR_TAG, ATTR_TASK_NAME, SHARDS, shard_of
from pullqueue.task import Task

ATTR_RETRY_LIMIT = "retry_limit"
"""Optional attribute: the legacy task_retry_limit (absent when the task has none)."""

ATTR_SET_ASIDE = "pullqueue_set_aside"
"""Added to a message set aside on the dead-letter topic: why no worker could serve it."""

ATTR_LAST_ERROR = "last_error"
"""Added to a task a worker moved to the dead-letter topic itself, after its handler failed on
the last delivery attempt: the handler's error, `Type: message`, at most 1024 bytes."""

# What Pub/Sub adds to a message it dead-letters (and a worker that dead-letters one itself).
SOURCE_DELIVERIES = "CloudPubSubDeadLetterSourceDeliveryCount"
SOURCE_SUBSCRIPTION = "CloudPubSubDeadLetterSourceSubscription"
SOURCE_PUBLISH_TIME = "CloudPubSubDeadLetterSourceTopicPublishTime"

MAX_RETRY_LIMIT = 2**31 - 1
"""The largest retry_limit read (the legacy field is a 32-bit integer); above it, no limit."""

_TASK_NAME = re.compile(rf"[a-zA-Z0-9_-]{{1,{limits.MAX_TASK_NAME_LENGTH}}}")
_RETRY_LIMIT = re.compile(r"[0-9]{1,10}")

PubsubMessagePb = pubsub_types.PubsubMessage.pb()
"""The raw protobuf class of a Pub/Sub message (no proto-plus wrapping on the hot path)."""

_RFC3339_RE = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))$"
)


def format_eta(posix: float) -> str:
    """POSIX seconds as RFC 3339 UTC with microseconds, e.g. 2024-05-01T12:00:00.250000Z."""
    moment = dt.datetime.fromtimestamp(posix, tz=dt.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_eta(text: str) -> float | None:
    """RFC 3339 (any offset, up to nanoseconds) as POSIX seconds; None when not RFC 3339."""
    match = _RFC3339_RE.match(text.strip())
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction = match.group(7) or "0"
    try:
        moment = dt.datetime(year, month, day, hour, minute, second, tzinfo=dt.timezone.utc)
    except ValueError:
        return None
    posix: float = moment.timestamp() + int(fraction) / 10 ** len(fraction)
    if match.group(9):
        sign = 1 if match.group(9) == "+" else -1
        posix -= sign * (int(match.group(10)) * 3600 + int(match.group(11)) * 60)
    return posix


def new_task_name() -> str:
    """A name for a task added without one: unique without asking anyone."""
    return uuid.uuid4().hex


def encode(task: Task, name: str, eta: float, now: float) -> object:
    """The message for a task: payload as data, name and (when set) tag, ETA and retry limit.

    The ETA is left out only when it is the moment of adding (no eta, no countdown); an ETA in
    the past is kept, since it orders the task before tasks added earlier.
    """
    attributes = {ATTR_TASK_NAME: name}
    if task.tag is not None:
        attributes[ATTR_TAG] = task.tag
    if eta != now:
        attributes[ATTR_ETA] = format_eta(eta)
    if task.retry_limit is not None:
        attributes[ATTR_RETRY_LIMIT] = str(task.retry_limit)
    message: object = PubsubMessagePb(data=task.payload, attributes=attributes)
    return message


@dataclass(frozen=True)
class SubscriptionRule:
    """Which messages a subscription serves: the Python twin of its Pub/Sub filter.

    Real Pub/Sub applies the filter itself; emulators that ignore filters deliver every message
    to every subscription, and the copy a subscription should not have is dropped (acked).
    """

    tag: str | None
    """The declared tag of a tag subscription; None for the worker subscription."""
    declared: Collection[str] = ()
    """Every declared tag of the queue (excluded from the worker subscription)."""
    shard: int | None = None
    """The shard number of a shard subscription (None for the others)."""
    shards: int = SHARDS
    """The queue's shard count (its topic's pullqueue-shards label)."""

    def misrouted(self, attributes: Mapping[str, str]) -> bool:
        """True for a message on a shard subscription whose tag belongs to another shard: its
        publisher used another shard count (the task is served; its tag's batching suffers)."""
        tag = attributes.get(ATTR_TAG)
        if self.shard is None or tag is None:
            return False
        return shard_of(tag, self.shards) != self.shard

    def serves(self, attributes: Mapping[str, str]) -> bool:
        tag = attributes.get(ATTR_TAG)
        if self.tag is not None:
            return tag == self.tag
        return tag is None or tag not in self.declared


@dataclass(slots=True)
class Delivery:
    """One delivery of one message on one subscription: what a pull returns, decoded."""

    subscription: str
    ack_id: str
    message_id: str
    name: str
    payload: bytes
    tag: str | None
    eta: float | None
    """The ETA attribute (None when absent or not RFC 3339)."""
    published: float
    attempt: int
    """Pub/Sub's delivery_attempt (1 on first delivery; 0 without a dead-letter policy)."""
    retry_limit: int | None
    attributes: Mapping[str, str]
    pulled_at: float
    """Local time just before the pull that brought it: its ack deadline runs from after this."""
    ignored: tuple[str, ...] = ()
    """Why attributes of a foreign publisher's message were ignored (each logged once a pull)."""
    set_aside: str | None = None
    """Why no worker may be handed the message (it goes to the dead-letter topic), or None."""
    size: int = field(init=False, compare=False, repr=False)
    """Bytes this delivery takes in hand: its payload and attributes (counted once: a lease by
    oldest tag weighs every held delivery, thousands of them, in each call)."""
    order: float = field(init=False, compare=False, repr=False)
    """The sort key of 'oldest first': the ETA when set, else the publish time."""

    def __post_init__(self) -> None:
        self.size = len(self.payload) + sum(len(k) + len(v) for k, v in self.attributes.items())
        self.order = self.eta if self.eta is not None else self.published


def by_subscription(deliveries: Iterable[Delivery]) -> dict[str, list[Delivery]]:
    """Deliveries grouped by the subscription they came from (an ack id is good only there)."""
    groups: dict[str, list[Delivery]] = {}
    for delivery in deliveries:
        groups.setdefault(delivery.subscription, []).append(delivery)
    return groups


def fewest_sources(deliveries: Sequence[Delivery], limit: int) -> list[Delivery]:
    """Up to `limit` of the deliveries, from as few subscriptions as may be: the biggest groups
    whole first (ties: the group met first), then part of the next. A lease's grant and its
    delete make one call per subscription of its tasks, so 100 tasks of 2 subscriptions cost 2
    calls each where 100 spread over 16 cost 16."""
    if len(deliveries) <= limit:
        return list(deliveries)
    groups = sorted(by_subscription(deliveries).values(), key=len, reverse=True)
    chosen: list[Delivery] = []
    for group in groups:
        chosen += group[: max(limit - len(chosen), 0)]
        if len(chosen) >= limit:
            break
    return chosen


def shown(value: str, limit: int = 60) -> str:
    """A foreign attribute value for a log line: escaped (no control character) and cut short."""
    text = ascii(value[:limit])
    return text + f" ({len(value)} characters)" if len(value) > limit else text


def decode(subscription: str, received: object, pulled_at: float) -> Delivery:
    """A ReceivedMessage protobuf as a Delivery; messages from other publishers are accepted.

    Attributes are checked as the legacy API checked them, so a foreign publisher cannot hand a
    worker what `Queue.add` would refuse (docs/pubsub.md, wire format): a missing or invalid
    task_name becomes pubsub-MESSAGE_ID, an eta that is not RFC 3339 and a retry_limit that is
    not a whole number are ignored (the task is available at once, without a limit), and a tag
    over the legacy 500 bytes sets the message aside, since serving it untagged would mix it
    into another tag's batches.
    """
    message = received.message  # type: ignore[attr-defined]
    # Copied out: the protobuf's map (like any part of it) keeps the whole pull answer alive,
    # megabytes of other tasks' payloads, for as long as this one task is held or leased.
    attributes = dict(message.attributes)
    message_id = message.message_id
    ignored: list[str] = []
    name = attributes.get(ATTR_TASK_NAME)
    if name is None or not _TASK_NAME.fullmatch(name):
        fallback = f"pubsub-{message_id}"
        if name is not None:
            ignored.append(
                f"task_name {shown(name)} is not a task name ([a-zA-Z0-9_-], 1 to"
                f" {limits.MAX_TASK_NAME_LENGTH} characters): the task is named {fallback}"
            )
        name = fallback
    eta_text = attributes.get(ATTR_ETA)
    eta = parse_eta(eta_text) if eta_text else None
    if eta_text and eta is None:
        ignored.append(f"eta {shown(eta_text)} is not RFC 3339: the task is available now")
    limit_text = attributes.get(ATTR_RETRY_LIMIT)
    retry_limit = None
    if limit_text is not None:
        if _RETRY_LIMIT.fullmatch(limit_text) and int(limit_text) <= MAX_RETRY_LIMIT:
            retry_limit = int(limit_text)
        else:
            ignored.append(
                f"retry_limit {shown(limit_text)} is not a whole number from 0 to"
                f" {MAX_RETRY_LIMIT}: the task has no retry limit"
            )
    tag = attributes.get(ATTR_TAG)
    set_aside = None
    if tag is not None and len(tag.encode("utf-8")) > limits.MAX_TAG_LENGTH:
        set_aside = (
            f"tag of {len(tag.encode('utf-8'))} bytes (over the {limits.MAX_TAG_LENGTH}-byte"
            " limit): no worker can lease it by tag"
        )
    stamp = message.publish_time
    return Delivery(
        subscription=subscription,
        ack_id=received.ack_id,  # type: ignore[attr-defined]
        message_id=message_id,
        name=name,
        payload=message.data,
        tag=tag,
        eta=eta,
        published=stamp.seconds + stamp.nanos / 1e9,
        attempt=received.delivery_attempt,  # type: ignore[attr-defined]
        retry_limit=retry_limit,
        attributes=attributes,
        pulled_at=pulled_at,
        ignored=tuple(ignored),
        set_aside=set_aside,
    )
