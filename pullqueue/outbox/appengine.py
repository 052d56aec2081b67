"""The outbox on the App Engine datastore API (datastore_v3): staging entities, the sweep store.

Used in-process by `pullqueue.compat.transactional` (bundled ndb and db) and by `pullqueue sweep
--datastore appengine://[HOST:PORT]`, which reads through this process's API proxy or through the
App Engine API served at HOST:PORT (`/rpc_http`: the dev server's API port, a bridge's upstream).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from pullqueue.errors import ConfigurationError
from pullqueue.outbox.layout import KIND, STAGED_USEC, SWEEP_UNTIL_USEC, StagedTask


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


def entity_pbs(staged: Sequence[StagedTask], app: str, root: Any | None) -> list[Any]:
    """The staging entities of a transaction's tasks, all in one entity group: under `root`, or,
    when the transaction touched no entity, under the first task's own (a root entity)."""
    entities: list[Any] = []
    for item in staged:
        entity = entity_pb(item, app, root)
        if root is None:
            root = root_of(entity.key)
        entities.append(entity)
    return entities


class AppEngineStore:
    """Staged tasks read and deleted through the App Engine datastore API (datastore_v3).

    `appengine://` uses this process's API proxy as it is (App Engine, a testbed);
    `appengine://HOST:PORT?app=APP_ID` sends datastore_v3 calls to the App Engine API at
    HOST:PORT for app APP_ID (partition included: s~my-app; default env GAE_APPLICATION).
    """

    def __init__(self, url: str = "appengine://") -> None:
        parsed = urlsplit(url)
        query = dict(parse_qsl(parsed.query))
        if (
            parsed.scheme != "appengine"
            or parsed.path not in ("", "/")
            or set(query) - {"app"}
            or (query and not parsed.netloc)
        ):
            raise ConfigurationError(
                f"malformed datastore URL {url!r}: expected appengine:// or"
                " appengine://HOST:PORT?app=APP_ID"
            )
        self.url = url
        try:
            from google.appengine.api import apiproxy_stub_map  # noqa: F401
        except ImportError as exc:
            raise ConfigurationError(
                f"{url} needs the App Engine SDK: pip install 'pullqueue[appengine]' ({exc})"
            ) from exc
        self._routed = bool(parsed.netloc)
        if self._routed:
            app = query.get("app") or os.environ.get("GAE_APPLICATION")
            if not app:
                raise ConfigurationError(
                    f"{url}: name the app whose datastore to sweep, with the partition as its"
                    " transactions name it: appengine://HOST:PORT?app=s~my-app (or set"
                    " GAE_APPLICATION)"
                )
            _route_datastore_to(parsed.hostname or "127.0.0.1", parsed.port or 80, app)

    def _ticket(self) -> None:
        """The SDK's API stub sends calls only from threads told to use the process's ticket."""
        if self._routed:
            from google.appengine.runtime import default_api_stub

            default_api_stub.DefaultApiStub.SetUseRequestSecurityTicketForThread(True)

    def staged(self, before_usec: int, limit: int) -> list[tuple[Any, StagedTask]]:
        from google.appengine.api import datastore

        self._ticket()
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

        self._ticket()
        datastore.Delete(list(keys))

    def lock(self, key: Any, until_usec: int, now_usec: int) -> bool:
        from google.appengine.api import datastore, datastore_errors

        self._ticket()

        def take() -> bool:
            try:
                entity = datastore.Get(key)
            except datastore_errors.EntityNotFoundError:
                return False
            if int(entity.get(SWEEP_UNTIL_USEC, 0)) > now_usec:
                return False
            entity[SWEEP_UNTIL_USEC] = until_usec
            entity.set_unindexed_properties([*entity.unindexed_properties(), SWEEP_UNTIL_USEC])
            datastore.Put(entity)
            return True

        try:
            return bool(datastore.RunInTransaction(take))
        except datastore_errors.TransactionFailedError:
            return False


def _namespaces() -> list[str]:
    from google.appengine.api import datastore

    names = []
    for key in datastore.Query("__namespace__", keys_only=True).Run():
        names.append(key.name() or "")
    return names or [""]


def _route_datastore_to(host: str, port: int, app: str) -> None:
    """Send this process's datastore_v3 calls for app to the App Engine API at host:port."""
    from google.appengine.api import apiproxy_stub_map
    from google.appengine.runtime import default_api_stub

    os.environ["API_HOST"], os.environ["API_PORT"] = host, str(port)
    os.environ["GAE_APPLICATION"] = os.environ["APPLICATION_ID"] = app
    os.environ.setdefault("HTTP_X_APPENGINE_API_TICKET", "pullqueue-sweep")
    stub = default_api_stub.DefaultApiStub()
    proxy = apiproxy_stub_map.apiproxy
    if proxy.GetStub("datastore_v3") is None:
        proxy.RegisterStub("datastore_v3", stub)
    else:
        proxy.ReplaceStub("datastore_v3", stub)
