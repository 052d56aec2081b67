"""What each ported client is made to do, and the outputs read back from it afterwards.

A scenario drives the client the way its app would (a request to a handler, a cron call, a
worker loop) through `Run.module`, and returns what the client produced: entities it wrote,
what its handlers returned or answered, and the tasks it left in the queue.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

from tests.clients import frameworks
from tests.clients.harness import ClientTime, Run, until_stopped

WINDOWS_START = 1_700_000_001.0
"""When the Titan scenarios' deletions happen: long ago, so every window is due, and the same
windows (tags) on every backend."""


def _left_in_queue(run: Run, queue: str) -> list[tuple[Any, ...]]:
    """The tasks still in the queue once the client is done (leased here, not recorded)."""
    began = time.monotonic()
    run.advance(7200)
    calls, legacy = len(run.calls), run.legacy_calls
    left = run.taskqueue.Queue(queue).lease_tasks(60, 1000)
    del run.calls[calls:]
    run.legacy_calls = legacy
    run.checking += time.monotonic() - began
    return sorted((t.tag, t.payload) for t in left)


def pull_counter(run: Run) -> dict[str, Any]:
    """Visitors post counter keys; the worker drains the queue one tag at a time."""
    client = run.module
    for key in ["dogs", "cats", "dogs", "fish", "cats", "dogs"]:
        handler = client.CounterHandler(frameworks.Request({"key": key}))
        handler.post()
        assert handler.redirected_to == "/"
        run.advance(1)
    client.time = ClientTime(run)
    stopped = until_stopped(client.CounterWorker(frameworks.Request()).get)
    counts = sorted((c.key.id(), c.count) for c in client.Counter.query())
    return {"worker": stopped, "counts": counts, "left": _left_in_queue(run, "pullq")}


def visit_counter(run: Run) -> dict[str, Any]:
    """Visits are queued as they come; the /log cron tallies them into visitor counts."""
    client = run.module
    for address in ["10.0.0.1", "10.0.0.2", "10.0.0.1", "10.0.0.3", "10.0.0.1"]:
        client.store_visit(address, "test-agent")
        run.advance(1)
    replies = []
    for _ in range(2):
        try:
            replies.append(client.log_visitors())
        except Exception as exc:  # what the cron request would end with
            replies.append(f"raised {type(exc).__name__}")
        run.advance(1)
    counts = sorted((c.visitor, c.counter) for c in client.VisitorCount.query())
    return {"replies": replies, "counts": counts, "left": _left_in_queue(run, "pullq")}


def subscription_worker(run: Run) -> dict[str, Any]:
    """Subscription updates queued per user; the push-queue handler is called once per tag."""
    client = run.module
    queue = run.taskqueue.Queue("tbans-update-subscriptions")
    for user, token in [("u1", None), ("u1", "tok-a"), ("u2", None), ("u1", None)]:
        payload = json.dumps({"user_id": user, "token": token})
        queue.add(run.taskqueue.Task(payload=payload, method="PULL", tag=user))
        run.advance(1)
    del run.calls[:]
    frameworks.SubscriptionController.calls = []
    frameworks.SubscriptionController.outcomes = [False, True, RuntimeError("upstream down")]
    statuses = []
    for tag in ["u1", "u1", "u2", "u2", "u3"]:
        handler = client.SubscriptionWorkerHandler(frameworks.Request({"tag": tag}))
        try:
            handler.post()
            statuses.append(handler.response.status)
        except Exception as exc:  # the push queue retries the request
            statuses.append(f"raised {type(exc).__name__}")
        run.advance(1)
    return {
        "statuses": statuses,
        "controller": list(frameworks.SubscriptionController.calls),
        "left": _left_in_queue(run, "tbans-update-subscriptions"),
    }


def titan_dirs(run: Run) -> dict[str, Any]:
    """Files deleted in three 10-second windows; the consumer handles one window per call."""
    client = run.module
    # Outside the development server: the producer only queues, the consumer runs apart.
    os.environ["SERVER_SOFTWARE"] = "Google App Engine/1.9.0"
    client.time = ClientTime(run, start=WINDOWS_START)
    client.DirService.updates = []
    paths = ["/a/b/one", "/a/c/two", "/d/three", "/a/b/four", "/e/f/five"]
    for path, pause in zip(paths, [1, 12, 1, 12, 1], strict=True):
        client.DirManagerMixin(path, namespace=None).add_titan_dir_delete_task()
        run.advance(pause)
    windows: list[Any] = []
    for _ in range(5):
        try:
            modified = client.DirTaskConsumer().process_next_window()
        except Exception as exc:  # the cron request fails; the next one goes on
            windows.append(f"raised {type(exc).__name__}")
            continue
        windows.append(sorted(m.path for m in modified) if modified else [])
    return {
        "windows": windows,
        "updates": list(client.DirService.updates),
        "left": _left_in_queue(run, "titan-dirs"),
    }


def titan_big_window(run: Run) -> dict[str, Any]:
    """A burst of 1,200 deletions in one 10-second window between two small windows: the
    consumer leases 1,000 by the oldest tag, then the rest of that window by its tag."""
    client = run.module
    os.environ["SERVER_SOFTWARE"] = "Google App Engine/1.9.0"
    client.time = ClientTime(run, start=WINDOWS_START)
    client.DirService.updates = []
    for count, pause in [(30, 10), (1200, 10), (30, 10)]:
        for i in range(count):
            client.DirManagerMixin(f"/w{run.advanced:.0f}/f{i}").add_titan_dir_delete_task()
        run.advance(pause)
    windows = []
    for _ in range(4):
        modified = client.DirTaskConsumer().process_next_window()
        windows.append(sorted({m.path.split("/")[1] for m in modified}) if modified else [])
        windows.append(len(modified))
    return {"windows": windows, "left": _left_in_queue(run, "titan-dirs")}


def subscription_cron_pass(run: Run) -> dict[str, Any]:
    """A cron pass over 40 users' tags, of which 10 have updates queued: the handler leases by
    each named tag, and 30 of those leases come back empty (the shape of a per-tag cron)."""
    client = run.module
    queue = run.taskqueue.Queue("tbans-update-subscriptions")
    users = [f"user-{i}" for i in range(40)]
    for user in users[::4]:
        payload = json.dumps({"user_id": user, "token": None})
        for _ in range(2):  # the same update twice: the handler keeps one, deletes the rest
            queue.add(run.taskqueue.Task(payload=payload, method="PULL", tag=user))
    run.advance(1)
    del run.calls[:]
    frameworks.SubscriptionController.calls = []
    frameworks.SubscriptionController.outcomes = []
    statuses = []
    for user in users:
        handler = client.SubscriptionWorkerHandler(frameworks.Request({"tag": user}))
        try:
            handler.post()
            statuses.append(handler.response.status)
        except Exception as exc:  # the push queue retries the request
            statuses.append(f"raised {type(exc).__name__}")
    return {
        "statuses": statuses,
        "controller": list(frameworks.SubscriptionController.calls),
        "left": _left_in_queue(run, "tbans-update-subscriptions"),
    }


SCENARIOS: dict[str, tuple[str, Callable[[Run], dict[str, Any]]]] = {
    "pull_counter": ("pull_counter", pull_counter),
    "visit_counter": ("visit_counter", visit_counter),
    "subscription_worker": ("subscription_worker", subscription_worker),
    "titan_dirs": ("titan_dirs", titan_dirs),
    "titan_big_window": ("titan_dirs", titan_big_window),
    "subscription_cron_pass": ("subscription_worker", subscription_cron_pass),
}
"""Scenario name -> (the ported client it drives, the scenario)."""
