"""The Pub/Sub resource names and filters for a queue: the one definition both sides use.

The adapter looks for exactly these ids and the Terraform module in `terraform/` creates exactly
these (a test parses the module's HCL and checks they agree), so the two can never drift apart.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

from pullqueue.errors import ConfigurationError
from pullqueue.links import source_url

# Formats shared with terraform/modules/pullqueue/layout.tf (locals); keep the two in step.
TOPIC_FORMAT = "{prefix}{queue}"
WORKER_SUBSCRIPTION_FORMAT = "{prefix}{queue}-workers"
TAG_SUBSCRIPTION_FORMAT = "{prefix}{queue}-tag-{tag}"
DEAD_LETTER_TOPIC_FORMAT = "{prefix}{queue}-dead-letter"
DEAD_LETTER_SUBSCRIPTION_FORMAT = "{prefix}{queue}-dead-letter"
REDRIVE_SUBSCRIPTION_FORMAT = "{prefix}{queue}-redrive"
"""Made by `pullqueue dead-letters --redrive` for the length of a redrive (docs/operations.md)."""
SHARD_TOPIC_FORMAT = "{prefix}{queue}-shard-{shard}"
SHARD_SUBSCRIPTION_FORMAT = "{prefix}{queue}-shard-{shard}"
CLAIMS_TOPIC_FORMAT = "{prefix}{queue}-claims"
CLAIMS_SUBSCRIPTION_FORMAT = "{prefix}{queue}-claims"

SHARDS = 16
"""Shard topics of a queue provisioned without a shard count (no LABEL_SHARDS on its topic)."""
MIN_SHARDS = 1
MAX_SHARDS = 256
"""The shard counts a queue may be provisioned with. Wire format: a tag's shard is
crc32(UTF-8 tag) mod the queue's count, so the count never changes while the queue holds tasks."""
LABEL_SHARDS = "pullqueue-shards"
"""Label of the queue topic carrying its shard count in decimal (absent: SHARDS): written by
the Terraform module and auto_create, read by every publisher and worker when it opens the queue."""

# Message attributes of the wire format (docs/pubsub.md).
ATTR_TASK_NAME = "task_name"
ATTR_TAG = "tag"
ATTR_ETA = "eta"

LABEL_MIN_BACKOFF = "pullqueue-min-backoff-ms"
LABEL_MAX_BACKOFF = "pullqueue-max-backoff-ms"
LABEL_MAX_DOUBLINGS = "pullqueue-max-doublings"
"""Subscription labels carrying queue.yaml's retry_parameters (whole milliseconds, a count):
`pullqueue plan` writes them, the Terraform module sets them, workers read them."""

MAX_FILTER_BYTES = 256
_RESOURCE_ID_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9._~+%-]{2,254}$")
DECLARED_TAG_RE = re.compile(r"^[a-zA-Z0-9._~+%-]{1,100}$")


def check_resource_id(resource_id: str, kind: str, queue: str) -> str:
    """Return resource_id when Pub/Sub accepts it, else a ConfigurationError saying why."""
    if not _RESOURCE_ID_RE.match(resource_id) or resource_id.lower().startswith("goog"):
        raise ConfigurationError(
            f"Pub/Sub {kind} id {resource_id!r} is not valid (3-255 characters, starting with a"
            " letter, not 'goog'); set PULLQUEUE_PUBSUB_PREFIX (e.g. 'pq-') so queue names map"
            " to valid ids",
            queue=queue,
        )
    return resource_id


def tag_filter(tag: str) -> str:
    """The filter of a declared tag's subscription: only that tag's tasks."""
    return f'attributes.tag = "{tag}"'


def worker_filter(declared_tags: Iterable[str]) -> str:
    """The worker subscription's filter: every task except those of declared tags ('' = all)."""
    tags = sorted(set(declared_tags))
    if not tags:
        return ""
    if len(tags) == 1:
        return f'NOT attributes:tag OR attributes.tag != "{tags[0]}"'
    others = " AND ".join(f'attributes.tag != "{t}"' for t in tags)
    return f"NOT attributes:tag OR ({others})"


def shard_of(tag: str, shards: int = SHARDS) -> int:
    """The shard of a tag: CRC-32 (zlib, ISO-HDLC) of its UTF-8 bytes, modulo the shard count."""
    return zlib.crc32(tag.encode("utf-8")) % shards


