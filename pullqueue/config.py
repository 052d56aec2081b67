"""Settings read from the environment (prefix PULLQUEUE_), with pydantic-settings.

One place says which backend a process talks to and how, so a service is pointed at memory,
the Pub/Sub emulator or production by its environment and not by code.
"""

from __future__ import annotations

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """pullqueue configuration; every field is read from `PULLQUEUE_<FIELD>`."""

    model_config = SettingsConfigDict(env_prefix="PULLQUEUE_", extra="ignore", allow_inf_nan=False)

    url: str = Field("memory://", description="Backend URL: memory://, pubsub://PROJECT, ...")
    auto_create: bool = Field(
        False, description="Create missing Pub/Sub topics and subscriptions (development)."
    )
    pubsub_prefix: str = Field(
        "", description="Prefix for Pub/Sub topic and subscription ids (e.g. 'pq-')."
    )
    pubsub_declared_tags: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Tags with their own filtered subscription, per queue (JSON object).",
    )
    pubsub_shards: int | None = Field(
        None,
        ge=1,
        le=256,
        description="Shard topics of a queue auto_create provisions (default 16); when set, a"
        " queue found with another count (its topic's pullqueue-shards label) is refused.",
    )
    pubsub_keeper_period: float = Field(
        15.0, gt=0, description="Seconds between lease-keeper passes that extend ack deadlines."
    )
    pubsub_lease_window: float = Field(
        60.0,
        gt=0,
        le=600,
        description="Ack deadline (s) a lease over 600 s gets at a time, renewed by the keeper:"
        " a killed worker's long-leased tasks come back within it. Over 2x the keeper period.",
    )
    pubsub_hold_seconds: float = Field(
        30.0,
        ge=0,
        description="How long tasks pulled for no one (other tags) wait for this process's next"
        " lease before they are released; a drained shard's are kept while the process keeps"
        " leasing by oldest tag.",
    )
    pubsub_hold_max: int = Field(
        5000,
        ge=0,
        description="Most tasks held that way per queue (bounds a tag scan and how much of a"
        " shard one process drains into its hand).",
    )
    pubsub_hold_bytes: int = Field(
        64 * 2**20,
        ge=2**20,
        description="Most bytes of tasks (payloads and attributes) held that way per queue;"
        " pulls are sized to fit it, so a worker's memory stays bounded with large payloads.",
    )
    pubsub_pull_bytes: int = Field(
        16 * 2**20,
        ge=2**20,
        description="Most bytes one round of pulls asks for, all subscriptions side by side,"
        " by each one's message size estimate; with large payloads a worker's memory for a"
        " queue is its hand plus a few times this (the answer as received, parsed, copied out).",
    )
    pubsub_pull_wait: float = Field(
        1.0, gt=0, description="Seconds a lease waits on an empty subscription before answering."
    )
    pubsub_pause_check: float = Field(
        10.0,
        gt=0,
        le=3600,
        description="Seconds a process trusts its copy of a queue's pause label before reading"
        " the queue topic again: a pause reaches every worker within this plus one lease call.",
    )
    pubsub_max_deferral: int = Field(
        600,
        ge=1,
        le=600,
        description="Longest ack deadline (s) used to hide a task until its ETA; one delivery"
        " attempt per deferral.",
    )
    pubsub_rpc_timeout: float = Field(
        10.0, gt=0, description="Seconds one Pub/Sub call may take, retries included."
    )
    pubsub_ack_deadline: int = Field(
        60, ge=10, le=600, description="auto_create: the subscriptions' ack deadline (s)."
    )
    pubsub_max_delivery_attempts: int = Field(
        100,
        ge=5,
        le=100,
        description="auto_create, and when a subscription cannot be read: deliveries before a"
        " task goes to the dead-letter topic.",
    )
    pubsub_retention_seconds: int = Field(
        7 * 24 * 3600,
        ge=600,
        le=31 * 24 * 3600,
        description="auto_create, and when a subscription cannot be read: message retention"
        " (the emulator accepts at most 7 days; tasks hidden longer are republished).",
    )
    cloudtasks_transport: str = Field("grpc", description="Cloud Tasks transport: grpc or rest.")
    lease_requests_per_second: float = Field(
        10.0, gt=0, description="Client-side cap on lease calls per queue (legacy limit: 10)."
    )
    dedupe_url: str | None = Field(
        None, description="Task-name registry: memory:// or firestore://PROJECT[/DATABASE]."
    )
    accept_duplicate_names: bool = Field(
        False,
        description="Pub/Sub without PULLQUEUE_DEDUPE_URL: publish named tasks without a"
        " uniqueness check (a name added twice is two tasks; warned once per process) instead"
        " of refusing them with ConfigurationError.",
    )
    tombstone_seconds: float = Field(
        7 * 24 * 3600.0, gt=0, description="How long a deleted task name stays tombstoned."
    )
    outbox_datastore: str | None = Field(
        None,
        description="Where transactional adds stage their tasks, for the sweeper:"
        " appengine:// (this process's App Engine API) or appengine://HOST:PORT.",
    )
    sweep_grace_seconds: float = Field(
        60.0,
        gt=0,
        description="How long a staged task is left to its own post-commit publish before a"
        " sweep publishes it.",
    )
    sweep_lock_seconds: float = Field(
        60.0,
        gt=0,
        description="How long a sweeper keeps other sweepers off a staged task it publishes"
        " (longer than a pass takes to publish it).",
    )
    sweep_period_seconds: float = Field(
        300.0,
        ge=0,
        description="Seconds between the sweeps of `pullqueue work` and `pullqueue bridge`"
        " (0: they do not sweep).",
    )

    @field_validator("pubsub_shards", mode="before")
    @classmethod
    def _no_bool_shards(cls, value: object) -> object:
        if isinstance(value, bool):
            raise ValueError("a shard count is a whole number, not a boolean")
        return value

    plugins: str = Field(
        "",
        description="Comma-separated modules imported before a URL is resolved; each may call"
        " pullqueue.register() to add a URL scheme (e.g. a test or in-house backend).",
    )
