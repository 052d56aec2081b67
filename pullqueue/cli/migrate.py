"""`pullqueue migrate QUEUE --from URL --to URL`: drain a legacy queue into the new backend.

The command connects both sides, opens the journal, shows a progress bar on a terminal, stops
cleanly on SIGINT/SIGTERM and prints (and with --report writes) the report; drain() does the work.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from pullqueue.cli.base import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_STATUS_HELP,
    EXIT_USAGE,
    Command,
    FiniteFloat,
    OutputFile,
    batch_size_option,
    check_writable_file,
    connect_backend,
    fail,
    json_option,
    lease_seconds_option,
)
from pullqueue.errors import ConfigurationError, Error
from pullqueue.migrate.drain import DEFAULT_LEASE_SECONDS, DEFAULT_QUIET_PERIOD, drain
from pullqueue.migrate.report import MigrationReport
from pullqueue.queue import Queue


def default_journal_path(queue: str, source_url: str, dest_url: str, dest_queue: str) -> Path:
    """The journal a migration uses unless told otherwise: one file per source/destination pair
    in the current directory, so rerunning the same command resumes the same migration."""
    digest = hashlib.sha256(f"{source_url} {queue} {dest_url} {dest_queue}".encode()).hexdigest()
    return Path(f"pullqueue-migrate-{queue}-{digest[:8]}.journal")


@click.command(
    "migrate",
    cls=Command,
    epilog="""\b
Examples:
  pullqueue migrate emails --from cloudtasks://my-app/us-central1 --to pubsub://my-app --dry-run
  pullqueue migrate emails --from cloudtasks://my-app/us-central1 --to pubsub://my-app
  pullqueue migrate emails --from cloudtasks://my-app/us-central1 --to pubsub://my-app \\
      --follow --report emails.json

"""
    + EXIT_STATUS_HELP
    + """