def check_shards(value: object, source: str, queue: str | None = None) -> int:
    """value as a shard count, else a ConfigurationError naming source (where it came from)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not MIN_SHARDS <= value <= MAX_SHARDS
    ):
        raise ConfigurationError(
            f"{source} {value!r} is not a shard count: a whole number from {MIN_SHARDS} to"
            f" {MAX_SHARDS} ({source_url('docs/pubsub.md')}, 'Shard count')",
            queue=queue,
        )
    return value


def shards_label(text: str | None, queue: str) -> int:
    """The shard count a queue topic's LABEL_SHARDS says (SHARDS when it has none)."""
    if text is None:
        return SHARDS
    number = int(text) if text.isascii() and text.isdigit() and len(text) <= 3 else text
    return check_shards(number, f"topic label {LABEL_SHARDS}", queue)


@dataclass(frozen=True)
class QueueLayout:
    """Every Pub/Sub id and filter one pull queue uses."""

    project: str
    queue: str
    prefix: str = ""
    declared_tags: tuple[str, ...] = ()
    shards: int = SHARDS
    """Shard topics of the queue (its topic's LABEL_SHARDS)."""

    def __post_init__(self) -> None:
        check_shards(self.shards, "shard count", self.queue)
        for tag in self.declared_tags:
            if not DECLARED_TAG_RE.match(tag):
                raise ConfigurationError(
                    f"declared tag {tag!r} must match {DECLARED_TAG_RE.pattern} to name a"
                    " subscription; leave it undeclared (served by the worker subscription)",
                    queue=self.queue,
                )
        if len(self.worker_filter.encode()) > MAX_FILTER_BYTES:
            raise ConfigurationError(
                f"{len(self.declared_tags)} declared tags make the worker subscription's filter"
                f" longer than Pub/Sub's {MAX_FILTER_BYTES} bytes; declare fewer tags",
                queue=self.queue,
            )
        for resource_id, kind in [
            (self.topic_id, "topic"),
            (self.worker_subscription_id, "subscription"),
            (self.dead_letter_topic_id, "topic"),
            *((self.shard_topic_id(k), "topic") for k in range(self.shards)),
            (self.claims_topic_id, "topic"),
            *((self.tag_subscription_id(t), "subscription") for t in self.declared_tags),
        ]:
            check_resource_id(resource_id, kind, self.queue)

    def _format(self, fmt: str, **extra: str) -> str:
        return fmt.format(prefix=self.prefix, queue=self.queue, **extra)

    @property
    def topic_id(self) -> str:
        return self._format(TOPIC_FORMAT)

    @property
    def worker_subscription_id(self) -> str:
        return self._format(WORKER_SUBSCRIPTION_FORMAT)

    def tag_subscription_id(self, tag: str) -> str:
        return self._format(TAG_SUBSCRIPTION_FORMAT, tag=tag)

    def shard_topic_id(self, shard: int) -> str:
        return self._format(SHARD_TOPIC_FORMAT, shard=str(shard))

    def shard_subscription_id(self, shard: int) -> str:
        return self._format(SHARD_SUBSCRIPTION_FORMAT, shard=str(shard))

    @property
    def claims_topic_id(self) -> str:
        return self._format(CLAIMS_TOPIC_FORMAT)

    @property
    def claims_subscription_id(self) -> str:
        return self._format(CLAIMS_SUBSCRIPTION_FORMAT)

    def topic_for(self, tag: str | None) -> str:
        """The topic a task of this tag is published to: its shard's, or the queue topic for
        untagged tasks and declared tags (served by their filtered subscriptions)."""
        if tag is None or tag in self.declared_tags:
            return self.topic_id
        return self.shard_topic_id(shard_of(tag, self.shards))

    @property
    def dead_letter_topic_id(self) -> str:
        return self._format(DEAD_LETTER_TOPIC_FORMAT)

    @property
    def dead_letter_subscription_id(self) -> str:
        return self._format(DEAD_LETTER_SUBSCRIPTION_FORMAT)

    @property
    def redrive_subscription_id(self) -> str:
        return self._format(REDRIVE_SUBSCRIPTION_FORMAT)

    @property
    def worker_filter(self) -> str:
        return worker_filter(self.declared_tags)

    @property
    def topic_path(self) -> str:
        return f"projects/{self.project}/topics/{self.topic_id}"

    def subscription_path(self, subscription_id: str) -> str:
        return f"projects/{self.project}/subscriptions/{subscription_id}"
