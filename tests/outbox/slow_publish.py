"""A PULLQUEUE_PLUGINS module for the crash test's bridge: Pub/Sub adds pause before and after,
widening the moments a SIGKILL lands between a commit and its publish."""

from __future__ import annotations

from pullqueue.adapters.pubsub import PubSubBackend
from tests.outbox.crash_worker import paused

PubSubBackend.add = paused(PubSubBackend.add)  # type: ignore[method-assign]
