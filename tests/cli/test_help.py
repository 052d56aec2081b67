"""Every command's --help, as a new user reads it: examples, the exit codes, one spelling per
concept, and no path into a repository a pip install does not have."""

from __future__ import annotations

import re

import click
import pytest

from pullqueue.cli import cli
from tests.cli.support import run

COMMANDS = cli.every_command()

REPO_PATH = re.compile(r"(?<![\w/.:-])(terraform|docs|examples)/\w")


@pytest.mark.parametrize("command", [[], *[[name] for name in sorted(COMMANDS)]])
def test_help_gives_examples_and_the_exit_codes(command: list[str]) -> None:
    done = run(*command, "--help")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "Examples:" in text
    assert "pullqueue " + " ".join(command) in text.split("Examples:", 1)[1]
    assert re.search(r"Exit status: 0 done, 1 failed .*2 usage error.*130 interrupted", text, re.S)
    assert not REPO_PATH.search(text), text
    assert "--debug" in text
    # one spelling per concept: the old --batch and --lease are accepted but not shown
    assert not re.search(r"--batch\b(?!-)", text) and not re.search(r"--lease\b(?!-)", text)
    if command in (["work"], ["migrate"], ["demo"]):
        assert "--batch-size" in text
    if command in (["work"], ["migrate"]):
        assert "--lease-seconds" in text


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_option_says_what_it_is_for(name: str) -> None:
    command = COMMANDS[name]
    for param in command.params:
        if isinstance(param, click.Option) and not param.hidden:
            assert param.help, f"pullqueue {name} {param.opts[0]} has no help text"
