"""Every command's --help, as a new user reads it: examples, the exit codes, one spelling per
concept, and no path into a repository a pip install does not have."""

from __future__ import annotations

import re

import pytest

from pullqueue.cli import cli
from tests.cli.support import run

REPO_PATH = re.compile(r"(?<![\w/.:-])(terraform|docs|examples)/\w")


@pytest.mark.parametrize("command", [[], *[[name] for name in sorted(cli.commands)]])
def test_help_gives_examples_and_the_exit_codes(command: list[str]) -> None:
    done = run(*command, "--help")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "Examples:" in text
    assert "pullqueue " + " ".join(command) in text.split("Examples:", 1)[1]
    assert re.search(r"Exit status: 0 done, 1 failed .*2 usage error.*130 interrupted", text, re.S)
    assert not REPO_PATH.search(text), text
    assert "--debug" in text


def test_one_spelling_per_concept_across_commands() -> None:
    shown = {name: run(name, "--help").stdout for name in cli.commands}
    for name, text in shown.items():
        assert not re.search(r"--batch\b(?!-)", text), name
        assert not re.search(r"--lease\b(?![-])", text), name
        if "lease" in text and name in {"work", "migrate"}:
            assert "--lease-seconds" in text
