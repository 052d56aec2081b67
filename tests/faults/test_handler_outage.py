"""A handler that fails for a while (its downstream service is down), then recovers.

`pullqueue work --concurrency 4` over 10 tasks on an auto-created queue (dead-letter policy of
100 attempts); the handler raises while the outage lasts (PULLQUEUE_FAULTS_HANDLER_OUTAGE
seconds, 10 by default). Every task must end handled (none may vanish, and none may reach the
dead-letter subscription for so short an outage), after at most 15 handler calls each during the
outage and within 60 s of its end.
"""

from __future__ import annotations

import time
import warnings
from collections import Counter
from pathlib import Path

import pytest
from google.auth.credentials import AnonymousCredentials
from google.pubsub_v1 import SubscriberClient

from tests.faults.harness import Fleet, fill, new_project, size
from tests.support.faultreport import record

pytestmark = pytest.mark.faults

TASKS = 10


def test_a_handler_outage_loses_no_task(emulator: str, tmp_path: Path) -> None:
    outage = size("PULLQUEUE_FAULTS_HANDLER_OUTAGE", 10)
    project = new_project()
    payloads = fill(project, "outage", TASKS)
    marker = tmp_path / "downstream-is-down"
    marker.touch()
    fleet = Fleet(
        project,
        "outage",
        tmp_path,
        emulator,
        handler="tests.faults.handlers:outage",
        options=("--concurrency", "4"),
        environment={"FAULTS_OUTAGE": str(marker)},
    )
    subscriber = SubscriberClient(credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
    dead_letters = f"projects/{project}/subscriptions/outage-dead-letter"
    dead: set[str] = set()
    fleet.start()
    try:
        time.sleep(outage)
        marker.unlink()
        ended = time.time()
        deadline = time.monotonic() + 120
        while True:
            with warnings.catch_warnings():  # deprecated on Pub/Sub, still what an emulator needs
                warnings.simplefilter("ignore", DeprecationWarning)
                response = subscriber.pull(
                    subscription=dead_letters, max_messages=100, timeout=5, return_immediately=True
                )
            if response.received_messages:
                dead.update(m.message.data.decode() for m in response.received_messages)
                subscriber.acknowledge(
                    subscription=dead_letters,
                    ack_ids=[m.ack_id for m in response.received_messages],
                )
            handled = fleet.handled()
            if set(payloads) <= set(handled.counts) | dead:
                break
            assert time.monotonic() < deadline, f"tasks neither handled nor dead\n{fleet.logs()}"
            time.sleep(0.5)
        assert fleet.alive() == fleet.processes, fleet.logs()
    finally:
        fleet.stop()
        subscriber.transport.close()  # type: ignore[no-untyped-call]

    calls = Counter(payload for stamp, payload in handled.failed if stamp < ended)
    lost = [p for p in payloads if p not in handled.counts and p not in dead]
    done_after = [stamp for stamp, _ in handled.done]
    record(
        f"handler failing for {outage} s",
        tasks=TASKS,
        lost=len(lost),
        duplicated=handled.duplicated(),
        recovery_seconds=round(max(done_after) - ended, 1) if done_after else None,
        dead_lettered=len(dead),
        most_calls_per_task_during_outage=max(calls.values(), default=0),
    )
    assert not lost
    # Failed tasks wait longer and longer between attempts, so an outage of seconds uses up a
    # few of the queue's 100 delivery attempts, not all of them.
    assert not dead, f"{len(dead)} tasks dead-lettered by a {outage} s outage"
    assert max(calls.values(), default=0) <= 15
    assert done_after and max(done_after) - ended <= 60
