"""The outbox on the App Engine datastore API (datastore_v3): staging entities, the sweep store.

Used in-process by `pullqueue.compat.transactional` (bundled ndb and db) and by `pullqueue sweep
--datastore appengine://[HOST:PORT]`, which reads through this process's API proxy or through the
App Engine API served at HOST:PORT (`/rpc_http`: the dev server's API port, a bridge's upstream).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from pullqueue.errors import ConfigurationError
from pullqueue.outbox.layout import KIND, STAGED_USEC, StagedTask


def root_of(reference: Any) -> Any:
    """The datastore_v3 Reference of the entity-group root of `reference` (a copy)."""
    root = type(reference)()
    root.CopyFrom(reference)
    del root.path.element[1:]
    return root


def entity_pb(staged: StagedTask, app: str, root: Any | None) -> Any:
    """The staging entity of one task as a datastore_v3 EntityProto, under `root` (a Reference of
    the transaction's entity group) or a root entity of app's default namespace without one."""
    from google.appengine.api import datastore, datastore_types

    parent = None if root is None else datastore_types.Key._FromPb(root)
    namespace = None if root is None else (root.name_space or None)
    entity = datastore.Entity(KIND, name=staged.name, parent=parent, _app=app, namespace=namespace)
    values = staged.properties()
    for key, value in values.items():
        entity[key] = datastore_types.Blob(value) if isinstance(value, bytes) else value
    entity.set_unindexed_properties([key for key in values if key != STAGED_USEC])
    return entity.ToPb()


class AppEngineStore:
    """Staged tasks read and deleted through the App Engine datastore API (datastore_v3).

    `appengine://` uses this process's API proxy as it is (App Engine, a testbed);
    `appengine://HOST:PORT` sends datastore_v3 calls to the App Engine API at HOST:PORT.
    """

    def __init__(self, url: str = "appengine://") -> None:
        parsed = urlsplit(url)
        if parsed.scheme != "appengine" or parsed.path not in ("", "/") or parsed.query:
            raise ConfigurationError(
                f"malformed datastore URL {url!r}: expected appengine:// or appengine://HOST:PORT"
            )
        self.url = url
        try:
            from google.appengine.api import apiproxy_stub_map  # noqa: F401
        except ImportError as exc:
            raise ConfigurationError(
                f"{url} needs the App Engine SDK: pip install 'pullqueue[appengine]' ({exc})"
            ) from exc
        if parsed.netloc:
            _route_datastore_to(parsed.hostname or "127.0.0.1", parsed.port or 80)

    def staged(self, before_usec: int, limit: int) -> list[tuple[Any, StagedTask]]:
        from google.appengine.api import datastore

        found: list[tuple[Any, StagedTask]] = []
        for namespace in _namespaces():
            query = datastore.Query(KIND, {f"{STAGED_USEC} <": before_usec}, namespace=namespace)
            for entity in query.Run(limit=limit - len(found)):
                item = StagedTask.from_properties(entity.key().name(), entity)
                if item is not None:
                    found.append((entity.key(), item))
            if len(found) >= limit:
                break
        return found

    def remove(self, keys: Sequence[Any]) -> None:
        from google.appengine.api import datastore

        datastore.Delete(list(keys))


def _namespaces() -> list[str]:
    from google.appengine.api import datastore

    names = []
    for key in datastore.Query("__namespace__", keys_only=True).Run():
        names.append(key.name() or "")
    return names or [""]


def _route_datastore_to(host: str, port: int) -> None:
    """Send this process's datastore_v3 calls to the App Engine API at host:port."""
    from google.appengine.api import apiproxy_stub_map
    from google.appengine.runtime import default_api_stub

    os.environ["API_HOST"], os.environ["API_PORT"] = host, str(port)
    os.environ.setdefault("GAE_APPLICATION", os.environ.get("APPLICATION_ID", "s~pullqueue"))
    stub = default_api_stub.DefaultApiStub()
    proxy = apiproxy_stub_map.apiproxy
    if proxy.GetStub("datastore_v3") is None:
        proxy.RegisterStub("datastore_v3", stub)
    else:
        proxy.ReplaceStub("datastore_v3", stub)
