"""The `pullqueue` command: one group and one module per subcommand, all in this package.

Each subcommand (bridge, console, demo, migrate, pause, plan, resume, stats, sweep, tasks,
dead-letters, work) lives in its own module here and shares the options, error handling and exit
codes of `pullqueue.cli.base`, so every command reads and fails the same way and a new one has an
obvious home.
"""

from __future__ import annotations

import warnings

import click

from pullqueue import __version__
from pullqueue.cli.base import EXIT_STATUS_HELP, Group
from pullqueue.cli.bridge import bridge
from pullqueue.cli.console import console
from pullqueue.cli.deadletters import dead_letters
from pullqueue.cli.demo import demo
from pullqueue.cli.migrate import migrate
from pullqueue.cli.pause import pause, resume
from pullqueue.cli.plan import plan
from pullqueue.cli.stats import stats
from pullqueue.cli.sweep import sweep
from pullqueue.cli.tasks import tasks
from pullqueue.cli.work import work
from pullqueue.links import source_url


@click.group(
    cls=Group,
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


cli.add_command(work)
cli.add_command(demo)
cli.add_command(stats)
cli.add_command(tasks)
cli.add_command(dead_letters)
cli.add_command(plan)
cli.add_command(migrate)
cli.add_command(bridge)
cli.add_command(console)
cli.add_command(pause)
cli.add_command(resume)
cli.add_command(sweep)


def main() -> None:
    """Console-script entry point."""
    # google-api-core warns at import, under Python 3.10, that it will stop supporting it;
    # pullqueue supports 3.10, and a command's stderr is for the command's own messages.
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"google\.api_core")
    cli()
