"""Turn a legacy queue.yaml into the Terraform module's variables, one entry per pull queue.

The Pub/Sub side must provision exactly the queues the legacy app declared, with their retry
limits mapped to dead-lettering, so these pure functions generate the module's
`*.auto.tfvars.json` and say on the way what does not carry over.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from pullqueue.adapters.pubsub.layout import (
    DEAD_LETTER_TOPIC_FORMAT,
    DECLARED_TAG_RE,
    LABEL_MAX_BACKOFF,
    LABEL_MAX_DOUBLINGS,
    LABEL_MIN_BACKOFF,
    MAX_FILTER_BYTES,
    SHARDS,
    TAG_SUBSCRIPTION_FORMAT,
    TOPIC_FORMAT,
    QueueLayout,
    check_resource_id,
    check_shards,
    worker_filter,
)
from pullqueue.errors import (
    ConfigurationError,
    InvalidQueueNameError,
    InvalidTaskRetryOptionsError,
)
from pullqueue.limits import bad_number
from pullqueue.queue import validate_queue_name
from pullqueue.retry import RetryParameters

MIN_DELIVERY_ATTEMPTS = 5
MAX_DELIVERY_ATTEMPTS = 100
"""Pub/Sub's bounds on a dead-letter policy's max_delivery_attempts."""

_PROJECT_ID_RE = re.compile(r"^([a-z0-9.-]+:)?[a-z][a-z0-9-]{4,28}[a-z0-9]$")
_PREFIX_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9._~+%-]*$")
_AGE_LIMIT_RE = re.compile(r"^([0-9]+(\.[0-9]*)?)([smhd])$")
_AGE_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}

# The legacy queue.yaml schema (google.appengine.api.queueinfo); anything else is an error there.
_TOP_LEVEL_KEYS = ("application", "total_storage_limit", "resume_paused_queues", "queue")
_QUEUE_KEYS = (
    "name",
    "mode",
    "rate",
    "bucket_size",
    "max_concurrent_requests",
    "retry_parameters",
    "acl",
    "target",
)
_RETRY_KEYS = (
    "task_retry_limit",
    "task_age_limit",
    "min_backoff_seconds",
    "max_backoff_seconds",
    "max_doublings",
)
_PUSH_ONLY_KEYS = ("rate", "bucket_size", "max_concurrent_requests", "target")
_RETRY_DELAY_LABELS = {
    "min_backoff_seconds": (LABEL_MIN_BACKOFF, 1000),
    "max_backoff_seconds": (LABEL_MAX_BACKOFF, 1000),
    "max_doublings": (LABEL_MAX_DOUBLINGS, 1),
}
"""queue.yaml retry field -> (subscription label, scale to a whole number)."""


class QueueYamlError(ConfigurationError):
    """queue.yaml cannot be planned: malformed YAML, or a value the legacy schema rejects."""

    def __init__(
        self, message: str, *, source: str, line: int | None = None, queue: str | None = None
    ):
        where = f"{source}, line {line}" if line is not None else source
        about = f"queue {queue!r}: " if queue is not None else ""
        super().__init__(f"{where}: {about}{message}")
        self.queue = queue
        self.source = source
        self.line = line


class PlanError(ConfigurationError):
    """The queues cannot map to Pub/Sub with these options (prefix, project, declared tags)."""


@dataclass(frozen=True)
class LegacyQueue:
    """One queue entry of a legacy queue.yaml, as far as planning needs it."""

    name: str
    mode: str
    line: int
    task_retry_limit: int | None = None
    task_age_limit: str | None = None
    retry_labels: tuple[tuple[str, str], ...] = ()
    """min/max backoff and max doublings as subscription labels (the worker's retry delay)."""
    not_carried_over: tuple[str, ...] = ()
    """Fields set on this queue that have no Pub/Sub counterpart (push-only fields, acl)."""


@dataclass(frozen=True)
class QueueYaml:
    """The queues of a legacy queue.yaml, in file order."""

    source: str
    queues: tuple[LegacyQueue, ...]
    total_storage_limit: str | None = None

    @property
    def pull_queues(self) -> list[LegacyQueue]:
        return [q for q in self.queues if q.mode == "pull"]

    @property
    def push_queues(self) -> list[LegacyQueue]:
        return [q for q in self.queues if q.mode == "push"]


@dataclass
class Plan:
    """The module's variables for a queue.yaml, and what the user must know about them."""

    variables: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    push_queues: list[str] = field(default_factory=list)
    layouts: list[QueueLayout] = field(default_factory=list)


class _Mapping(dict[str, Any]):
    """A YAML mapping that remembers the 1-based line of itself and of each key."""

    def __init__(self, line: int) -> None:
        super().__init__()
        self.line = line
        self.key_lines: dict[str, int] = {}


class _LineLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader, building `_Mapping`s and refusing duplicate or non-string keys."""


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> _Mapping:
    loader.flatten_mapping(node)
    mapping = _Mapping(node.start_mark.line + 1)
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str):
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} is not a field name", key_node.start_mark
            )
        if key in mapping:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"{key!r} appears twice in one mapping (the first is on line"
                f" {mapping.key_lines[key]})",
                key_node.start_mark,
            )
        mapping[key] = loader.construct_object(value_node, deep=True)
        mapping.key_lines[key] = key_node.start_mark.line + 1
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _check_keys(
    mapping: _Mapping, allowed: Sequence[str], what: str, source: str, queue: str | None = None
) -> None:
    for key in mapping:
        if key not in allowed:
            raise QueueYamlError(
                f"unknown field {key!r} in {what}; the legacy queue.yaml accepts: "
                + ", ".join(allowed),
                source=source,
                line=mapping.key_lines[key],
                queue=queue,
            )


def _retry_limit(value: object, source: str, line: int, queue: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise QueueYamlError(
            f"task_retry_limit must be a whole number, not {value!r}",
            source=source,
            line=line,
            queue=queue,
        )
    try:
        limit = int(value)
    except ValueError:
        raise QueueYamlError(
            f"task_retry_limit must be a whole number, not {value!r}",
            source=source,
            line=line,
            queue=queue,
        ) from None
    if limit < 0:
        raise QueueYamlError(
            "task_retry_limit must not be less than zero", source=source, line=line, queue=queue
        )
    return limit


def _retry_delay_labels(retry: _Mapping, source: str, queue: str) -> tuple[tuple[str, str], ...]:
    """The retry-delay fields of retry_parameters as labels; QueueYamlError naming a bad one."""
    values: dict[str, Any] = {}
    for key, (_, scale) in _RETRY_DELAY_LABELS.items():
        if key not in retry:
            continue
        value = retry[key]
        whole = scale == 1
        if (
            bad_number(value)
            or not isinstance(value, int | float)
            or value < 0
            or (whole and not isinstance(value, int))
        ):
            kind = "a whole number >= 0" if whole else "a number of seconds >= 0"
            raise QueueYamlError(
                f"{key} must be {kind}, not {value!r}",
                source=source,
                line=retry.key_lines[key],
                queue=queue,
            )
        values[key] = value
    try:
        RetryParameters.given(**values)
    except InvalidTaskRetryOptionsError as exc:
        raise QueueYamlError(
            f"retry_parameters: {exc}", source=source, line=retry.line, queue=queue
        ) from None
    return tuple(
        (_RETRY_DELAY_LABELS[key][0], str(round(value * _RETRY_DELAY_LABELS[key][1])))
        for key, value in values.items()
    )


def age_limit_seconds(age_limit: str) -> int | None:
    """A legacy task_age_limit ('2d', '1.5h', '30m', '90s') in whole seconds; None if malformed."""
    match = _AGE_LIMIT_RE.match(age_limit.strip())
    if not match:
        return None
    return int(float(match.group(1)) * _AGE_UNIT_SECONDS[match.group(3)])


def _read_queue(entry: object, line: int, source: str) -> LegacyQueue:
    if not isinstance(entry, _Mapping):
        raise QueueYamlError(
            f"each entry under 'queue:' must be a mapping with a name, not {entry!r}",
            source=source,
            line=line,
        )
    if "name" not in entry:
        raise QueueYamlError("queue entry has no name", source=source, line=entry.line)
    name = entry["name"]
    name_line = entry.key_lines["name"]
    if not isinstance(name, str):
        raise QueueYamlError(f"queue name {name!r} must be a string", source=source, line=name_line)
    try:
        validate_queue_name(name)
    except InvalidQueueNameError:
        raise QueueYamlError(
            "not a legacy queue name (1-100 letters, digits and hyphens)",
            source=source,
            line=name_line,
            queue=name,
        ) from None
    _check_keys(entry, _QUEUE_KEYS, "a queue entry", source, name)

    mode = entry.get("mode", "push")
    if mode not in ("pull", "push"):
        raise QueueYamlError(
            f"mode must be 'pull' or 'push', not {mode!r}",
            source=source,
            line=entry.key_lines["mode"],
            queue=name,
        )

    retry = entry.get("retry_parameters")
    retry_limit: int | None = None
    age_limit: str | None = None
    retry_labels: tuple[tuple[str, str], ...] = ()
    not_carried_over = [key for key in _PUSH_ONLY_KEYS if key in entry]
    if retry is not None:
        if not isinstance(retry, _Mapping):
            raise QueueYamlError(
                "retry_parameters must be a mapping",
                source=source,
                line=entry.key_lines["retry_parameters"],
                queue=name,
            )
        _check_keys(retry, _RETRY_KEYS, "retry_parameters", source, name)
        if "task_retry_limit" in retry:
            retry_limit = _retry_limit(
                retry["task_retry_limit"], source, retry.key_lines["task_retry_limit"], name
            )
        if "task_age_limit" in retry:
            age_limit = str(retry["task_age_limit"])
            seconds = age_limit_seconds(age_limit)
            if seconds is None or seconds <= 0:
                raise QueueYamlError(
                    f"task_age_limit {age_limit!r} must be a positive number followed by s, m,"
                    " h or d (e.g. '2d')",
                    source=source,
                    line=retry.key_lines["task_age_limit"],
                    queue=name,
                )
        retry_labels = _retry_delay_labels(retry, source, name)
    if "acl" in entry:
        not_carried_over.append("acl")
    return LegacyQueue(
        name=name,
        mode=str(mode),
        line=entry.line,
        task_retry_limit=retry_limit,
        task_age_limit=age_limit,
        retry_labels=retry_labels,
        not_carried_over=tuple(not_carried_over),
    )


def read_queue_yaml(text: str, source: str = "queue.yaml") -> QueueYaml:
    """Parse a legacy queue.yaml; a QueueYamlError names the line of anything wrong."""
    try:
        document = yaml.load(text, Loader=_LineLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = exc.problem or exc.context or "malformed YAML"
        if exc.problem and exc.context and exc.context_mark is not None:
            problem += f" ({exc.context} that starts on line {exc.context_mark.line + 1})"
        raise QueueYamlError(
            f"not valid YAML: {problem}; fix the file and run plan again",
            source=source,
            line=line,
        ) from None
    except yaml.YAMLError as exc:
        raise QueueYamlError(f"not valid YAML: {exc}", source=source) from None
    if document is None:
        return QueueYaml(source=source, queues=())
    if not isinstance(document, _Mapping):
        raise QueueYamlError(
            "a queue.yaml is a mapping with a 'queue:' list at the top", source=source, line=1
        )
    _check_keys(document, _TOP_LEVEL_KEYS, "the top level", source)
    entries = document.get("queue")
    if entries is None:
        entries = []
    if not isinstance(entries, list):
        raise QueueYamlError(
            "'queue:' must be a list of queue entries",
            source=source,
            line=document.key_lines["queue"],
        )
    queues: list[LegacyQueue] = []
    first_line: dict[str, int] = {}
    for entry in entries:
        queue = _read_queue(entry, document.key_lines["queue"], source)
        if queue.name in first_line:
            raise QueueYamlError(
                f"declared twice (first on line {first_line[queue.name]})",
                source=source,
                line=queue.line,
                queue=queue.name,
            )
        first_line[queue.name] = queue.line
        queues.append(queue)
    limit = document.get("total_storage_limit")
    return QueueYaml(
        source=source,
        queues=tuple(queues),
        total_storage_limit=None if limit is None else str(limit),
    )


def parse_tag_options(values: Iterable[str]) -> dict[str, list[str]]:
    """`QUEUE=TAG` options to {queue: [tags]} (first '=' splits; order kept, repeats dropped)."""
    tags: dict[str, list[str]] = {}
    for value in values:
        queue, sep, tag = value.partition("=")
        if not sep or not queue or not tag:
            raise PlanError(f"--tag {value!r} must look like QUEUE=TAG (e.g. --tag reports=daily)")
        queue_tags = tags.setdefault(queue, [])
        if tag not in queue_tags:
            queue_tags.append(tag)
    return tags


def parse_shard_options(values: Iterable[str]) -> dict[str | None, int]:
    """`--shards N` (every pull queue) and `--shards QUEUE=N` options to {queue or None: N}."""
    shards: dict[str | None, int] = {}
    for value in values:
        queue, sep, count = value.rpartition("=")
        if sep and not queue:
            raise PlanError(f"--shards {value!r} must look like N or QUEUE=N (e.g. --shards 32)")
        number: object = int(count) if count.isascii() and count.isdigit() else count
        try:
            shards[queue or None] = check_shards(number, f"--shards {value!r}:")
        except ConfigurationError as exc:
            raise PlanError(str(exc)) from None
    return shards


def max_delivery_attempts(queue: LegacyQueue) -> tuple[int, str | None]:
    """Pub/Sub max_delivery_attempts for a queue's task_retry_limit, and a warning if it differs.

    The legacy service leases a task at most task_retry_limit times (each lease is a delivery)
    and then deletes it; Pub/Sub dead-letters after max_delivery_attempts deliveries, 5 to 100.
    """
    limit = queue.task_retry_limit
    if limit is None:
        return MAX_DELIVERY_ATTEMPTS, (
            f"no task_retry_limit: the legacy queue leased a task without limit; Pub/Sub moves it"
            f" to the dead-letter topic after {MAX_DELIVERY_ATTEMPTS} deliveries (its maximum)"
        )
    if limit < MIN_DELIVERY_ATTEMPTS:
        return MIN_DELIVERY_ATTEMPTS, (
            f"task_retry_limit {limit} is below Pub/Sub's minimum of {MIN_DELIVERY_ATTEMPTS}"
            f" delivery attempts; using {MIN_DELIVERY_ATTEMPTS}, so a failing task is leased up to"
            f" {MIN_DELIVERY_ATTEMPTS - limit} more times than before"
        )
    if limit > MAX_DELIVERY_ATTEMPTS:
        return MAX_DELIVERY_ATTEMPTS, (
            f"task_retry_limit {limit} is above Pub/Sub's maximum of {MAX_DELIVERY_ATTEMPTS}"
            f" delivery attempts; using {MAX_DELIVERY_ATTEMPTS}, so a failing task is"
            f" dead-lettered after {MAX_DELIVERY_ATTEMPTS} leases instead of {limit}"
        )
    return limit, None


def _check_project(project: str) -> None:
    if not _PROJECT_ID_RE.match(project):
        raise PlanError(
            f"--project {project!r} is not a GCP project id (6-30 lowercase letters, digits and"
            " hyphens, starting with a letter); pass the project id, not its name or number"
        )


def _check_prefix(prefix: str) -> None:
    if prefix and (not _PREFIX_RE.match(prefix) or prefix.lower().startswith("goog")):
        raise PlanError(
            f"--prefix {prefix!r} must start with a letter, use only letters, digits and"
            " . _ ~ + % -, and not start with 'goog' (e.g. --prefix pq-)"
        )


def _layout(
    project: str, queue: LegacyQueue, prefix: str, tags: Sequence[str], shards: int = SHARDS
) -> QueueLayout:
    """The queue's QueueLayout, with errors that say which plan option to change."""
    ids = {"prefix": prefix, "queue": queue.name}
    topic_id = TOPIC_FORMAT.format(**ids)
    try:
        check_resource_id(topic_id, "topic", queue.name)
        check_resource_id(DEAD_LETTER_TOPIC_FORMAT.format(**ids), "topic", queue.name)
    except ConfigurationError:
        hint = (
            "choose a prefix that starts with a letter and keeps ids within 255 characters"
            if prefix
            else "rerun with --prefix (e.g. --prefix pq-)"
        )
        raise PlanError(
            f"the name (line {queue.line}) cannot become the Pub/Sub topic id {topic_id!r}"
            f": ids have 3-255 characters, start with a letter and do not start"
            f" with 'goog'; {hint}, and give the workers the same PULLQUEUE_PUBSUB_PREFIX",
            queue=queue.name,
        ) from None
    for tag in tags:
        if not DECLARED_TAG_RE.match(tag):
            raise PlanError(
                f"--tag {queue.name}={tag}: a declared tag names a subscription, so it must match"
                f" {DECLARED_TAG_RE.pattern}; leave this tag undeclared (the worker subscription"
                " serves every undeclared tag)",
                queue=queue.name,
            )
        subscription_id = TAG_SUBSCRIPTION_FORMAT.format(tag=tag, **ids)
        try:
            check_resource_id(subscription_id, "subscription", queue.name)
        except ConfigurationError:
            raise PlanError(
                f"--tag {queue.name}={tag}: the subscription id {subscription_id!r} is longer"
                " than Pub/Sub's 255 characters; declare a shorter tag",
                queue=queue.name,
            ) from None
    filter_bytes = len(worker_filter(tags).encode())
    if filter_bytes > MAX_FILTER_BYTES:
        raise PlanError(
            f"{len(tags)} declared tags make the worker subscription's filter {filter_bytes}"
            f" bytes, over Pub/Sub's {MAX_FILTER_BYTES}; declare fewer --tag values for this"
            " queue (undeclared tags are served by the worker subscription)",
            queue=queue.name,
        )
    return QueueLayout(project, queue.name, prefix, tuple(tags), shards)


def _topic_ids(layout: QueueLayout) -> list[str]:
    return [
        layout.topic_id,
        layout.dead_letter_topic_id,
        layout.claims_topic_id,
        *(layout.shard_topic_id(k) for k in range(layout.shards)),
    ]


def _subscription_ids(layout: QueueLayout) -> list[str]:
    return [
        layout.worker_subscription_id,
        layout.dead_letter_subscription_id,
        *(layout.tag_subscription_id(tag) for tag in layout.declared_tags),
        *(layout.shard_subscription_id(k) for k in range(layout.shards)),
        layout.claims_subscription_id,
    ]


def _check_collisions(layouts: Sequence[QueueLayout]) -> None:
    """Two queues must never need the same topic or subscription id."""
    for kind, ids_of in (("topic", _topic_ids), ("subscription", _subscription_ids)):
        owner: dict[str, str] = {}
        for layout in layouts:
            for resource_id in ids_of(layout):
                if resource_id in owner and owner[resource_id] != layout.queue:
                    raise PlanError(
                        f"queues {owner[resource_id]!r} and {layout.queue!r} both need the"
                        f" {kind} id {resource_id!r}; rename "
                        + ("one of the queues" if kind == "topic" else "a queue or declared tag")
                        + " before moving to Pub/Sub",
                        queue=layout.queue,
                    )
                owner[resource_id] = layout.queue


def build_plan(
    queue_yaml: QueueYaml,
    *,
    project: str,
    prefix: str = "",
    declared_tags: Mapping[str, Sequence[str]] | None = None,
    shards: Mapping[str | None, int] | None = None,
) -> Plan:
    """The module variables (project_id, prefix, queues) for every pull queue of queue_yaml;
    shards: shard count by queue name (None: every other pull queue; unset: the module's 16)."""
    _check_project(project)
    _check_prefix(prefix)
    declared_tags = dict(declared_tags or {})
    shards = dict(shards or {})
    pull = {q.name: q for q in queue_yaml.pull_queues}
    for queue_name in shards:
        if queue_name is not None and queue_name not in pull:
            raise PlanError(
                f"--shards names a queue that is not a pull queue of {queue_yaml.source}"
                f" (pull queues there: {', '.join(pull) or 'none'})",
                queue=queue_name,
            )
    for queue_name in declared_tags:
        if queue_name not in pull:
            kind = (
                "a push queue"
                if any(q.name == queue_name for q in queue_yaml.queues)
                else "a queue that is not declared"
            )
            raise PlanError(
                f"--tag declares a tag on {kind} in {queue_yaml.source}; only pull queues take"
                f" declared tags (pull queues there: {', '.join(pull) or 'none'})",
                queue=queue_name,
            )

    plan = Plan(variables={}, push_queues=[q.name for q in queue_yaml.push_queues])
    queues: dict[str, dict[str, Any]] = {}
    for queue in pull.values():
        count = shards.get(queue.name, shards.get(None))
        layout = _layout(project, queue, prefix, declared_tags.get(queue.name, ()), count or SHARDS)
        plan.layouts.append(layout)
        attempts, note = max_delivery_attempts(queue)
        where = f"queue {queue.name!r} (line {queue.line})"
        if note:
            plan.warnings.append(f"{where}: {note}")
        if queue.task_age_limit is not None:
            plan.warnings.append(
                f"{where}: task_age_limit {queue.task_age_limit} has no Pub/Sub equivalent and is"
                " not carried over; tasks are kept for the subscription's"
                " message_retention_duration (module default 31 days) and dead-lettered after"
                " max_delivery_attempts"
            )
        for field_name in queue.not_carried_over:
            if field_name == "acl":
                plan.warnings.append(
                    f"{where}: acl is not carried over; the module grants the topic to"
                    " publisher_service_account and the subscriptions to worker_service_account"
                )
            else:
                plan.warnings.append(
                    f"{where}: {field_name} applies to push queues only and is ignored"
                )
        queues[queue.name] = {
            "declared_tags": sorted(set(layout.declared_tags)),
            "max_delivery_attempts": attempts,
        }
        if count is not None:
            queues[queue.name]["shards"] = count
        if queue.retry_labels:
            queues[queue.name]["labels"] = dict(queue.retry_labels)
    _check_collisions(plan.layouts)

    if queue_yaml.total_storage_limit is not None:
        plan.warnings.append(
            f"total_storage_limit {queue_yaml.total_storage_limit} is not carried over; Pub/Sub"
            " bills retained messages instead of capping them"
        )
    if not queues:
        plan.warnings.append(
            f"{queue_yaml.source} declares no pull queue (mode: pull); the plan creates nothing"
        )
    plan.variables = {"project_id": project, "prefix": prefix, "queues": queues}
    return plan


def render(plan: Plan) -> str:
    """The plan's variables as the text of a `*.auto.tfvars.json` file."""
    return json.dumps(plan.variables, indent=2) + "\n"
