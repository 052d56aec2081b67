"""`pullqueue migrate` as users run it: a subprocess between durable file-backed queues."""

from __future__ import annotations

import datetime as dt
import json
import signal
import sqlite3
import subprocess
import time
import uuid
from pathlib import Path

from pullqueue import Task
from tests.migrate.clitools import file_queue, migrate_command, popen_options, run_migrate
from tests.support.emulators import shared_emulator_host


def test_migrate_moves_everything_and_writes_the_report(tmp_path: Path) -> None:
    source = file_queue(tmp_path / "src.db")
    for start in range(0, 3000, 100):
        source.add(
            [Task(f"p{i}", name=f"t{i}", tag=f"g{i % 4}") for i in range(start, start + 100)]
        )
    later = time.time() + 3600
    source.add(
        [Task(b"later", name="later", eta=dt.datetime.fromtimestamp(later, tz=dt.timezone.utc))]
    )

    done = run_migrate(tmp_path, "--report", "report.json")

    assert done.returncode == 0, done.stderr
    dest = file_queue(tmp_path / "dst.db")
    moved = {t.name: t for t in dest.backend.list_tasks("jobs")}  # type: ignore[attr-defined]
    assert len(moved) == 3001 and source.stats().tasks == 0
    assert moved["t7"].payload == b"p7" and moved["t7"].tag == "g3"
    assert abs(moved["later"].eta_posix - later) < 1e-3
    report = json.loads((tmp_path / "report.json").read_text())
    assert (report["leased"], report["listed"], report["written"]) == (3000, 1, 3001)
    assert report["deleted"] == 3001 and report["ok"] is True
    assert "written           3001" in done.stdout
    assert "migrating" not in done.stderr  # no progress bar when stderr is not a terminal
    assert list(tmp_path.glob("pullqueue-migrate-jobs-*.journal"))  # journal on by default


def test_a_rerun_after_success_moves_nothing_and_succeeds(tmp_path: Path) -> None:
    source = file_queue(tmp_path / "src.db")
    source.add([Task(b"x", name=f"t{i}") for i in range(10)])
    assert run_migrate(tmp_path).returncode == 0
    again = run_migrate(tmp_path, "--report", "again.json")
    assert again.returncode == 0, again.stderr
    assert json.loads((tmp_path / "again.json").read_text())["written"] == 0


def test_dry_run_changes_nothing(tmp_path: Path) -> None:
    source = file_queue(tmp_path / "src.db")
    source.add([Task(b"x", name=f"t{i}", tag="a") for i in range(20)])
    done = run_migrate(tmp_path, "--dry-run", "--report", "dry.json")
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "dry.json").read_text())
    assert report["dry"]["tasks"] == 20 and report["dry"]["by_tag"] == {"a": 20}
    assert report["dry_run"] is True and report["leased"] == 0
    assert "20 tasks would move" in done.stdout
    assert source.stats().tasks == 20
    assert all(t.retry_count == 0 for t in source.backend.list_tasks("jobs"))  # type: ignore[attr-defined]
    assert not list(tmp_path.glob("*.journal"))


def test_a_task_the_destination_refuses_fails_the_command(tmp_path: Path) -> None:
    source = file_queue(tmp_path / "src.db")
    source.add([Task(b"x", name=f"t{i}") for i in range(5)])
    with sqlite3.connect(tmp_path / "src.db") as db:  # an ETA beyond the 30-day limit
        db.execute(
            "INSERT INTO tasks (queue, name, payload, tag, eta_usec) VALUES (?,?,?,?,?)",
            ("jobs", "too-late", b"?", None, int((time.time() + 40 * 86400) * 1e6)),
        )
    done = run_migrate(tmp_path, "--report", "r.json")
    assert done.returncode == 1
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["failed"] == 1 and report["failures"][0]["task"] == "too-late"
    assert "InvalidEtaError" in report["failures"][0]["error"]
    assert report["written"] == 5 and report["ok"] is False
    assert [t.name for t in source.backend.list_tasks("jobs")] == ["too-late"]  # type: ignore[attr-defined]


def test_an_unknown_scheme_is_refused_before_anything_moves(tmp_path: Path) -> None:
    source = file_queue(tmp_path / "src.db")
    source.add(Task(b"x", name="t"))
    done = run_migrate(tmp_path, to_url="nosuch://x")
    assert done.returncode == 2
    assert "unknown URL scheme 'nosuch'" in done.stderr
    assert source.stats().tasks == 1 and not list(tmp_path.glob("*.journal"))


