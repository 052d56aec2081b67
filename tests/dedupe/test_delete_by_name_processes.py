"""A task deleted by name in one process is never handed out by another (Firestore registry).

Three real processes run legacy code through `pullqueue.compat.taskqueue`, configured only by
the environment (`PULLQUEUE_URL`, `PULLQUEUE_DEDUPE_URL`), on the Pub/Sub and Firestore
emulators: a producer adds two named tasks, a canceller that never leased anything deletes one
by name, and a worker drains the queue.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from tests.support.emulators import shared_emulator_host

PRODUCER = """
from pullqueue.compat import taskqueue
q = taskqueue.Queue('cancels')
q.add([taskqueue.Task(payload='a', method='PULL', name='job-41'),
       taskqueue.Task(payload='b', method='PULL', name='job-42')])
"""
CANCELLER = """
import json
from pullqueue.compat import taskqueue
q = taskqueue.Queue('cancels')
first = q.delete_tasks(taskqueue.Task(name='job-42')).was_deleted
again = q.delete_tasks(taskqueue.Task(name='job-42')).was_deleted
print(json.dumps([first, again]))
"""
WORKER = """
import json
from pullqueue.compat import taskqueue
q = taskqueue.Queue('cancels')
names, empty = [], 0
while empty < 3:
    tasks = q.lease_tasks(60, 10, deadline=2)
    empty = 0 if tasks else empty + 1
    names += [t.name for t in tasks]
    if tasks:
        q.delete_tasks(tasks)
print(json.dumps(sorted(names)))
"""


def _run(script: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


@pytest.mark.slow
def test_a_delete_by_name_in_one_process_reaches_every_other() -> None:
    shared_emulator_host("pubsub")
    shared_emulator_host("firestore")
    env = dict(os.environ)
    env.update(
        PULLQUEUE_URL=f"pubsub://pq-{uuid.uuid4().hex[:12]}",
        PULLQUEUE_DEDUPE_URL=(
            f"firestore://pullqueue-test?collection=names-{uuid.uuid4().hex[:12]}"
        ),
        PULLQUEUE_AUTO_CREATE="1",
    )
    _run(PRODUCER, env)
    assert json.loads(_run(CANCELLER, env)) == [True, False]
    assert json.loads(_run(WORKER, env)) == ["job-41"]
