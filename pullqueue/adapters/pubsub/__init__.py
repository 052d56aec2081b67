"""The Pub/Sub backend, `pubsub://PROJECT`: legacy pull-queue semantics on topics and subscriptions.

One concern a module: backend (the Backend calls), wire (message format), layout (resource ids,
shard hash), claims (shard tokens), rpc and errors (bounded calls, typed failures), leases and
keeper (held leases), provision. The
backend and its Google client load on first use, so `layout` (used by `pullqueue plan`) and the
command line start without importing google-cloud-pubsub.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pullqueue.adapters.pubsub.backend import PubSubBackend, from_url

__all__ = ["PubSubBackend", "from_url"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("pullqueue.adapters.pubsub.backend"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
