"""`pullqueue work` and `pullqueue stats` as a user runs them, including SIGTERM mid-batch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from pullqueue import Queue, Task
from pullqueue.cli import cli
from pullqueue.registry import reset_default_backends

PULLQUEUE = str(Path(sys.executable).with_name("pullqueue"))
HANDLER_MODULE = """
import atexit, json, os, time
from pullqueue import Queue, Task

QUEUE = Queue("jobs")  # the process-wide backend: PULLQUEUE_URL, here memory://
for start in range(0, 200, 100):
    QUEUE.add([Task(b"x", name=f"j{i:03d}") for i in range(start, start + 100)])
OUT = os.environ["JOBS_OUT"]
SLEEP = float(os.environ.get("JOBS_SLEEP", "0.02"))

def handle(task):
    time.sleep(SLEEP)
    with open(OUT + ".done", "a") as out:
        out.write(task.name + "\\n")

@atexit.register
def dump():
    now = QUEUE.backend.now()
    left = [
        {"name": t.name, "available": t.eta_posix <= now, "retry_count": t.retry_count}
        for t in QUEUE.backend.list_tasks("jobs")
    ]
    with open(OUT + ".left", "w") as out:
        json.dump(left, out)
"""


@pytest.fixture
def jobs(tmp_path: Path) -> Path:
    (tmp_path / "jobs_handler.py").write_text(textwrap.dedent(HANDLER_MODULE))
    return tmp_path


def start_worker(cwd: Path, *args: str, sleep: float = 0.02) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULLQUEUE_")}
    env.update(JOBS_OUT=str(cwd / "out"), JOBS_SLEEP=str(sleep), PYTHONUNBUFFERED="1")
    command = [PULLQUEUE, "work", "jobs", "jobs_handler:handle"]
    return subprocess.Popen(
        [*command, *args],
        cwd=cwd,
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def done_names(cwd: Path) -> list[str]:
    path = cwd / "out.done"
    return path.read_text().split() if path.exists() else []


def wait_for_done(cwd: Path, count: int, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 30
    while len(done_names(cwd)) < count:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the worker handled nothing"
        time.sleep(0.02)


def test_sigterm_mid_batch_finishes_running_tasks_and_releases_the_rest(jobs: Path) -> None:
    worker = start_worker(jobs, "--batch-size", "50", "--concurrency", "2")
    wait_for_done(jobs, 20, worker)
    worker.send_signal(signal.SIGTERM)
    _, log = worker.communicate(timeout=30)
    assert worker.returncode == 0, log
    done = done_names(jobs)
    left = json.loads((jobs / "out.left").read_text())
    everything = {f"j{i:03d}" for i in range(200)}
    assert len(done) == len(set(done)), "a task was handled twice"
    assert 20 <= len(done) < 50, "stopped within the first batch"
    assert set(done) | {t["name"] for t in left} == everything
    assert not set(done) & {t["name"] for t in left}, "a handled task was not deleted"
    assert all(t["available"] for t in left), "a task was left leased by the stopped worker"
    assert "event=signal" in log and "signal=SIGTERM" in log
    stopped = next(line for line in log.splitlines() if "event=stopped" in line)
    assert f"processed={len(done)}" in stopped
    assert f"released={50 - len(done)}" in stopped


def test_a_second_signal_aborts_and_releases_the_running_task(jobs: Path) -> None:
    worker = start_worker(jobs, "--batch-size", "5", sleep=60)
    assert worker.stderr is not None
    for line in worker.stderr:
        if "event=leased" in line:
            break
    time.sleep(0.3)
    worker.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    worker.send_signal(signal.SIGINT)
    _, log = worker.communicate(timeout=20)
    assert worker.returncode == 130, log
    left = json.loads((jobs / "out.left").read_text())
    assert len(left) == 200
    assert all(t["available"] for t in left)
    assert "event=abort" in log


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["work", "jobs", "no_colon"], "must be MODULE:FUNCTION"),
        (["work", "jobs", "missing_mod_xyz:run"], "cannot import module 'missing_mod_xyz'"),
        (["work", "jobs", "json:nothing"], "module 'json' has no 'nothing'"),
        (["work", "jobs", "json:dumps", "--url", "redis://x"], "unknown URL scheme 'redis'"),
        (["work", "bad_queue!", "json:dumps"], "queue name 'bad_queue!' must match"),
        (["work", "jobs", "json:dumps", "--tag", "a", "--group-by-tag"], "not both"),
        (["work", "jobs", "json:dumps", "--batch", "1001"], "1<=x<=1000"),
        (["stats", "jobs", "--url", "nourl"], "malformed backend URL 'nourl'"),
    ],
)
def test_usage_errors_say_what_to_do(args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())


def test_work_help_shows_how_to_call_it() -> None:
    result = CliRunner().invoke(cli, ["work", "--help"])
    assert result.exit_code == 0
    for text in ["QUEUE MODULE:FUNCTION", "--group-by-tag", "--concurrency", "SIGTERM"]:
        assert text in result.output


def test_work_drains_the_queue_and_exits_when_idle(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("PULLQUEUE_URL", raising=False)
    reset_default_backends()
    queue = Queue("drain-me")
    queue.add([Task(f"{i}", name=f"d{i}", tag="even" if i % 2 == 0 else "odd") for i in range(30)])
    (tmp_path / "counting.py").write_text(
        "import collections\nSEEN = collections.Counter()\n"
        "def count(task):\n    SEEN[task.tag] += 1\n"
    )
    monkeypatch.chdir(tmp_path)
    try:
        result = CliRunner().invoke(
            cli,
            ["work", "drain-me", "counting:count", "--group-by-tag", "--exit-when-idle", "0.2"],
        )
        assert result.exit_code == 0, result.output
        assert dict(sys.modules["counting"].SEEN) == {"even": 15, "odd": 15}
        assert queue.stats().tasks == 0
    finally:
        sys.modules.pop("counting", None)
        reset_default_backends()


def test_a_queue_error_exits_1_with_the_message(monkeypatch: pytest.MonkeyPatch) -> None:
    from pullqueue import PermissionDeniedError
    from pullqueue.adapters.memory import MemoryBackend

    def refuse(*args: object, **kwargs: object) -> list[Task]:
        raise PermissionDeniedError("grant roles/pubsub.subscriber", queue="jobs")

    monkeypatch.setattr(MemoryBackend, "lease", refuse)
    result = CliRunner().invoke(cli, ["work", "jobs", "json:dumps", "--url", "memory://"])
    assert result.exit_code == 1
    assert "Error: queue 'jobs': grant roles/pubsub.subscriber" in result.output


def test_stats_reports_tasks_and_leases(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PULLQUEUE_URL", raising=False)
    reset_default_backends()
    try:
        queue = Queue("stats-me")
        queue.add([Task(b"x", name=f"s{i}") for i in range(3)])
        queue.lease(60, 1)
        result = CliRunner().invoke(cli, ["stats", "stats-me", "--json"])
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        assert (data["backend"], data["tasks"], data["leased"]) == ("memory://", 3, 1)
        table = CliRunner().invoke(cli, ["stats", "stats-me"])
        assert "tasks" in table.output and "leased" in table.output
        assert "s ago" in table.output
    finally:
        reset_default_backends()


def test_stats_rows_say_unknown_rather_than_guess() -> None:
    from pullqueue.cli.stats import stats_rows
    from pullqueue.task import QueueStats

    exact = dict(stats_rows(QueueStats(queue="q", tasks=0, leased=0), now=1000.0))
    assert (exact["tasks"], exact["oldest ETA"]) == ("0", "none")
    estimate = dict(stats_rows(QueueStats(queue="q", tasks=0, approximate=True), now=1000.0))
    assert (estimate["tasks"], estimate["oldest ETA"]) == ("0 (approximate)", "unknown")
    assert estimate["leased"] == "unknown"
    future = dict(stats_rows(QueueStats(queue="q", tasks=2, oldest_eta=1060.0), now=1000.0))
    assert future["oldest ETA"] == "1970-01-01T00:17:40+00:00 (in 60 s)"
