"""Numeric flags refuse nan, inf and negative numbers in the parser, naming the flag; old
spellings of a flag keep working but are not shown."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from pullqueue.cli import cli
from tests.cli.support import run

NUMERIC = (click.types.IntParamType, click.types.FloatParamType)


def numeric_flags() -> list[tuple[str, str]]:
    """(command, flag) for every numeric option of every subcommand."""
    found = []
    for name, command in sorted(cli.commands.items()):
        for param in command.params:
            if isinstance(param, click.Option) and isinstance(param.type, NUMERIC):
                found.append((name, param.opts[0]))
    return found


REQUIRED = {
    "migrate": ["q", "--from", "memory://", "--to", "memory://"],
    "work": ["q", "json:dumps"],
    "stats": ["q"],
    "tasks": ["q"],
    "dead-letters": ["q"],
}


def test_every_command_has_numeric_flags_to_check() -> None:
    commands = {command for command, _ in numeric_flags()}
    assert {"demo", "migrate", "work"} <= commands
    assert len(numeric_flags()) >= 16


@pytest.mark.parametrize(("command", "flag"), numeric_flags())
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "true"])
def test_a_numeric_flag_refuses_a_number_that_is_not_one(
    command: str, flag: str, value: str
) -> None:
    result = CliRunner().invoke(cli, [command, *REQUIRED.get(command, []), flag, value])
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{flag}'" in result.output


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["demo", "--timeout", "nan"], "--timeout"),
        (["demo", "--tasks", "-1"], "--tasks"),
        (
            ["migrate", "q", "--from", "memory://", "--to", "memory://", "--lease-rate", "inf"],
            "--lease-rate",
        ),
        (
            ["migrate", "q", "--from", "memory://", "--to", "memory://", "--max-wait", "nan"],
            "--max-wait",
        ),
        (["work", "q", "json:dumps", "--lease-seconds", "inf"], "--lease-seconds"),
        (["work", "q", "json:dumps", "--exit-when-idle", "nan"], "--exit-when-idle"),
        (["work", "q", "json:dumps", "--max-backoff", "-1"], "--max-backoff"),
    ],
)
def test_the_installed_command_refuses_it_before_starting(args: list[str], flag: str) -> None:
    done = run(*args)
    assert done.returncode == 2, done.stderr
    assert f"Invalid value for '{flag}'" in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


def test_old_spellings_still_work_but_help_shows_one_spelling_per_concept() -> None:
    refused = run("work", "q", "json:dumps", "--batch", "0")
    assert refused.returncode == 2
    assert "Invalid value for '--batch-size'" in refused.stderr
    for command in ("demo", "migrate", "work"):
        shown = run(command, "--help").stdout
        assert "--batch-size" in shown
        assert "--batch " not in shown and "--lease " not in shown
    assert "--lease-seconds" in run("work", "--help").stdout
