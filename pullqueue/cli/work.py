"""`pullqueue work QUEUE MODULE:FUNCTION`: run a handler over a queue from the command line.

The command only parses options, loads the handler and connects; `pullqueue.worker.Worker` does
the work, so a service can embed the same loop in its own process.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

import click

from pullqueue.adapters.base import Backend
from pullqueue.cli.base import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_STATUS_HELP,
    EXIT_USAGE,
    Command,
    Count,
    FiniteFloat,
    batch_size_option,
    connect_backend,
    fail,
    lease_seconds_option,
    serve_metrics,
    url_option,
)
from pullqueue.config import Settings
from pullqueue.errors import (
    ConfigurationError,
    Error,
    PermissionDeniedError,
    UnknownQueueError,
)
from pullqueue.metrics import PrometheusEndpoint
from pullqueue.outbox.periodic import PeriodicSweeper
from pullqueue.outbox.stores import connect_store
from pullqueue.outbox.sweep import OutboxStore, SweepReport
from pullqueue.queue import Queue
from pullqueue.worker.backoff import Backoff
from pullqueue.worker.handler import is_batch_handler, load_handler
from pullqueue.worker.logs import configure, log_event
from pullqueue.worker.runner import Worker

logger = logging.getLogger("pullqueue.worker")


@click.command(
    "work",
    cls=Command,
    epilog="""\b
Examples:
  pullqueue work counters myservice.tasks:count --group-by-tag --batch-size 100
  pullqueue work emails mail:send --concurrency 8 --url pubsub://my-project
  PULLQUEUE_URL=pubsub://my-project pullqueue work counters app:count --exit-when-idle 30
  pullqueue work emails mail:send --url pubsub://my-project --metrics-port 9464
  pullqueue work emails mail:send --url pubsub://my-project --sweep-datastore appengine://

"""
    + EXIT_STATUS_HELP
    + """
