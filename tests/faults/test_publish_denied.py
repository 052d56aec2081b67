"""`pullqueue work` as a service account that may not publish: it keeps running and says why.

A worker publishes in two cases: to republish a task hidden until a far ETA before Pub/Sub
dead-letters it, and to set aside a message it cannot serve. Here every publish is refused with
PermissionDenied (tests/faults/denied.py; the emulator has no IAM), the queue's dead-letter
limit is 5 and a deferral lasts 1 s, so both cases come within seconds.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from google.auth.credentials import AnonymousCredentials
from google.pubsub_v1 import PublisherClient

from pullqueue import Queue, Task
from pullqueue.adapters.pubsub import PubSubBackend
from pullqueue.config import Settings
from tests.faults.harness import Fleet, new_project

pytestmark = pytest.mark.faults


def events(fleet: Fleet) -> list[str]:
    return re.findall(r"event=(\w+)", fleet.logs(tail=None))


def test_a_worker_denied_publish_keeps_serving_and_says_why(emulator: str, tmp_path: Path) -> None:
    project = new_project()
    settings = Settings(pubsub_max_delivery_attempts=5, pubsub_max_deferral=1)
    backend = PubSubBackend(project, settings=settings, auto_create=True)
    queue = Queue("denied", backend)
    queue.add([Task(f"t{i}") for i in range(20)])
    queue.add([Task(b"later", countdown=3600)])
    backend.close()
    publisher = PublisherClient(credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
    publisher.publish(
        topic=f"projects/{project}/topics/denied",
        messages=[{"data": b"unservable", "attributes": {"tag": "t" * 600}}],
    )
    publisher.transport.close()  # type: ignore[no-untyped-call]
    fleet = Fleet(
        project,
        "denied",
        tmp_path,
        emulator,
        handler="tests.faults.denied:record",
        environment={"PULLQUEUE_PUBSUB_MAX_DEFERRAL": "1"},
    )
    fleet.start()
    try:
        deadline = time.monotonic() + 60
        while not {"republish_denied", "set_aside_denied"} <= set(events(fleet)):
            assert fleet.alive(), f"the worker stopped\n{fleet.logs()}"
            assert time.monotonic() < deadline, f"no warning\n{fleet.logs()}"
            time.sleep(0.2)
        time.sleep(3)  # and it goes on leasing after saying so
        assert fleet.alive() == fleet.processes, fleet.logs()
        handled = fleet.handled()
    finally:
        fleet.stop()

    assert {payload for _, payload in handled.done} == {f"t{i}" for i in range(20)}
    logs = fleet.logs(tail=None)
    assert "roles/pubsub.publisher" in logs
    assert "Traceback" not in logs
    assert "event=lease_failed" not in logs
    assert all(process.returncode == 0 for process in fleet.processes), logs
