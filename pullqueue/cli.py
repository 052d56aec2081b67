"""The `pullqueue` command: one group, one subcommand per job (migrate, plan, work, demo, stats).

Built on click so every command has a `--help` a new user can follow; each subcommand lives in
the module of the feature it drives and is attached here.
"""

from __future__ import annotations

import click

from pullqueue import __version__
from pullqueue.demo import demo
from pullqueue.migrate.command import migrate
from pullqueue.plan_command import plan
from pullqueue.stats_command import stats
from pullqueue.worker.command import work


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="pullqueue")
def cli() -> None:
    """Move App Engine pull queues to Pub/Sub, and run workers on either."""


cli.add_command(work)
cli.add_command(demo)
cli.add_command(stats)
cli.add_command(plan)
cli.add_command(migrate)


def main() -> None:
    """Console-script entry point."""
    cli()
