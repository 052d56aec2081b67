"""A WSGI handler that runs one sweep, for an App Engine app's cron.yaml or Cloud Scheduler.

Mounted in the app (which can reach its datastore through the App Engine API), it sweeps the
outbox on the process-wide backend; App Engine strips the cron and scheduler headers it checks
from outside requests, so only the app's own schedulers can run it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from pullqueue.config import Settings
from pullqueue.outbox.sweep import sweep
from pullqueue.registry import default_backend

SCHEDULER_HEADERS = ("HTTP_X_APPENGINE_CRON", "HTTP_X_CLOUDSCHEDULER")
"""Headers App Engine sets on requests of cron.yaml and Cloud Scheduler, and strips from others."""


def sweep_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """Run one sweep (appengine:// datastore, the configured backend); answer its report as
    JSON: 200 when every staged task was settled, 500 when some stay staged, 403 from outside."""
    if not any(environ.get(header) == "true" for header in SCHEDULER_HEADERS):
        start_response("403 Forbidden", [("Content-Type", "text/plain")])
        return [b"only cron.yaml or Cloud Scheduler may run the sweep\n"]
    from pullqueue.outbox.appengine import AppEngineStore

    settings = Settings()
    report = sweep(
        AppEngineStore(settings.outbox_datastore or "appengine://"),
        default_backend(),
        grace_seconds=settings.sweep_grace_seconds,
        lock_seconds=settings.sweep_lock_seconds,
    )
    status = "500 Internal Server Error" if report.failed else "200 OK"
    start_response(status, [("Content-Type", "application/json")])
    return [json.dumps(report.as_dict()).encode("utf-8")]
