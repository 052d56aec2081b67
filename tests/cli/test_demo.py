"""`pullqueue demo` pointed at a queue a user already fills: it refuses and deletes nothing."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from pullqueue import Queue, Task, connect
from tests.cli.support import clean_env, one_error_line, run
from tests.support.emulators import shared_emulator_host


@pytest.mark.parametrize("how", ["--url", "PULLQUEUE_URL"])
def test_the_demo_refuses_a_queue_that_holds_tasks_and_deletes_none(
    tmp_path: Path, how: str
) -> None:
    host = shared_emulator_host("pubsub")
    project = f"pq-{uuid.uuid4().hex[:12]}"
    backend = connect(f"pubsub://{project}", auto_create=True)
    try:
        users = Queue("orders", backend)
        users.add([Task(f"order {i}".encode(), name=f"order-{i}") for i in range(50)])
        url = f"pubsub://{project}"
        args = ["demo", "--queue", "orders", "--tasks", "100"]
        env = clean_env(PUBSUB_EMULATOR_HOST=host)
        if how == "--url":
            args += ["--url", url]
        else:
            env["PULLQUEUE_URL"] = url

        done = run(*args, cwd=tmp_path, env=env)

        assert done.returncode == 2, done.stdout + done.stderr
        line = one_error_line(done.stderr)
        assert "--queue" in line and "already holds tasks" in line and "unused name" in line
        kept = users.lease(30, 1000)
        assert sorted(t.name or "" for t in kept) == sorted(f"order-{i}" for i in range(50))
    finally:
        backend.close()


def test_the_demo_reports_as_json_for_scripts(tmp_path: Path) -> None:
    done = run("demo", "--tasks", "200", "--seed", "1", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["ok"] is True and result["totals"]["processed"] == 200
    assert result["migration"]["interrupted"] is False
