"""pullqueue: App Engine pull-queue semantics on Pub/Sub, with the legacy queue reachable too.

One `Queue` interface over several backends chosen by URL (`memory://`, `pubsub://PROJECT`,
`cloudtasks://PROJECT/LOCATION`, `appengine://`), so workers keep their semantics across the move.
"""

from __future__ import annotations

from pullqueue.adapters.base import Backend
from pullqueue.config import Settings
from pullqueue.errors import *  # noqa: F403
from pullqueue.errors import __all__ as _error_names
from pullqueue.queue import Queue
from pullqueue.registry import connect, known_schemes, register
from pullqueue.task import QueueStats, Task

__version__ = "0.1.0"

__all__ = [
    "Backend",
    "Queue",
    "QueueStats",
    "Settings",
    "Task",
    "connect",
    "known_schemes",
    "register",
    *_error_names,
]
