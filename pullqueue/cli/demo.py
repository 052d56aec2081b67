"""`pullqueue demo`: the whole migration on a laptop, checked end to end in under a minute.

The command parses its options and prints the reconciliation; `pullqueue.demo` produces,
migrates, processes and reconciles.
"""

from __future__ import annotations

import json
import time

import click
from rich.console import Console

from pullqueue import listen as listen_module
from pullqueue.cli.base import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_STATUS_HELP,
    EXIT_USAGE,
    Command,
    Count,
    FiniteFloat,
    batch_size_option,
    bind_listen,
    check_emulator,
    fail,
    json_option,
    listen_address,
)
from pullqueue.demo import (
    DEFAULT_QUEUE,
    DemoOptions,
    DemoResult,
    QueueInUseError,
    destination,
    render,
    run_demo,
)
from pullqueue.errors import ConfigurationError, InvalidQueueNameError


@click.command(
    "demo",
    cls=Command,
    epilog="""\b
Examples:
  pullqueue demo                                  # everything in memory
  PUBSUB_EMULATOR_HOST=localhost:8085 pullqueue demo   # destination: the Pub/Sub emulator
  pullqueue demo --url pubsub://my-project --queue demo-counter
  pullqueue demo --console --tasks 100000        # watch it in the web console

\b
The destination queue must be empty: the demo refuses a queue that holds tasks and never
deletes a task it did not add.

"""
    + EXIT_STATUS_HELP
    + "\nHere 1 means a count does not reconcile (the table says what).",
)
@click.option(
    "--tasks",
    type=Count(1, 1_000_000),
    default=3000,
    show_default=True,
    help="Counter increments the legacy-style app adds.",
)
@click.option(
    "--tags",
    type=Count(1, 1000),
    default=12,
    show_default=True,
    help="Distinct tags (users) the increments are spread over.",
)
@click.option(
    "--url",
    help="Destination backend [default: env PULLQUEUE_URL; else pubsub://pullqueue-demo on the"
    " emulator when PUBSUB_EMULATOR_HOST is set; else memory://].",
)
@click.option(
    "--queue",
    "queue_name",
    default=DEFAULT_QUEUE,
    show_default=True,
    help="Destination queue; it must hold no tasks (the demo refuses one that does).",
)
@click.option(
    "--concurrency",
    type=Count(1, 64),
    default=4,
    show_default=True,
    help="Worker threads leasing by tag.",
)
@batch_size_option(100, "Tasks per lease call of the demo's workers.")
@click.option(
    "--timeout",
    type=FiniteFloat(1),
    default=300.0,
    show_default=True,
    help="Seconds to wait for every task to be migrated and processed; past it the demo fails.",
)
@click.option("--seed", type=Count(0), help="Seed for tags and amounts (default: random).")
@click.option(
    "--console",
    "web_console",
    is_flag=True,
    help="Serve the web console on the destination while the demo runs, and keep it up after"
    " the table until Ctrl-C (pip install 'pullqueue[console]').",
)
@click.option(
    "--console-listen",
    default="127.0.0.1:8080",
    show_default=True,
    metavar="HOST:PORT",
    help="Where --console serves (loopback only).",
)
@json_option("Print the reconciliation as one JSON object instead of a table.")
def demo(
    tasks: int,
    tags: int,
    url: str | None,
    queue_name: str,
    concurrency: int,
    batch_size: int,
    timeout: float,
    seed: int | None,
    web_console: bool,
    console_listen: str,
    as_json: bool,
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
    if destination(url)[0].startswith("pubsub:"):
        check_emulator()
    listen = _console_address(console_listen) if web_console else None

    def show(result: DemoResult) -> None:
        if as_json:
            click.echo(json.dumps(result.to_dict()))
        else:
            render(result, console)

    def linger(result: DemoResult, address: str | None) -> None:
        show(result)
        click.echo(f"console still serving at {address}: Ctrl-C to end the demo", err=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass

    try:
        result = run_demo(
            url,
            options,
            console=Console(stderr=True),
            show_progress=not as_json,
            web_console=listen,
            linger=linger if listen is not None else None,
        )
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc), param_hint="'--url'") from exc
    except (InvalidQueueNameError, QueueInUseError) as exc:
        fail(f"--queue: {exc}", EXIT_USAGE)
    except KeyboardInterrupt:
        click.echo(
            f"\ninterrupted: tasks this demo added may remain in queue {queue_name!r}; the next"
            " `pullqueue demo` on it deletes them first",
            err=True,
        )
        raise SystemExit(EXIT_INTERRUPTED) from None
    if listen is None:
        show(result)
    raise SystemExit(EXIT_OK if result.ok else EXIT_FAILED)


def _console_address(listen: str) -> tuple[str, int]:
    """--console-listen as (host, port): loopback only, the console is open to whoever reaches
    it; the extra must be installed and the port free, or nothing starts."""
    from pullqueue.cli.console import DEFAULT_LISTEN, INSTALL_HINT

    host, port = listen_address(listen, "--console-listen", DEFAULT_LISTEN)
    try:
        import pullqueue.console.server  # noqa: F401
    except ImportError as exc:
        fail(f"{INSTALL_HINT} ({exc})", EXIT_USAGE)
    if not listen_module.is_loopback(host):
        raise click.BadParameter(
            f"{listen!r} is not a loopback address; the demo's console serves this machine only"
            " (use `pullqueue console` with a token for more)",
            param_hint="'--console-listen'",
        )
    bind_listen(host, port, "--console-listen").close()
    return host, port
