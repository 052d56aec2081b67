"""The sweeper's store on Cloud Datastore (Firestore in Datastore mode), for google-cloud-ndb apps.

`datastore://PROJECT[/DATABASE]` reads and deletes the staging entities with google-cloud-datastore
(DATASTORE_EMULATOR_HOST is honoured); the layout is pullqueue.outbox.layout's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from pullqueue.errors import ConfigurationError
from pullqueue.outbox.layout import KIND, STAGED_USEC, SWEEP_UNTIL_USEC, StagedTask


class CloudDatastoreStore:
    """Staged tasks read and deleted through the Cloud Datastore API."""

    def __init__(self, url: str) -> None:
        parsed = urlsplit(url)
        database = parsed.path.strip("/")
        if parsed.scheme != "datastore" or not parsed.netloc or "/" in database or parsed.query:
            raise ConfigurationError(
                f"malformed datastore URL {url!r}: expected datastore://PROJECT[/DATABASE]"
            )
        try:
            from google.cloud import datastore
        except ImportError as exc:
            raise ConfigurationError(
                f"{url} needs google-cloud-datastore: pip install 'pullqueue[cloud-ndb]' ({exc})"
            ) from exc
        self.url = url
        options = {"database": database} if database else {}
        client: Any = datastore.Client
        self._client: Any = client(project=parsed.netloc, **options)

    def staged(self, before_usec: int, limit: int) -> list[tuple[Any, StagedTask]]:
        found: list[tuple[Any, StagedTask]] = []
        for namespace in self._namespaces():
            query = self._client.query(kind=KIND, namespace=namespace or None)
            query.add_filter(filter=_less(STAGED_USEC, before_usec))
            for entity in query.fetch(limit=limit - len(found)):
                item = StagedTask.from_properties(entity.key.name, entity)
                if item is not None:
                    found.append((entity.key, item))
            if len(found) >= limit:
                break
        return found

    def remove(self, keys: Sequence[Any]) -> None:
        self._client.delete_multi(list(keys))

    def lock(self, key: Any, until_usec: int, now_usec: int) -> bool:
        from google.api_core import exceptions

        try:
            with self._client.transaction():
                entity = self._client.get(key)
                if entity is None or int(entity.get(SWEEP_UNTIL_USEC, 0)) > now_usec:
                    return False
                entity[SWEEP_UNTIL_USEC] = until_usec
                entity.exclude_from_indexes.add(SWEEP_UNTIL_USEC)
                self._client.put(entity)
        except (exceptions.Conflict, exceptions.Aborted):
            return False
        return True

    def _namespaces(self) -> list[str]:
        """Every namespace; only the default one where namespaces cannot be listed (the Datastore
        mode emulator refuses the query)."""
        from google.api_core import exceptions

        query = self._client.query(kind="__namespace__")
        query.keys_only()
        try:
            names = [key.key.name or "" for key in query.fetch()]
        except exceptions.InvalidArgument:
            return [""]
        return names or [""]


def _less(name: str, value: int) -> Any:
    from google.cloud.datastore.query import PropertyFilter

    make: Any = PropertyFilter
    return make(name, "<", value)
