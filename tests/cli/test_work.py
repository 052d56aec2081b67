"""`pullqueue work` and friends as a user meets them: a handler that does not import, a Pub/Sub
emulator that is not running, and memory:// where a shared queue was meant."""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.cli.support import clean_env, one_error_line, run
from tests.support.emulators import free_port, shared_emulator_host

HANDLERS = {
    "raises.py": "raise RuntimeError('the database is down')\n\ndef handle(task):\n    pass\n",
    "broken.py": "def handle(task)\n    pass\n",
    "badname.py": "from os import no_such_name\n\ndef handle(task):\n    pass\n",
    "needs.py": "import no_such_dependency\n\ndef handle(task):\n    pass\n",
}


@pytest.mark.parametrize(
    ("spec", "wanted"),
    [
        ("nosuchpkg.tasks:handle", ["'nosuchpkg.tasks'", "no module named 'nosuchpkg'"]),
        ("raises:handle", ["'raises'", "RuntimeError: the database is down"]),
        ("broken:handle", ["'broken'", "SyntaxError", "broken.py, line 1"]),
        ("badname:handle", ["'badname'", "ImportError", "no_such_name"]),
        ("needs:handle", ["'needs'", "'no_such_dependency', which is not installed"]),
    ],
)
def test_a_handler_that_does_not_import_is_one_line_naming_the_module_and_the_cause(
    tmp_path: Path, spec: str, wanted: list[str]
) -> None:
    for name, text in HANDLERS.items():
        (tmp_path / name).write_text(text)
    done = run("work", "jobs", spec, "--exit-when-idle", "0", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    line = one_error_line(done.stderr)
    for part in wanted:
        assert part in line, line


def test_debug_shows_the_traceback_of_a_handler_import(tmp_path: Path) -> None:
    (tmp_path / "raises.py").write_text(HANDLERS["raises.py"])
    done = run("work", "jobs", "raises:handle", "--debug", cwd=tmp_path)
    assert done.returncode == 2
    assert "Traceback" in done.stderr and "raise RuntimeError" in done.stderr
    assert done.stderr.rstrip().splitlines()[-1].startswith("Error: ")


@pytest.mark.parametrize(
    "args",
    [
        ["stats", "jobs", "--url", "pubsub://my-project"],
        ["work", "jobs", "json:dumps", "--url", "pubsub://my-project"],
        ["migrate", "jobs", "--from", "pubsub://my-project", "--to", "memory://", "--dry-run"],
    ],
)
def test_a_dead_emulator_is_named_in_one_line_within_seconds(
    tmp_path: Path, args: list[str]
) -> None:
    host = f"127.0.0.1:{free_port()}"  # nothing listens there
    started = time.monotonic()
    done = run(
        *args,
        cwd=tmp_path,
        env=clean_env(PUBSUB_EMULATOR_HOST=host, PULLQUEUE_URL="pubsub://my-project"),
        timeout=60,
    )
    assert time.monotonic() - started < 30
    assert done.returncode == 1, done.stderr
    line = one_error_line(done.stderr)
    assert f"cannot reach the Pub/Sub emulator at {host}; is it running?" in line
    assert "UNAVAILABLE" not in done.stderr and "failed to connect" not in done.stderr.lower()


@pytest.mark.parametrize(
    "args", [["stats", "jobs"], ["work", "jobs", "json:dumps", "--exit-when-idle", "0"]]
)
def test_memory_on_the_command_line_warns_that_it_lives_in_this_process_only(
    tmp_path: Path, args: list[str]
) -> None:
    done = run(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Warning: memory:// lives in this process only" in done.stderr
    assert "--url pubsub://PROJECT" in done.stderr


def _stats_then_work(
    tmp_path: Path, queue: str, auto_create: str
) -> list[tuple[list[str], subprocess.CompletedProcess[str]]]:
    """`stats QUEUE` and `work QUEUE` on a fresh Pub/Sub project: each command and its run."""
    (tmp_path / "ok.py").write_text("def handle(task):\n    pass\n")
    env = clean_env(
        PUBSUB_EMULATOR_HOST=shared_emulator_host("pubsub"),
        PULLQUEUE_URL=f"pubsub://pq-{uuid.uuid4().hex[:12]}",
        PULLQUEUE_AUTO_CREATE=auto_create,
    )
    commands = [["stats", queue], ["work", queue, "ok:handle", "--exit-when-idle", "0"]]
    return [(command, run(*command, cwd=tmp_path, env=env)) for command in commands]


def test_a_queue_name_pubsub_cannot_hold_is_a_usage_error_as_in_stats(tmp_path: Path) -> None:
    for command, done in _stats_then_work(tmp_path, "q1", auto_create="1"):
        assert done.returncode == 2, (command, done.stderr)
        line = one_error_line(done.stderr)
        assert "'q1'" in line and "PULLQUEUE_PUBSUB_PREFIX" in line


def test_exit_when_idle_help_says_a_failed_task_waiting_to_retry_keeps_it_running() -> None:
    done = run("work", "--help")
    assert done.returncode == 0
    assert "retry delay" in " ".join(done.stdout.split()), done.stdout


def test_a_queue_not_provisioned_fails_before_the_worker_starts_as_in_stats(
    tmp_path: Path,
) -> None:
    for command, done in _stats_then_work(tmp_path, "jobs", auto_create="0"):
        assert done.returncode == 1, (command, done.stderr)
        line = one_error_line(done.stderr)
        assert "pullqueue plan" in line, line
        assert "started" not in done.stderr + done.stdout  # no log line says it is working