Here 0 means it stopped cleanly (a first SIGTERM/SIGINT, or idle), 1 a queue error stopped
it, 130 a second signal cut it short.""",
)
@click.argument("queue_name", metavar="QUEUE")
@click.argument("handler_spec", metavar="MODULE:FUNCTION")
@click.option("--tag", help="Lease only tasks with this tag.")
@click.option(
    "--group-by-tag",
    is_flag=True,
    help="Lease batches of one tag: the tag of the oldest available task (lease_tasks_by_tag).",
)
@batch_size_option(100, "Tasks per lease call (legacy max_tasks, at most 1000).")
@lease_seconds_option(
    60.0, "Lease seconds; kept alive while the handler runs, so a task is never handed out twice."
)
@click.option(
    "--concurrency",
    type=Count(1, 1024),
    default=1,
    show_default=True,
    help="Handler calls running at once (threads); up to as many leases (8 at most) run side"
    " by side while the handlers keep up.",
)
@url_option()
@click.option(
    "--exit-when-idle",
    type=FiniteFloat(0),
    metavar="SECONDS",
    help="Exit once the queue has been empty this long and no failed task is waiting out its"
    " retry delay (default: run until signalled).",
)
@click.option(
    "--max-backoff",
    type=FiniteFloat(0.1),
    default=10.0,
    show_default=True,
    help="Longest wait (seconds) between lease attempts when the queue is empty or failing.",
)
@click.option(
    "--log-format",
    type=click.Choice(["kv", "json"]),
    default="kv",
    show_default=True,
    help="Log lines as key=value or as JSON objects (to stderr).",
)
@click.option(
    "--metrics-port",
    type=Count(0, 65535),
    metavar="PORT",
    help="Serve Prometheus metrics on this port at /metrics (0: any free port, logged); needs"
    " the metrics extra: pip install 'pullqueue[metrics]'.",
)
@click.option(
    "--sweep-datastore",
    metavar="URL",
    help="Also sweep the transactional outbox in this datastore (appengine:// or"
    " appengine://HOST:PORT?app=APP_ID) every --sweep-period [default: env"
    " PULLQUEUE_OUTBOX_DATASTORE, else no sweeping].",
)
@click.option(
    "--sweep-period",
    type=FiniteFloat(0, 86400),
    metavar="SECONDS",
    help="Seconds between sweeps; 0 turns them off [default: env PULLQUEUE_SWEEP_PERIOD_SECONDS,"
    " else 300].",
)
@click.option("-v", "--verbose", is_flag=True, help="Log every task, not only every batch.")
def work(
    queue_name: str,
    handler_spec: str,
    tag: str | None,
    group_by_tag: bool,
    batch_size: int,
    lease_seconds: float,
    concurrency: int,
    url: str | None,
    exit_when_idle: float | None,
    max_backoff: float,
    log_format: str,
    metrics_port: int | None,
    sweep_datastore: str | None,
    sweep_period: float | None,
    verbose: bool,
) -> None:
    """Run MODULE:FUNCTION over the tasks of pull queue QUEUE.

    FUNCTION is called once per task with a pullqueue.Task (payload, name, tag, retry_count):
    when it returns the task is deleted, when it raises the task is released for another
    attempt. A function marked @pullqueue.worker.batch_handler is called once per leased batch
    with the list of tasks instead. MODULE is imported from the current directory or the
    installed packages.

    The worker backs off when the queue is empty, stays under the queue's lease-request rate
    (PULLQUEUE_LEASE_REQUESTS_PER_SECOND, default 10) and, on SIGTERM or Ctrl-C, finishes the
    tasks being handled and releases the rest before exiting.
    """
    if tag is not None and group_by_tag:
        raise click.UsageError("give --tag TAG or --group-by-tag, not both")
    try:
        handler = load_handler(handler_spec)
    except ConfigurationError as exc:
        fail(f"MODULE:FUNCTION: {exc}", EXIT_USAGE)
    configure(log_format, logging.DEBUG if verbose else logging.INFO)
    settings = Settings()
    sweep_datastore = sweep_datastore or settings.outbox_datastore
    if sweep_period is None:
        sweep_period = settings.sweep_period_seconds
    store = None
    if sweep_datastore and sweep_period > 0:
        try:
            store = connect_store(sweep_datastore)
        except ConfigurationError as exc:
            raise click.BadParameter(str(exc), param_hint="'--sweep-datastore'") from exc
    endpoint = _serve_metrics(metrics_port) if metrics_port is not None else None
    try:
        _work(
            queue_name,
            handler,
            url,
            tag,
            group_by_tag,
            batch_size,
            lease_seconds,
            concurrency,
            exit_when_idle,
            max_backoff,
            (store, sweep_period, settings.sweep_grace_seconds, settings.sweep_lock_seconds),
        )
    finally:
        if endpoint is not None:
            endpoint.close()


def _start_sweeper(
    backend: Backend, store: OutboxStore | None, period: float, grace: float, lock: float
) -> PeriodicSweeper | None:
    if store is None:
        return None

    def logged(report: SweepReport) -> None:
        if report.found:
            log_event(logger, logging.INFO, "sweep", **report.as_dict())

    log_event(logger, logging.INFO, "sweeping", datastore=store.url, period=period, grace=grace)
    return PeriodicSweeper(
        store, backend, period=period, grace=grace, lock=lock, on_report=logged
    ).start()


def _serve_metrics(port: int) -> PrometheusEndpoint:
    endpoint = serve_metrics(port)
    log_event(logger, logging.INFO, "metrics", port=endpoint.port, path="/metrics")
    return endpoint


def _work(
    queue_name: str,
    handler: Callable[..., Any],
    url: str | None,
    tag: str | None,
    group_by_tag: bool,
    batch_size: int,
    lease_seconds: float,
    concurrency: int,
    exit_when_idle: float | None,
    max_backoff: float,
    sweeping: tuple[OutboxStore | None, float, float, float] = (None, 0.0, 0.0, 0.0),
) -> None:
    backend = connect_backend(url, shared=True, memory_warning=True)
    try:
        queue = Queue(queue_name, backend)
    except Error as exc:
        backend.close()
        raise click.BadParameter(str(exc), param_hint="QUEUE") from exc
    try:
        # A queue that is not there (not provisioned) or not ours to read fails now, before the
        # worker says it started; a transient failure is left to the lease loop's backoff.
        queue.stats()
    except (UnknownQueueError, PermissionDeniedError, ConfigurationError):
        backend.close()
        raise
    except Error:
        pass
    try:
        worker = Worker(
            queue,
            handler,
            batch_size=batch_size,
            lease_seconds=lease_seconds,
            tag=tag,
            group_by_tag=group_by_tag,
            concurrency=concurrency,
            per_batch=is_batch_handler(handler),
            backoff=Backoff(maximum=max_backoff),
            exit_when_idle=exit_when_idle,
        )
        sweeper = _start_sweeper(backend, *sweeping)
        try:
            worker.run()
        finally:
            if sweeper is not None:
                sweeper.stop()
    except Error as exc:
        fail(str(exc), EXIT_USAGE if isinstance(exc, ConfigurationError) else EXIT_FAILED)
    finally:
        backend.close()
    if worker.aborted:
        sys.exit(EXIT_INTERRUPTED)
