"""`pullqueue demo`: the whole migration on a laptop, checked end to end in under a minute.

The command parses its options and prints the reconciliation; `pullqueue.demo` produces,
migrates, processes and reconciles.
"""

from __future__ import annotations

import click
from rich.console import Console

from pullqueue.cli.base import Command, Count, FiniteFloat, batch_size_option
from pullqueue.demo import DEFAULT_QUEUE, DemoOptions, render, run_demo
from pullqueue.errors import ConfigurationError, Error, InvalidQueueNameError


@click.command(
    "demo",
    cls=Command,
    epilog="""\b
Examples:
  pullqueue demo                                  # everything in memory
  PUBSUB_EMULATOR_HOST=localhost:8085 pullqueue demo   # destination: the Pub/Sub emulator
  pullqueue demo --url pubsub://my-project --queue demo-counter

\b
Exit status: 0 every count reconciles, 1 something does not (the table says what),
2 bad usage.""",
)
@click.option("--tasks", type=Count(1, 1_000_000), default=3000, show_default=True)
@click.option("--tags", type=Count(1, 1000), default=12, show_default=True)
@click.option(
    "--url",
    help="Destination backend [default: env PULLQUEUE_URL; else pubsub://pullqueue-demo on the"
    " emulator when PUBSUB_EMULATOR_HOST is set; else memory://].",
)
@click.option("--queue", "queue_name", default=DEFAULT_QUEUE, show_default=True)
@click.option("--concurrency", type=Count(1, 64), default=4, show_default=True)
@batch_size_option(100, "Tasks per lease call of the demo's workers.")
@click.option("--timeout", type=FiniteFloat(1), default=300.0, show_default=True)
@click.option("--seed", type=Count(0), help="Seed for tags and amounts (default: random).")
def demo(
    tasks: int,
    tags: int,
    url: str | None,
    queue_name: str,
    concurrency: int,
    batch_size: int,
    timeout: float,
    seed: int | None,
) -> None:
    """Run the migration end to end and check that no task is lost or counted twice.

    A legacy-style app adds TASKS counter increments, tagged by user, to an in-memory pull queue
    through pullqueue.compat.taskqueue; the migration drains them into the destination while
    workers lease them by tag and sum them; a table then reconciles produced, migrated and
    processed counts and sums per tag.
    """
    console = Console()
    options = DemoOptions(
        tasks=tasks,
        tags=tags,
        queue=queue_name,
        concurrency=concurrency,
        batch=batch_size,
        timeout=timeout,
        seed=seed,
    )
    try:
        result = run_demo(url, options, console=Console(stderr=True))
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc), param_hint="--url") from exc
    except InvalidQueueNameError as exc:
        raise click.BadParameter(str(exc), param_hint="--queue") from exc
    except Error as exc:
        raise click.ClickException(str(exc)) from exc
    render(result, console)
    raise SystemExit(0 if result.ok else 1)
