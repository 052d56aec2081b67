"""`pullqueue sweep` as cron runs it: a process of its own, the datastore over the App Engine API.

The datastore is the SDK's own stub served over /rpc_http; the queue is on the Pub/Sub emulator.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.appengine.datastore import datastore_pb

from pullqueue.outbox.appengine import entity_pb
from pullqueue.outbox.layout import StagedTask, new_task_name
from tests.support.datastore_server import APP_ID, DatastoreServer
from tests.support.emulators import shared_emulator_host


@pytest.fixture
def server() -> Iterator[DatastoreServer]:
    served = DatastoreServer().start()
    try:
        yield served
    finally:
        served.stop()


def stage(server: DatastoreServer, payload: bytes, age: float) -> StagedTask:
    staged = StagedTask(
        "pulls", new_task_name(), payload, "t", None, round((time.time() - age) * 1_000_000)
    )
    request = datastore_pb.PutRequest()
    request.entity.add().CopyFrom(entity_pb(staged, APP_ID, None))
    server.stub.MakeSyncCall("datastore_v3", "Put", request, datastore_pb.PutResponse())
    return staged


def run_sweep(*args: str, auto_create: str = "1") -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PULLQUEUE_SWEEP_LOCK_SECONDS": "1",
        "PUBSUB_EMULATOR_HOST": shared_emulator_host("pubsub"),
        "PULLQUEUE_AUTO_CREATE": auto_create,
        "PULLQUEUE_DEDUPE_URL": "memory://",
    }
    return subprocess.run(
        [sys.executable, "-c", "from pullqueue.cli import main; main()", "sweep", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_one_pass_publishes_what_is_past_the_grace_and_says_so_in_json(
    server: DatastoreServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pullqueue.adapters.pubsub import PubSubBackend

    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", shared_emulator_host("pubsub"))
    project = f"pq-{uuid.uuid4().hex[:12]}"
    url, datastore = f"pubsub://{project}", f"appengine://{server.host}?app={APP_ID}"
    old = stage(server, b"old", age=120)
    stage(server, b"young", age=0)
    done = run_sweep("--url", url, "--datastore", datastore, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["found"], report["published"], report["failed"]) == (1, 1, 0)
    backend = PubSubBackend(project, auto_create=True, accept_duplicate_names=True)
    try:
        leased = backend.lease("pulls", 60, 10)
        assert [(task.payload, task.name, task.tag) for task in leased] == [(b"old", old.name, "t")]
        again = run_sweep("--url", url, "--datastore", datastore, "--grace", "0")
        assert again.returncode == 0, again.stderr
        assert "1 staged past the grace period, 1 published" in again.stdout
    finally:
        backend.close()


def test_bad_input_is_a_usage_error_naming_the_option(server: DatastoreServer) -> None:
    missing = run_sweep("--url", "memory://")
    assert missing.returncode == 2
    assert "--datastore" in missing.stderr and "PULLQUEUE_OUTBOX_DATASTORE" in missing.stderr
    wrong = run_sweep("--url", "memory://", "--datastore", "mysql://x")
    assert wrong.returncode == 2 and "appengine://" in wrong.stderr
    negative = run_sweep("--url", "memory://", "--datastore", "appengine://", "--grace", "nan")
    assert negative.returncode == 2


def test_pullqueue_work_sweeps_by_itself_and_its_handler_gets_the_task(
    server: DatastoreServer, tmp_path: Path
) -> None:
    (tmp_path / "sink.py").write_text(
        "import os\n"
        "def handle(task):\n"
        "    with open(os.environ['SINK'], 'ab') as out:\n"
        "        out.write(task.payload + b'\\n')\n"
    )
    sink = tmp_path / "got"
    stage(server, b"swept", age=120)
    env = {
        **os.environ,
        "PUBSUB_EMULATOR_HOST": shared_emulator_host("pubsub"),
        "PULLQUEUE_AUTO_CREATE": "1",
        "PULLQUEUE_DEDUPE_URL": "memory://",
        "SINK": str(sink),
    }
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from pullqueue.cli import main; main()",
            "work",
            "pulls",
            "sink:handle",
            "--url",
            f"pubsub://pq-{uuid.uuid4().hex[:12]}",
            "--sweep-datastore",
            f"appengine://{server.host}?app={APP_ID}",
            "--sweep-period",
            "0.5",
            "--exit-when-idle",
            "4",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert sink.read_bytes() == b"swept\n"
    assert "event=sweep" in done.stderr and "published=1" in done.stderr


def test_a_task_that_cannot_be_published_stays_staged_and_the_pass_exits_1(
    server: DatastoreServer,
) -> None:
    stage(server, b"nowhere", age=120)
    project = f"pq-{uuid.uuid4().hex[:12]}"  # no topic there, and none made
    datastore = f"appengine://{server.host}?app={APP_ID}"
    done = run_sweep("--url", f"pubsub://{project}", "--datastore", datastore, auto_create="0")
    assert done.returncode == 1
    assert "1 staged task(s) not published, left staged" in done.stderr
    assert "pulls" in done.stderr
    time.sleep(1.1)  # its lock runs out: the next pass takes it
    again = run_sweep("--url", f"pubsub://{project}", "--datastore", datastore, "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["published"] == 1
