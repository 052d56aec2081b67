"""The App Engine service bridge for the taskqueue service (`pullqueue bridge`).

Both App Engine SDKs (Python's appengine-python-standard, Go's google.golang.org/appengine)
post their API calls to `http://API_HOST:API_PORT/rpc_http`; pointing them at a Bridge lets an
unmodified app lease from any pullqueue backend (docs/bridge.md). Needs `pullqueue[bridge]`.
"""

from __future__ import annotations

from pullqueue.bridge.app import Bridge
from pullqueue.bridge.server import BackgroundBridge, serve
from pullqueue.bridge.taskqueue import SERVED, TaskQueueService

__all__ = ["SERVED", "BackgroundBridge", "Bridge", "TaskQueueService", "serve"]
