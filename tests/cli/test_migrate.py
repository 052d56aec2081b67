"""`pullqueue migrate` as a user meets it: Ctrl-C, bad paths, one queue spelled two ways, and a
damaged or world-readable journal, each through the installed executable."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from pullqueue import Queue, Task, connect
from tests.cli.support import PULLQUEUE, one_error_line, plugin_env, run
from tests.migrate.clitools import file_queue
from tests.support.emulators import shared_emulator_host

TASKS = 5000


def fill_pubsub(project: str, count: int) -> None:
    backend = connect(f"pubsub://{project}", auto_create=True, dedupe_url="memory://")
    try:
        queue = Queue("jobs", backend)
        for start in range(0, count, 100):
            queue.add([Task(b"x", name=f"t{i:05d}") for i in range(start, start + 100)])
    finally:
        backend.close()


def fill_file(path: Path, count: int) -> Queue:
    source = file_queue(path)
    for start in range(0, count, 100):
        source.add([Task(b"x", name=f"t{i:05d}") for i in range(start, min(count, start + 100))])
    return source


def count(path: Path) -> int:
    return file_queue(path).stats().tasks


def test_ctrl_c_during_a_pubsub_migration_reports_interrupted_and_a_rerun_finishes(
    tmp_path: Path,
) -> None:
    host = shared_emulator_host("pubsub")
    project = f"pq-{uuid.uuid4().hex[:12]}"
    fill_pubsub(project, TASKS)
    dest = tmp_path / "dst.db"
    command = [
        "migrate", "jobs", "--from", f"pubsub://{project}", "--to", f"filequeue://{dest}",
        "--quiet-period", "1", "--batch-size", "100",
    ]  # fmt: skip
    env = plugin_env(PUBSUB_EMULATOR_HOST=host)
    process = subprocess.Popen(
        [PULLQUEUE, *command, "--lease-rate", "4", "--report", "first.json", "--progress"],
        cwd=tmp_path,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while count(dest) < 300:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "nothing moved"
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()

    assert process.returncode == 130, out + err
    assert "INTERRUPTED" in out and "an unknown number of tasks" in out
    assert "[NOT OK]" in out and "run the same command again" in out
    first = json.loads((tmp_path / "first.json").read_text())
    assert first["interrupted"] is True and first["ok"] is False
    assert first["left_in_source"] is None  # Pub/Sub cannot count: unknown, not 0
    assert first["stopped"].startswith("interrupted")
    moved = count(dest)
    assert first["deleted"] == first["written"] == moved < TASKS
    bar = err.splitlines()[-1]
    assert bar.startswith("interrupted") and f"{moved}/?" in bar  # not a full bar

    again = run(*command, "--report", "again.json", cwd=tmp_path, env=env, timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    second = json.loads((tmp_path / "again.json").read_text())
    assert second["interrupted"] is False and second["ok"] is True
    assert count(dest) == TASKS
    assert first["deleted"] + second["deleted"] == TASKS
    left = connect(f"pubsub://{project}")
    try:
        assert Queue("jobs", left).lease(30, 1000) == []
    finally:
        left.close()


def test_a_migration_from_memory_warns_that_nothing_can_move(tmp_path: Path) -> None:
    done = run(
        "migrate", "jobs", "--from", "memory://", "--to", f"filequeue://{tmp_path / 'dst.db'}",
        "--no-journal", "--quiet-period", "0", cwd=tmp_path, env=plugin_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    warning = [line for line in done.stderr.splitlines() if line.startswith("Warning: ")]
    assert len(warning) == 1 and "--from memory://" in warning[0], done.stderr
    assert "cloudtasks://PROJECT/LOCATION" in warning[0]


def test_a_migration_into_memory_is_refused_since_the_tasks_would_vanish_at_exit(
    tmp_path: Path,
) -> None:
    fill_file(tmp_path / "queue.db", 20)
    source = f"filequeue://{tmp_path / 'queue.db'}"
    done = run(
        "migrate", "jobs", "--from", source, "--to", "memory://", "--quiet-period", "0",
        cwd=tmp_path, env=plugin_env(),
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    line = one_error_line(done.stderr)
    assert "--to" in line and "memory://" in line and "pubsub://PROJECT" in line
    assert count(tmp_path / "queue.db") == 20
    assert not list(tmp_path.glob("*.journal"))
    dry = run(
        "migrate", "jobs", "--from", source, "--to", "memory://", "--dry-run", "--json",
        cwd=tmp_path, env=plugin_env(),
    )  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["dry"]["tasks"] == 20


@pytest.mark.parametrize(
    ("option", "where"),
    [("--report", "missing/r.json"), ("--journal", "missing/j.journal"), ("--report", "src.db")],
)
def test_a_path_in_a_missing_directory_is_refused_before_anything_moves(
    tmp_path: Path, option: str, where: str
) -> None:
    fill_file(tmp_path / "queue.db", 20)
    if where == "src.db":  # a directory where the file should be
        (tmp_path / "src.db").mkdir()
    done = run(
        "migrate", "jobs", "--from", f"filequeue://{tmp_path / 'queue.db'}",
        "--to", f"filequeue://{tmp_path / 'dst.db'}", option, where,
        cwd=tmp_path, env=plugin_env(),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    line = one_error_line(done.stderr)
    assert option in line and where in line
    assert count(tmp_path / "queue.db") == 20
    assert not (tmp_path / "dst.db").exists() and not list(tmp_path.glob("*.journal"))


def test_a_read_only_directory_is_refused_for_the_report_the_journal_and_the_default_journal(
    read_only_dir: Path,
) -> None:
    base = ["migrate", "jobs", "--from", "memory://", "--to", "memory://", "--to-queue", "other"]
    for extra, named in [
        (["--report", "read-only/r.json"], "read-only/r.json"),
        (["--journal", "read-only/j.journal"], "read-only/j.journal"),
        ([], "pullqueue-migrate-jobs-"),
    ]:
        done = run(*base, *extra, cwd=read_only_dir if not extra else read_only_dir.parent)
        assert done.returncode == 2, done.stderr
        line = one_error_line(done.stderr)
        assert named in line and "not writable" in line
    assert list(read_only_dir.iterdir()) == []


@pytest.mark.parametrize(
    "spelling", ["{d}/./src.db", "{d}//src.db", "{d}/sub/../src.db", "{d}/link/src.db"]
)
def test_the_same_file_queue_spelled_differently_is_refused_and_nothing_deleted(
    tmp_path: Path, spelling: str
) -> None:
    fill_file(tmp_path / "src.db", 200)
    (tmp_path / "sub").mkdir()
    (tmp_path / "link").symlink_to(tmp_path)
    done = run(
        "migrate", "jobs", "--from", f"filequeue://{tmp_path}/src.db",
        "--to", "filequeue://" + spelling.format(d=tmp_path), "--quiet-period", "0.3",
        cwd=tmp_path, env=plugin_env(),
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "same queue" in one_error_line(done.stderr)
    assert count(tmp_path / "src.db") == 200


def test_the_same_pubsub_project_with_a_trailing_slash_is_refused(tmp_path: Path) -> None:
    host = shared_emulator_host("pubsub")
    project = f"pq-{uuid.uuid4().hex[:12]}"
    fill_pubsub(project, 100)
    done = run(
        "migrate", "jobs", "--from", f"pubsub://{project}", "--to", f"pubsub://{project}/",
        "--to-queue", "jobs", "--quiet-period", "0.3",
        cwd=tmp_path, env=plugin_env(PUBSUB_EMULATOR_HOST=host),
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "same queue" in one_error_line(done.stderr)
    left = connect(f"pubsub://{project}")
    try:
        assert len(Queue("jobs", left).lease(30, 1000)) == 100
    finally:
        left.close()


KILLED_TASKS = 1500


def killed_run(tmp_path: Path) -> tuple[list[str], Path]:
    """A migration SIGKILLed while it writes: the journal keeps its write-ahead log."""
    fill_file(tmp_path / "src.db", KILLED_TASKS)
    command = [
        "migrate", "jobs", "--from", f"filequeue://{tmp_path / 'src.db'}",
        "--to", f"filequeue://{tmp_path / 'dst.db'}", "--journal", "j.journal",
        "--quiet-period", "0.3", "--batch-size", "100", "--lease-seconds", "3",
    ]  # fmt: skip
    process = subprocess.Popen(
        [PULLQUEUE, *command, "--to", f"filequeue://{tmp_path / 'dst.db'}?add_delay=0.05"],
        cwd=tmp_path,
        env=plugin_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "dst.db").exists() or count(tmp_path / "dst.db") < 300:
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        for name in ("j.journal", "j.journal-wal", "j.journal-shm"):
            mode = stat.S_IMODE((tmp_path / name).stat().st_mode)
            assert mode == 0o600, f"{name} is {mode:o}"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    return command, tmp_path / "j.journal"


@pytest.mark.parametrize("cut", ["wal", "main"])
def test_a_damaged_journal_is_refused_with_what_to_do_and_nothing_moves(
    tmp_path: Path, cut: str
) -> None:
    command, journal = killed_run(tmp_path)
    wal = journal.with_name("j.journal-wal")
    page = 4096
    if cut == "wal":
        assert wal.stat().st_size > 32 + 2 * (24 + page), "the killed run left no log to cut"
        os.truncate(wal, 32 + (24 + page) + 24 + page // 2)  # mid-way through the 2nd frame
    else:
        os.truncate(journal, journal.stat().st_size - page // 2)
    source_before, dest_before = count(tmp_path / "src.db"), count(tmp_path / "dst.db")

    done = run(*command, cwd=tmp_path, env=plugin_env())

    assert done.returncode == 2, done.stdout + done.stderr
    line = one_error_line(done.stderr)
    assert "j.journal" in line and "damaged" in line and "Move it aside" in line
    assert ("cut mid-frame" if cut == "wal" else "cut mid-page") in line
    assert count(tmp_path / "src.db") == source_before
    assert count(tmp_path / "dst.db") == dest_before
    if cut == "main":
        return
    journal.rename(tmp_path / "j.journal.damaged")  # what the message says to do
    for suffix in ("-wal", "-shm"):
        journal.with_name("j.journal" + suffix).unlink(missing_ok=True)
    finished = run(*command, cwd=tmp_path, env=plugin_env(), timeout=120)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert count(tmp_path / "src.db") == 0
    names = {t.name for t in file_queue(tmp_path / "dst.db").backend.list_tasks("jobs")}  # type: ignore[attr-defined]
    assert len(names) == KILLED_TASKS  # nothing lost


QUEUE_YAML = "queue:\n- name: counters\n  mode: pull\n"


@pytest.mark.parametrize("where", ["missing/q.auto.tfvars.json", "read-only/q.auto.tfvars.json"])
def test_plan_out_into_a_missing_or_read_only_directory_is_one_line(
    read_only_dir: Path, where: str
) -> None:
    work = read_only_dir.parent
    (work / "queue.yaml").write_text(QUEUE_YAML)
    done = run("plan", "queue.yaml", "--project", "p", "--out", where, cwd=work)
    assert done.returncode == 2, done.stderr
    line = one_error_line(done.stderr)
    assert "--out" in line and where in line
    assert done.stdout == ""
