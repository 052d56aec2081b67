"""Task-name registries that give Pub/Sub the legacy queue's named-task deduplication.

A registry claims a name before its task is published and tombstones it on delete, so
`TaskAlreadyExistsError` and `TombstonedTaskError` mean on Pub/Sub what they meant before.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from urllib.parse import parse_qsl, urlsplit

from pullqueue.config import Settings
from pullqueue.dedupe.base import NameRegistry
from pullqueue.dedupe.memory import MemoryNameRegistry
from pullqueue.errors import ConfigurationError

_FIRESTORE_QUERY_KEYS = ("collection", "timeout")


def connect_registry(
    url: str | None = None,
    *,
    tombstone_seconds: float | None = None,
    clock: Callable[[], float] = time.time,
    settings: Settings | None = None,
) -> NameRegistry:
    """A new registry for url (default: PULLQUEUE_DEDUPE_URL): `memory://` or `firestore://`.

    `firestore://PROJECT[/DATABASE][?collection=NAME&timeout=SECONDS]` stores names in
    Firestore (FIRESTORE_EMULATOR_HOST is honoured); tombstones last `tombstone_seconds`
    (default PULLQUEUE_TOMBSTONE_SECONDS, one week).
    """
    settings = settings or Settings()
    url = url or settings.dedupe_url
    if not url:
        raise ConfigurationError(
            "no task-name registry is configured: set PULLQUEUE_DEDUPE_URL to memory:// or"
            " firestore://PROJECT[/DATABASE]"
        )
    if tombstone_seconds is None:
        tombstone_seconds = settings.tombstone_seconds
    if tombstone_seconds <= 0:
        raise ConfigurationError(f"tombstone_seconds must be above zero, got {tombstone_seconds}")
    parsed = urlsplit(url)
    if parsed.scheme == "memory":
        if parsed.netloc or parsed.path not in ("", "/") or parsed.query:
            raise ConfigurationError(f"memory:// takes no host, path or query, got {url!r}")
        return MemoryNameRegistry(tombstone_seconds=tombstone_seconds, clock=clock)
    if parsed.scheme == "firestore":
        return _firestore(url, tombstone_seconds, clock)
    raise ConfigurationError(
        f"unknown task-name registry URL {url!r}: expected memory:// or"
        " firestore://PROJECT[/DATABASE]"
    )


def _firestore(url: str, tombstone_seconds: float, clock: Callable[[], float]) -> NameRegistry:
    parsed = urlsplit(url)
    database = parsed.path.strip("/")
    if not parsed.netloc or "/" in database:
        raise ConfigurationError(
            f"malformed registry URL {url!r}: expected firestore://PROJECT[/DATABASE]"
        )
    query = dict(parse_qsl(parsed.query, keep_blank_values=True))
    unknown = sorted(set(query) - set(_FIRESTORE_QUERY_KEYS))
    if unknown:
        raise ConfigurationError(
            f"registry URL {url!r} has unknown parameters {unknown}; known: "
            + ", ".join(_FIRESTORE_QUERY_KEYS)
        )
    try:
        timeout = float(query.get("timeout", "30"))
    except ValueError as exc:
        raise ConfigurationError(f"timeout in {url!r} must be a number of seconds") from exc
    if timeout <= 0:
        raise ConfigurationError(f"timeout in {url!r} must be above zero")
    try:
        from pullqueue.dedupe.firestore import COLLECTION, DEFAULT_DATABASE, FirestoreNameRegistry
    except ImportError as exc:
        raise ConfigurationError(
            f"the firestore:// registry needs extra dependencies: pip install"
            f" 'pullqueue[firestore]' ({exc})"
        ) from exc
    return FirestoreNameRegistry(
        parsed.netloc,
        database or DEFAULT_DATABASE,
        tombstone_seconds=tombstone_seconds,
        clock=clock,
        timeout=timeout,
        collection=query.get("collection") or COLLECTION,
    )


__all__ = ["MemoryNameRegistry", "NameRegistry", "connect_registry"]
