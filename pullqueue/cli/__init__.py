"""The `pullqueue` command: one group and one module per subcommand, all in this package.

Each subcommand (bridge, console, demo, migrate, pause, plan, resume, stats, sweep, tasks,
dead-letters, work) lives in its own module here and shares the options, error handling and exit
codes of `pullqueue.cli.base`, so every command reads and fails the same way and a new one has an
obvious home. A subcommand's module is imported when it is named (COMMANDS), so `pullqueue work`
does not import the migration, demo or plan code.
"""

from __future__ import annotations

import warnings

import click

from pullqueue import __version__
from pullqueue.cli.base import EXIT_STATUS_HELP, Group
from pullqueue.links import source_url

COMMANDS = {
    "bridge": "pullqueue.cli.bridge:bridge",
    "console": "pullqueue.cli.console:console",
    "dead-letters": "pullqueue.cli.deadletters:dead_letters",
    "demo": "pullqueue.cli.demo:demo",
    "migrate": "pullqueue.cli.migrate:migrate",
    "pause": "pullqueue.cli.pause:pause",
    "plan": "pullqueue.cli.plan:plan",
    "resume": "pullqueue.cli.pause:resume",
    "stats": "pullqueue.cli.stats:stats",
    "sweep": "pullqueue.cli.sweep:sweep",
    "tasks": "pullqueue.cli.tasks:tasks",
    "work": "pullqueue.cli.work:work",
}
"""Each subcommand's module and attribute: imported when the command is named (or listed)."""


@click.group(
    cls=Group,
    lazy=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="""\b
Examples:
  pullqueue demo
  pullqueue migrate emails --from cloudtasks://my-app/us-central1 --to pubsub://my-app
  pullqueue work emails mail:send --url pubsub://my-app

"""
    + EXIT_STATUS_HELP
    + f"\nDocs: {source_url('docs/cli.md')}",
)
@click.version_option(__version__, prog_name="pullqueue")
def cli() -> None:
    """Move App Engine pull queues to Pub/Sub, and run workers on either."""


def main() -> None:
    """Console-script entry point."""
    # google-api-core warns at import, under Python 3.10, that it will stop supporting it;
    # pullqueue supports 3.10, and a command's stderr is for the command's own messages.
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"google\.api_core")
    cli()
