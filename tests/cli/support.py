"""Running the installed `pullqueue` executable as a user would, and reading what it prints.

Every test here drives `.venv/bin/pullqueue` in a subprocess with a clean environment (no
PULLQUEUE_* or emulator variables unless the test sets them), so it sees what a user sees.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

PULLQUEUE = str(Path(sys.executable).with_name("pullqueue"))
ROOT = Path(__file__).resolve().parents[2]


def interruptible() -> None:
    """Give the child the default SIGINT, so Ctrl-C reaches it (a `preexec_fn`).

    A shell without job control starts its background jobs with SIGINT ignored, and a child
    inherits that: a test sending SIGINT then waits on a process that never sees it.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def clean_env(**extra: str) -> dict[str, str]:
    """os.environ without pullqueue's or the emulator's variables, plus extra."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PULLQUEUE_") and k != "PUBSUB_EMULATOR_HOST"
    }
    env.update(COLUMNS="200", **extra)
    return env


def plugin_env(**extra: str) -> dict[str, str]:
    """clean_env() with the file-backed test queue (filequeue://) registered, as a plugin."""
    env = clean_env(PULLQUEUE_PLUGINS="tests.migrate.plugin", **extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def run(
    *args: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """`pullqueue ARGS` to its end: exit status, stdout and stderr."""
    return subprocess.run(
        [PULLQUEUE, *args],
        cwd=cwd,
        env=env if env is not None else clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def one_error_line(stderr: str) -> str:
    """The `Error: ...` line of stderr, checking there is exactly one and no traceback."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1, stderr
    return lines[0]
