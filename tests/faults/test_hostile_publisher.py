"""A foreign publisher's hostile messages among ordinary tasks, served by `pullqueue work`.

The worker process must serve every ordinary task and every hostile one it can (bad attribute
ignored), set the unservable one aside on the dead-letter topic, name each in a warning by its
message id, and keep running.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from google.auth.credentials import AnonymousCredentials
from google.pubsub_v1 import PublisherClient, SubscriberClient

from tests.faults.harness import Fleet, fill, new_project, size
from tests.support.faultreport import record

pytestmark = pytest.mark.faults

SERVED = {
    "retry-limit-superscript": {"retry_limit": "\u00b2"},
    "retry-limit-5000-digits": {"retry_limit": "9" * 5000},
    "eta-garbage": {"eta": "garbage"},
    "name-esc-newline": {"task_name": "x\x1b[2J\nevent=forged level=error"},
    "name-600": {"task_name": "n" * 600},
}
SET_ASIDE = {"tag-600": {"tag": "t" * 600}}


def test_hostile_messages_do_not_stop_the_worker(emulator: str, tmp_path: Path) -> None:
    tasks = size("PULLQUEUE_FAULTS_HOSTILE_TASKS", 300)
    project = new_project()
    payloads = fill(project, "mixed", tasks // 2)
    publisher = PublisherClient(credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
    subscriber = SubscriberClient(credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
    topic = f"projects/{project}/topics/mixed"
    ids = {}
    for payload, attributes in {**SERVED, **SET_ASIDE}.items():
        response = publisher.publish(
            topic=topic, messages=[{"data": payload.encode(), "attributes": attributes}]
        )
        ids[payload] = response.message_ids[0]
    fleet = Fleet(project, "mixed", tmp_path, emulator, options=("--concurrency", "4"))
    fleet.start()
    # More ordinary tasks from the foreign publisher (no attributes at all) while it runs.
    rest = [f"late{i}" for i in range(tasks - tasks // 2)]
    publisher.publish(topic=topic, messages=[{"data": p.encode()} for p in rest])
    started = time.time()
    try:
        handled = fleet.wait_for([*payloads, *rest, *SERVED], timeout=120)
        assert fleet.alive() == fleet.processes, fleet.logs()
    finally:
        fleet.stop()
        publisher.transport.close()  # type: ignore[no-untyped-call]

    logs = fleet.logs(tail=None)
    for payload, message_id in ids.items():
        assert f"message_id={message_id} " in logs, f"no warning names {payload}'s message"
    assert "\x1b" not in logs
    assert "\nevent=forged" not in logs
    dead = subscriber.pull(
        subscription=f"projects/{project}/subscriptions/mixed-dead-letter", max_messages=10
    )
    subscriber.transport.close()  # type: ignore[no-untyped-call]
    assert [m.message.data for m in dead.received_messages] == [b"tag-600"]
    assert handled.counts["tag-600"] == 0
    lost = handled.lost([*payloads, *rest, *SERVED])
    record(
        "hostile publisher (5 bad attributes, 1 unservable tag)",
        tasks=tasks + len(SERVED) + len(SET_ASIDE),
        lost=len(lost),
        duplicated=handled.duplicated(),
        recovery_seconds=None,
        set_aside=len(dead.received_messages),
        drain_seconds=round(max(stamp for stamp, _ in handled.done) - started, 1),
    )
    assert not lost