Here 0 means everything moved (tasks still waiting on an ETA are listed), 1 something
failed or is left unexplained (see the report), 130 a signal stopped it before the source
was empty (the report gives the tasks left, or "unknown"). With --follow a signal is the
normal end: 0 or 1.""",
)
@click.argument("queue_name", metavar="QUEUE")
@click.option("--from", "source_url", required=True, metavar="URL", help="The legacy queue's URL.")
@click.option("--to", "dest_url", required=True, metavar="URL", help="The new backend's URL.")
@click.option("--to-queue", metavar="NAME", help="Destination queue name [default: QUEUE].")
@click.option("--dry-run", is_flag=True, help="Count and sample what would move; change nothing.")
@click.option(
    "--journal",
    "journal_path",
    type=OutputFile(),
    help="Journal file (SQLite) that makes a rerun resume [default:"
    " ./pullqueue-migrate-QUEUE-<hash>.journal].",
)
@click.option(
    "--no-journal",
    is_flag=True,
    help="Run without a journal: a rerun after a crash may then re-send what was written.",
)
@click.option(
    "--follow",
    is_flag=True,
    help="Keep draining while producers still write to the old queue, until SIGINT/SIGTERM.",
)
@click.option(
    "--report",
    "report_path",
    type=OutputFile(),
    help="Also write the report as JSON to this file.",
)
@json_option("Print the report as JSON on stdout instead of the summary.")
@lease_seconds_option(
    DEFAULT_LEASE_SECONDS, "Lease on each source batch; must cover writing it to the destination."
)
@click.option(
    "--lease-rate",
    type=FiniteFloat(0, min_open=True),
    help="Source lease calls per second [default: PULLQUEUE_LEASE_REQUESTS_PER_SECOND, 10].",
)
@batch_size_option(1000, "Tasks per source lease call.")
@click.option(
    "--quiet-period",
    type=FiniteFloat(0),
    default=DEFAULT_QUIET_PERIOD,
    show_default=True,
    help="Seconds the source must stay empty before the drain ends (without --follow).",
)
@click.option(
    "--max-wait",
    type=FiniteFloat(0),
    help="Seconds the end may wait for tasks about to become available [default: the lease].",
)
@click.option(
    "--progress/--no-progress",
    "show_progress",
    default=None,
    help="Progress bar [default: on when stderr is a terminal].",
)
def migrate(
    queue_name: str,
    source_url: str,
    dest_url: str,
    to_queue: str | None,
    dry_run: bool,
    journal_path: Path | None,
    no_journal: bool,
    follow: bool,
    report_path: Path | None,
    lease_seconds: float,
    lease_rate: float | None,
    batch_size: int,
    quiet_period: float,
    max_wait: float | None,
    show_progress: bool | None,
    as_json: bool,
) -> None:
    """Drain pull queue QUEUE from the --from backend into the --to backend.

    Each batch is leased from the source, written to the destination (payload, name, tag and
    ETA kept) and deleted from the source only once the destination confirmed it. The journal
    makes a rerun after a crash finish the job without re-sending what was confirmed. Tasks
    with a future ETA are copied from the source's listing where it can list them; otherwise
    they are reported as still waiting. Both sides are checked read-only before anything moves.
    """
    dest_queue = to_queue or queue_name
    journal: Path | None = None
    if not no_journal:
        journal = journal_path or default_journal_path(queue_name, source_url, dest_url, dest_queue)
        if journal_path is None and not dry_run:
            check_writable_file(journal, "--journal")
    source = Queue(queue_name, connect_backend(source_url, option="--from"))
    try:
        dest = Queue(dest_queue, connect_backend(dest_url, option="--to"))
    except BaseException:
        source.backend.close()
        raise
    if source.backend.url.startswith("memory:"):
        click.echo(
            "Warning: --from memory:// is a queue of this process only, empty unless this process"
            " fills it, so nothing will move; pass the legacy queue's URL"
            " (cloudtasks://PROJECT/LOCATION or appengine://).",
            err=True,
        )
    if _would_vanish(source, dest, dry_run):
        source.backend.close()
        dest.backend.close()
        raise click.BadParameter(
            "memory:// lives in this process only: the tasks would be deleted from the source"
            " and lost when this command exits; pass a shared backend (pubsub://PROJECT), or"
            " --dry-run to only count them",
            param_hint="'--to'",
        )
    err = Console(stderr=True)
    stop = threading.Event()
    progress_on = err.is_terminal if show_progress is None else show_progress
    try:
        with _signals(stop), _progress_bar(err, progress_on) as on_progress:
            report = drain(
                source,
                dest,
                journal=journal,
                dry_run=dry_run,
                follow=follow,
                batch_size=batch_size,
                lease_seconds=lease_seconds,
                lease_rate=lease_rate,
                quiet_period=quiet_period,
                max_wait=max_wait,
                progress=on_progress,
                stop=stop,
            )
    except Error as exc:
        # Options, settings, paths and journals are usage errors; a queue that is missing or
        # refuses us is a failure, as in every other command.
        fail(str(exc), EXIT_USAGE if isinstance(exc, ConfigurationError) else EXIT_FAILED)
    except KeyboardInterrupt:
        err.print(
            "aborted: the batch in flight was cut short; run the same command again to finish"
            " (the journal knows where this run stopped)",
            highlight=False,
            soft_wrap=True,
        )
        sys.stdout.flush()
        sys.stderr.flush()
        # At once, as asked: threads still writing would hold the exit; the rerun hands their
        # leases back and counts their tasks as in doubt, as after a kill.
        os._exit(EXIT_INTERRUPTED)
    finally:
        source.backend.close()
        dest.backend.close()
    click.echo(report.to_json() if as_json else report.render())
    if report_path is not None:
        try:
            _write_atomically(report_path, report.to_json() + "\n")
        except OSError as exc:
            fail(f"could not write the report to {str(report_path)!r}: {exc.strerror or exc}")
    if report.interrupted:
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(EXIT_OK if report.ok else EXIT_FAILED)


def _write_atomically(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent if str(path.parent) else ".", prefix=".report-")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _would_vanish(source: Queue, dest: Queue, dry_run: bool) -> bool:
    """Whether the tasks would leave a source that outlives this process for a memory://
    destination that does not."""
    in_memory = dest.backend.url.startswith("memory:")
    return in_memory and not dry_run and not source.backend.url.startswith("memory:")


@contextmanager
def _signals(stop: threading.Event) -> Iterator[None]:
    """First SIGINT/SIGTERM: finish the in-flight batch, release the rest, report. Second: abort
    at once (the journal keeps that safe too)."""
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        stop.set()
        sys.stderr.write(  # one plain write: a second signal may interrupt this very call
            f"{signal.Signals(signum).name}: finishing the batch in flight, then reporting"
            " (send again to abort at once)\n"
        )
        sys.stderr.flush()

    for sig in previous:
        signal.signal(sig, on_signal)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def _progress_bar(
    err: Console, enabled: bool
) -> Iterator[Callable[[MigrationReport], None] | None]:
    """A rich progress bar (moved of known total, tasks/s, time left), or None when off."""
    if not enabled:
        yield None
        return
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]:>8.0f} tasks/s"),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=err, transient=False) as bar:
        task = bar.add_task("migrating", total=None, rate=0.0)

        def update(report: MigrationReport) -> None:
            done = report.deleted + report.gone_from_source
            start = report.source_tasks_at_start or 0
            total = start if start >= done and start > 0 else None  # else the count was wrong
            bar.update(
                task,
                completed=done,
                total=total,
                rate=report.tasks_per_second,
                description="interrupted" if report.interrupted else "migrating",
            )

        yield update
