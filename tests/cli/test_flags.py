"""Numeric flags refuse nan, inf and negative numbers in the parser, naming the flag; old
spellings of a flag keep working but are not shown."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from pullqueue.cli import cli
from tests.cli.support import clean_env, one_error_line, run

NUMERIC = (click.types.IntParamType, click.types.FloatParamType)


def numeric_flags() -> list[tuple[str, str]]:
    """(command, flag) for every numeric option of every subcommand."""
    found = []
    for name, command in sorted(cli.every_command().items()):
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
        (["migrate", "q", "--from", "memory://", "--to", "memory://", "--lease-rate", "inf"],
         "--lease-rate"),
        (["work", "q", "json:dumps", "--batch", "-1"], "--batch-size"),  # the old spelling
    ],
)  # fmt: skip
def test_the_installed_command_refuses_it_before_starting(args: list[str], flag: str) -> None:
    done = run(*args)
    assert done.returncode == 2, done.stderr
    assert f"Invalid value for '{flag}'" in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("variable", "value", "command"),
    [
        ("PULLQUEUE_LEASE_REQUESTS_PER_SECOND", "nan", ["work", "jobs", "os:getcwd"]),
        ("PULLQUEUE_AUTO_CREATE", "maybe", ["stats", "jobs"]),
        ("PULLQUEUE_PUBSUB_DECLARED_TAGS", '{"jobs": 3}', ["tasks", "jobs"]),
    ],
)
def test_a_bad_environment_variable_is_one_line_naming_it(
    variable: str, value: str, command: list[str]
) -> None:
    done = run(*command, env=clean_env(**{variable: value}))
    assert done.returncode == 2, done.stderr
    line = one_error_line(done.stderr)
    assert f"{variable}=" in line and "fix or unset it" in line, line
    assert "pydantic" not in line
