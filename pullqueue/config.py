"""Settings read from the environment (prefix PULLQUEUE_), with pydantic-settings.

One place says which backend a process talks to and how, so a service is pointed at memory,
the Pub/Sub emulator or production by its environment and not by code.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """pullqueue configuration; every field is read from `PULLQUEUE_<FIELD>`."""

    model_config = SettingsConfigDict(env_prefix="PULLQUEUE_", extra="ignore")

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
    pubsub_keeper_period: float = Field(
        60.0, gt=0, description="Seconds between lease-keeper passes that extend ack deadlines."
    )
    cloudtasks_transport: str = Field("grpc", description="Cloud Tasks transport: grpc or rest.")
    lease_requests_per_second: float = Field(
        10.0, gt=0, description="Client-side cap on lease calls per queue (legacy limit: 10)."
    )
    dedupe_url: str | None = Field(
        None, description="Task-name registry: memory:// or firestore://PROJECT[/DATABASE]."
    )
    tombstone_seconds: float = Field(
        7 * 24 * 3600.0, gt=0, description="How long a deleted task name stays tombstoned."
    )
