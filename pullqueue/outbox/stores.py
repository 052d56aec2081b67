"""Datastore URLs for the sweeper: which store a `pullqueue sweep` (or a periodic sweep) reads.

`appengine://` is the App Engine datastore API of this process (on App Engine, or a testbed);
`appengine://HOST:PORT` is that API served at HOST:PORT (the dev server's API port, the bridge's
`--upstream`); `datastore://PROJECT[/DATABASE]` is Cloud Datastore (Firestore in Datastore mode),
where google-cloud-ndb apps stage.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pullqueue.config import Settings
from pullqueue.errors import ConfigurationError
from pullqueue.outbox.sweep import OutboxStore

SCHEMES = "appengine://, appengine://HOST:PORT?app=APP_ID or datastore://PROJECT[/DATABASE]"


def connect_store(url: str | None = None, *, settings: Settings | None = None) -> OutboxStore:
    """The outbox store of url (default: PULLQUEUE_OUTBOX_DATASTORE)."""
    url = url or (settings or Settings()).outbox_datastore
    if not url:
        raise ConfigurationError(
            "no outbox datastore is configured: give --datastore (or set"
            f" PULLQUEUE_OUTBOX_DATASTORE) to {SCHEMES}"
        )
    scheme = urlsplit(url).scheme
    if scheme == "appengine":
        from pullqueue.outbox.appengine import AppEngineStore

        return AppEngineStore(url)
    if scheme == "datastore":
        from pullqueue.outbox.cloud import CloudDatastoreStore

        return CloudDatastoreStore(url)
    raise ConfigurationError(f"unknown outbox datastore URL {url!r}: expected {SCHEMES}")