def test_the_same_queue_on_both_sides_is_refused(tmp_path: Path) -> None:
    done = run_migrate(tmp_path, to_url=f"filequeue://{tmp_path / 'src.db'}")
    assert done.returncode == 2 and "same queue" in done.stderr


def test_follow_drains_while_producers_write_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    source = file_queue(tmp_path / "src.db")
    process = subprocess.Popen(
        migrate_command(tmp_path, "--follow", "--report", "follow.json"),
        **popen_options(tmp_path),
    )
    dest = file_queue(tmp_path / "dst.db")
    try:
        for batch in range(6):
            source.add([Task(b"x", name=f"b{batch}-{i}") for i in range(100)])
            time.sleep(0.2)
        deadline = time.monotonic() + 30
        while dest.stats().tasks < 600 and time.monotonic() < deadline:
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 0, stderr
    assert "SIGTERM: finishing the batch in flight" in stderr
    report = json.loads((tmp_path / "follow.json").read_text())
    assert report["stopped"] == "stop requested" and report["follow"] is True
    assert report["written"] == 600 and dest.stats().tasks == 600
    assert source.stats().tasks == 0


def test_an_unprovisioned_destination_is_refused_before_anything_moves(tmp_path: Path) -> None:
    source = file_queue(tmp_path / "src.db")
    source.add([Task(b"x", name=f"t{i}") for i in range(3)])
    done = run_migrate(
        tmp_path,
        to_url=f"pubsub://pq-missing-{uuid.uuid4().hex[:8]}",
        PUBSUB_EMULATOR_HOST=shared_emulator_host("pubsub"),
        PULLQUEUE_AUTO_CREATE="0",
    )
    assert done.returncode == 1  # as `stats`, `tasks` and `work` on a queue not provisioned
    assert "preflight on the destination" in done.stderr
    assert "nothing was moved" in done.stderr
    assert all(t.retry_count == 0 for t in source.backend.list_tasks("jobs"))  # type: ignore[attr-defined]


def test_progress_bar_on_request(tmp_path: Path) -> None:
    source = file_queue(tmp_path / "src.db")
    source.add([Task(b"x", name=f"t{i}") for i in range(50)])
    done = run_migrate(tmp_path, "--progress")
    assert done.returncode == 0
    assert "migrating" in done.stderr and "50/50" in done.stderr


def test_a_second_sigint_aborts_and_a_rerun_finishes(tmp_path: Path) -> None:
    source = file_queue(tmp_path / "src.db")
    for start in range(0, 3000, 100):
        source.add([Task(b"x", name=f"t{i}") for i in range(start, start + 100)])
    slow = f"filequeue://{tmp_path / 'dst.db'}?add_delay=0.1"  # a second per batch of 1000
    process = subprocess.Popen(
        migrate_command(tmp_path, "--follow", to_url=slow),
        **popen_options(tmp_path),
    )
    try:
        while source.stats().leased == 0:  # wait until a batch is in flight
            time.sleep(0.01)
        process.send_signal(signal.SIGINT)
        assert process.stderr is not None
        assert "SIGINT: finishing the batch in flight" in process.stderr.readline()
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 130, stderr
    assert "run the same command again" in stderr
    assert source.stats().tasks > 0
    done = run_migrate(tmp_path, to_url=slow)  # waits at most for the aborted run's leases
    assert done.returncode == 0, done.stderr
    assert source.stats().tasks == 0
    assert file_queue(tmp_path / "dst.db").stats().tasks == 3000


def test_pubsub_without_a_name_registry_is_refused_in_one_line(tmp_path: Path) -> None:
    source = file_queue(tmp_path / "src.db")
    source.add([Task(b"x", name=f"t{i}") for i in range(3)])
    env = {
        key: value
        for key, value in popen_options(tmp_path)["env"].items()
        if key not in ("PULLQUEUE_DEDUPE_URL", "PULLQUEUE_ACCEPT_DUPLICATE_NAMES")
    }
    done = subprocess.run(
        migrate_command(tmp_path, to_url=f"pubsub://pq-{uuid.uuid4().hex[:8]}"),
        cwd=tmp_path,
        env={**env, "PUBSUB_EMULATOR_HOST": shared_emulator_host("pubsub")}
        | {"PULLQUEUE_AUTO_CREATE": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr  # configuration: a usage error
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "PULLQUEUE_DEDUPE_URL" in errors[0] and "PULLQUEUE_ACCEPT_DUPLICATE_NAMES=1" in errors[0]
    assert "nothing was moved" in errors[0]
    left = list(source.backend.list_tasks("jobs"))  # type: ignore[attr-defined]
    assert sorted(t.name for t in left) == ["t0", "t1", "t2"]
    assert all(t.retry_count == 0 for t in left)
