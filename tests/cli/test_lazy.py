"""A command imports the modules of its own subcommand only: `pullqueue work` starts without
the migration, demo, plan or console code, and every command is still listed and runs."""

from __future__ import annotations

import json
import subprocess
import sys

from pullqueue.cli import COMMANDS, cli
from tests.cli.support import clean_env, run

LOADED = """
import json, sys
from click.testing import CliRunner
from pullqueue.cli import cli
result = CliRunner().invoke(cli, sys.argv[1:])
assert result.exit_code == 0, result.output
print(json.dumps(sorted(m for m in sys.modules if m.startswith("pullqueue."))))
"""


def loaded_by(*args: str) -> set[str]:
    """The pullqueue modules a fresh process imported to run `pullqueue ARGS`."""
    done = subprocess.run(
        [sys.executable, "-c", LOADED, *args],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=120,
        check=True,
    )
    return set(json.loads(done.stdout))


def test_work_imports_no_other_subcommand() -> None:
    loaded = loaded_by("work", "--help")
    assert "pullqueue.cli.work" in loaded
    others = {m.split(":")[0] for name, m in COMMANDS.items() if name != "work"}
    assert not loaded & others, sorted(loaded & others)
    for heavy in ("pullqueue.migrate", "pullqueue.demo", "pullqueue.plan", "pullqueue.console"):
        assert heavy not in loaded


def test_every_command_is_listed_and_named_as_before() -> None:
    done = run("--help")
    section = done.stdout.split("Commands:", 1)[1].split("Examples:", 1)[0]
    listed = [
        line.split()[0] for line in section.splitlines() if line.startswith("  ") and line.strip()
    ]
    assert listed == sorted(COMMANDS)
    assert {name: command.name for name, command in cli.every_command().items()} == {
        name: name for name in COMMANDS
    }


def test_an_unknown_command_is_a_usage_error() -> None:
    done = run("bogus")
    assert done.returncode == 2
    assert "No such command 'bogus'" in done.stderr
