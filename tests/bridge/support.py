"""Starting a bridge in this process and pointing Google's unmodified Python SDK at it.

`sdk_through_bridge` does what the App Engine runtime does for an app: it sets API_HOST,
API_PORT and the security ticket, and registers the SDK's own HTTP API stub (default_api_stub)
for the taskqueue service, so `google.appengine.api.taskqueue` posts its calls to the bridge.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from google.appengine.api import apiproxy_stub_map
from google.appengine.runtime import default_api_stub

from pullqueue.adapters.base import Backend
from pullqueue.bridge import BackgroundBridge, Bridge

TICKET = "app-id/default.v1.instance-1"


@contextmanager
def running_bridge(backend: Backend, **options: Any) -> Iterator[BackgroundBridge]:
    """A Bridge over backend served on a free loopback port of this process."""
    server = BackgroundBridge(Bridge(backend, **options))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def use_ticket_in_this_thread() -> None:
    """What the runtime's request middleware does in each request thread."""
    default_api_stub.DefaultApiStub.SetUseRequestSecurityTicketForThread(True)


@contextmanager
def sdk_through_bridge(port: int, ticket: str = TICKET, *, fresh: bool = True) -> Iterator[Any]:
    """The SDK's taskqueue calls go to the bridge on port (a fresh API proxy map unless
    fresh=False, which adds the bridge to the current one, e.g. a testbed's datastore)."""
    saved_env = {
        k: os.environ.get(k) for k in ("API_HOST", "API_PORT", "HTTP_X_APPENGINE_API_TICKET")
    }
    saved_map = apiproxy_stub_map.apiproxy
    os.environ.update(API_HOST="127.0.0.1", API_PORT=str(port), HTTP_X_APPENGINE_API_TICKET=ticket)
    stub = default_api_stub.DefaultApiStub()
    if fresh:
        apiproxy_stub_map.apiproxy = apiproxy_stub_map.APIProxyStubMap()
    proxy = apiproxy_stub_map.apiproxy
    if proxy.GetStub("taskqueue") is None:
        proxy.RegisterStub("taskqueue", stub)
    else:
        proxy.ReplaceStub("taskqueue", stub)
    use_ticket_in_this_thread()
    try:
        yield stub
    finally:
        apiproxy_stub_map.apiproxy = saved_map
        stub.thread_pool.shutdown(wait=False)
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
