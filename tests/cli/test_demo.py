"""`pullqueue demo` pointed at a queue a user already fills: it refuses and deletes nothing."""

from __future__ import annotations

import json
import signal
import subprocess
import uuid
from pathlib import Path

from pullqueue import Queue, Task, connect
from tests.cli.support import PULLQUEUE, clean_env, interruptible, one_error_line, run
from tests.support.emulators import shared_emulator_host


def test_the_demo_refuses_a_queue_that_holds_tasks_and_deletes_none(tmp_path: Path) -> None:
    host = shared_emulator_host("pubsub")
    project = f"pq-{uuid.uuid4().hex[:12]}"
    backend = connect(f"pubsub://{project}", auto_create=True, dedupe_url="memory://")
    try:
        users = Queue("orders", backend)
        users.add([Task(f"order {i}".encode(), name=f"order-{i}") for i in range(50)])
        env = clean_env(PUBSUB_EMULATOR_HOST=host, PULLQUEUE_URL=f"pubsub://{project}")

        done = run("demo", "--queue", "orders", "--tasks", "100", cwd=tmp_path, env=env)

        assert done.returncode == 2, done.stdout + done.stderr
        line = one_error_line(done.stderr)
        assert "--queue" in line and "already holds tasks" in line and "unused name" in line
        kept = users.lease(30, 1000)
        assert sorted(t.name or "" for t in kept) == sorted(f"order-{i}" for i in range(50))
    finally:
        backend.close()


def test_ctrl_c_stops_the_demo_and_the_next_run_clears_what_it_left(tmp_path: Path) -> None:
    host = shared_emulator_host("pubsub")
    project = f"pq-{uuid.uuid4().hex[:12]}"
    env = clean_env(PUBSUB_EMULATOR_HOST=host, PULLQUEUE_DEMO_PROJECT=project)
    process = subprocess.Popen(
        [PULLQUEUE, "demo", "--tasks", "5000", "--concurrency", "1", "--batch-size", "10"],
        cwd=tmp_path,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=interruptible,
    )
    try:
        assert process.stderr is not None
        note = process.stderr.readline()  # what the demo does about task names, first
        assert note.startswith("task names: kept unique by an in-process registry"), note
        first = process.stderr.readline()
        while first and not first.startswith("migration finished"):  # the note's wrapped end
            first = process.stderr.readline()
        # the workers, 10 tasks a call, are far from done
        assert first.startswith("migration finished: 5000 tasks"), first
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130, err
    assert "interrupted: tasks this demo added may remain" in err and "Traceback" not in err

    again = run("demo", "--tasks", "200", "--json", cwd=tmp_path, env=env, timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    result = json.loads(again.stdout)
    assert result["ok"] is True and result["leftovers_cleared"] > 0
    assert result["totals"]["processed"] == 200 and result["migration"]["interrupted"] is False
