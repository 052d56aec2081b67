"""The Pub/Sub backend, `pubsub://PROJECT`: legacy pull-queue semantics on topics and subscriptions.

One concern a module: backend (the Backend calls), wire (message format), layout (resource ids),
rpc and errors (bounded calls, typed failures), leases and keeper (held leases), provision.
"""

from pullqueue.adapters.pubsub.backend import PubSubBackend, from_url

__all__ = ["PubSubBackend", "from_url"]
