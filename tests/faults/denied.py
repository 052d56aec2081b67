"""A handler module that makes its worker process a service account without publish rights.

Imported by `pullqueue work` before it connects, it makes every Pub/Sub Publish call fail as
Pub/Sub answers an account lacking roles/pubsub.publisher (the emulator has no IAM), then
handles tasks as tests/faults/handlers.py:record does.
"""

from __future__ import annotations

from typing import Any

from google.api_core import exceptions
from google.pubsub_v1 import PublisherClient

from tests.faults.handlers import record

__all__ = ["record"]


def _denied(self: PublisherClient, *args: Any, **kwargs: Any) -> Any:
    raise exceptions.PermissionDenied(
        "User not authorized to perform this action. (pubsub.topics.publish)"
    )


PublisherClient.publish = _denied  # type: ignore[method-assign]
