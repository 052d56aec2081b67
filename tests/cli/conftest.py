"""Fixtures of the command-line tests."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """An empty directory the command cannot write into: mode 0555, and for root (who ignores
    modes) the immutable attribute, which root too must respect."""
    path = tmp_path / "read-only"
    path.mkdir()
    path.chmod(0o555)
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(path)], check=True)
    try:
        yield path
    finally:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        path.chmod(0o755)
