"""`pullqueue demo`: the whole migration on a laptop, checked end to end in under a minute.

A legacy-style producer fills an in-memory pull queue through `pullqueue.compat.taskqueue`,
`pullqueue.migrate.drain` moves it to the destination (memory, or Pub/Sub when PULLQUEUE_URL or
PUBSUB_EMULATOR_HOST say so) while `pullqueue.worker` workers count per tag, and a table
reconciles produced, migrated and processed per tag; the exit status is 0 only if all agree.
"""

from __future__ import annotations

import os
import random
import re
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from pullqueue.adapters.base import Backend
from pullqueue.adapters.delegating import DelegatingBackend
from pullqueue.adapters.memory import MemoryBackend
from pullqueue.compat import taskqueue
from pullqueue.config import Settings
from pullqueue.errors import Error
from pullqueue.links import source_url
from pullqueue.migrate import MigrationReport, drain
from pullqueue.queue import Queue
from pullqueue.registry import connect
from pullqueue.task import Task
from pullqueue.worker import Worker, WorkerStats

DEFAULT_QUEUE = "pullqueue-demo"
DEFAULT_PROJECT = "pullqueue-demo"
DEMO_TASK_NAME = re.compile(r"r[0-9a-f]{6}-[0-9]+")
"""The names the demo gives its tasks (run id, index): what it may delete from its queue."""
PEEK_LEASE_SECONDS = 10.0
"""The lease on the one task the demo looks at to see whether its queue is in use."""
DRAIN_QUIET_SECONDS = 0.5
"""The demo's source is in this process and nothing else adds to it: end the drain quickly."""


class QueueInUseError(Error):
    """The demo's destination queue holds tasks the demo did not add."""


def destination(url: str | None) -> tuple[str, dict[str, Any]]:
    """The destination URL and connect() options: --url, else PULLQUEUE_URL, else the Pub/Sub
    emulator when PUBSUB_EMULATOR_HOST is set (topics created on the fly), else memory://.

    The demo's tasks are named; on Pub/Sub their names stay unique through the registry
    PULLQUEUE_DEDUPE_URL names, else an in-process one (`memory://`: the demo's producer,
    migration and workers share one backend), unless PULLQUEUE_ACCEPT_DUPLICATE_NAMES says
    duplicates are accepted."""
    options: dict[str, Any] = {}
    if url:
        chosen = url
    elif os.environ.get("PULLQUEUE_URL"):
        chosen = os.environ["PULLQUEUE_URL"]
    elif os.environ.get("PUBSUB_EMULATOR_HOST"):
        project = os.environ.get("PULLQUEUE_DEMO_PROJECT") or DEFAULT_PROJECT
        chosen, options = f"pubsub://{project}", {"auto_create": True}
    else:
        return "memory://", {}
    settings = Settings()
    named_unchecked = not settings.dedupe_url and not settings.accept_duplicate_names
    if chosen.startswith("pubsub:") and named_unchecked:
        options["dedupe_url"] = "memory://"
    return chosen, options


def names_note(url: str, options: dict[str, Any]) -> str | None:
    """What the demo does about task names on Pub/Sub, and what a service sets instead."""
    if not url.startswith("pubsub:"):
        return None
    how = source_url("docs/dedupe.md")
    if options.get("dedupe_url") == "memory://":
        return (
            "task names: kept unique by an in-process registry (memory://); a service with"
            f" several processes sets PULLQUEUE_DEDUPE_URL=firestore://PROJECT ({how})"
        )
    settings = Settings()
    if settings.dedupe_url:
        return f"task names: kept unique by the registry {settings.dedupe_url}"
    return (
        "task names: not checked (PULLQUEUE_ACCEPT_DUPLICATE_NAMES is set); set"
        f" PULLQUEUE_DEDUPE_URL=firestore://PROJECT to keep them unique ({how})"
    )


def produce(
    queue: taskqueue.Queue, count: int, tags: Sequence[str], rng: random.Random, run: str
) -> dict[str, list[int]]:
    """The legacy app: add `count` tagged counter increments, 100 per call; return the amounts
    added per tag. Tags are skewed, as counters keyed by user id are."""
    weights = [1 / (rank + 1) for rank in range(len(tags))]
    added: dict[str, list[int]] = {tag: [] for tag in tags}
    batch: list[taskqueue.Task] = []
    for index in range(count):
        tag = rng.choices(tags, weights)[0]
        amount = rng.randint(1, 9)
        batch.append(
            taskqueue.Task(payload=str(amount), method="PULL", tag=tag, name=f"{run}-{index}")
        )
        added[tag].append(amount)
        if len(batch) == taskqueue.MAX_TASKS_PER_ADD or index == count - 1:
            queue.add(batch)
            batch = []
    return added


class TagCounter:
    """The worker's batch handler: sums each tag's increments, counting each task name once."""

    def __init__(self, run: str = "") -> None:
        self.counts: Counter[str] = Counter()
        self.sums: Counter[str] = Counter()
        self.deliveries = 0
        self.foreign: set[str] = set()
        """Names of tasks this run did not produce: released, never deleted."""
        self._prefix = f"{run}-" if run else ""
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, tasks: Sequence[Task]) -> list[Task]:
        """Count this run's tasks and return them (to be deleted); any other task is left to
        be released untouched: the demo deletes only what it added."""
        own: list[Task] = []
        with self._lock:
            for task in tasks:
                if not (task.name or "").startswith(self._prefix):
                    self.foreign.add(task.name or "(unnamed)")
                    continue
                own.append(task)
                self.deliveries += 1
                if task.name in self._seen:
                    continue
                self._seen.add(task.name or "")
                tag = task.tag or ""
                self.counts[tag] += 1
                self.sums[tag] += int(task.payload)
        return own

    @property
    def processed(self) -> int:
        with self._lock:
            return len(self._seen)


class Tally(DelegatingBackend):
    """A destination backend as is, counting per tag the tasks it confirmed adding."""

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner)
        self.confirmed: Counter[str] = Counter()
        self._lock = threading.Lock()

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self.confirmed.values())

    def add(self, queue: str, tasks: Sequence[Task]) -> list[Error | None]:
        outcomes = self.inner.add(queue, tasks)
        with self._lock:
            for task, outcome in zip(tasks, outcomes, strict=True):
                if outcome is None:
                    self.confirmed[task.tag or ""] += 1
        return outcomes


@dataclass
class TagRow:
    """One tag's line of the reconciliation."""

    tag: str
    produced: int
    migrated: int
    processed: int
    produced_sum: int
    counted_sum: int
    left_in_source: int

    @property
    def ok(self) -> bool:
        return (
            self.produced == self.migrated == self.processed
            and self.produced_sum == self.counted_sum
            and self.left_in_source == 0
        )


@dataclass
class DemoResult:
    """Everything the demo counted, and whether it reconciles."""

    source: str
    destination: str
    queue: str
    rows: list[TagRow]
    report: MigrationReport
    worker: WorkerStats
    deliveries: int
    elapsed: float
    problems: list[str] = field(default_factory=list)
    leftovers_cleared: int = 0
    """Tasks an earlier, interrupted demo left in the queue, deleted before this run."""

    @property
    def produced(self) -> int:
        return sum(row.produced for row in self.rows)

    def to_dict(self) -> dict[str, Any]:
        """The reconciliation for scripts (`pullqueue demo --json`)."""
        return {
            "ok": self.ok,
            "source": self.source,
            "destination": self.destination,
            "queue": self.queue,
            "tags": [asdict(row) | {"ok": row.ok} for row in self.rows],
            "totals": {name: sum(getattr(row, name) for row in self.rows) for name in TOTALS},
            "migration": self.report.to_dict(),
            "worker": self.worker.as_dict(),
            "deliveries": self.deliveries,
            "elapsed": round(self.elapsed, 3),
            "problems": self.problems,
            "leftovers_cleared": self.leftovers_cleared,
        }

    @property
    def ok(self) -> bool:
        return not self.problems and all(row.ok for row in self.rows)


@dataclass
class DemoOptions:
    """The knobs of one demo run (the CLI's options)."""

    tasks: int = 3000
    tags: int = 12
    queue: str = DEFAULT_QUEUE
    concurrency: int = 4
    batch: int = 100
    lease_seconds: float = 60.0
    timeout: float = 300.0
    seed: int | None = None


def run_demo(
    url: str | None = None,
    options: DemoOptions | None = None,
    *,
    console: Console | None = None,
    show_progress: bool = True,
    web_console: tuple[str, int] | None = None,
    linger: Callable[[DemoResult, str | None], None] | None = None,
) -> DemoResult:
    """Produce, migrate, process and reconcile; see the module docstring.

    With `web_console` (host, port) the web console serves the destination while the demo runs,
    and `linger(result, console_url)` runs before the destination closes (the CLI waits there
    for Ctrl-C, so the console keeps showing the queue and its backlog plot)."""
    opts = options or DemoOptions()
    console = console or Console(stderr=True)
    started = time.monotonic()
    rng = random.Random(opts.seed)
    tags = [f"user-{1000 + rank}" for rank in range(opts.tags)]
    run = f"r{secrets.token_hex(3)}"

    source = MemoryBackend()
    dest_url, connect_options = destination(url)
    dest = Tally(connect(dest_url, **connect_options))
    note = names_note(dest_url, connect_options)
    if note is not None:
        console.print(note)
    web = None
    try:
        if web_console is not None:
            web = _serve_console(dest.inner, web_console, console)
        dest_queue = Queue(opts.queue, dest)
        cleared = refuse_if_in_use(dest_queue)
        legacy = taskqueue.Queue(opts.queue, backend=source)
        produced = produce(legacy, opts.tasks, tags, rng, run)

        counter = TagCounter(run)
        worker = Worker(
            dest_queue,
            counter,
            per_batch=True,
            group_by_tag=True,
            batch_size=opts.batch,
            lease_seconds=opts.lease_seconds,
            concurrency=opts.concurrency,
        )
        stop = threading.Event()
        reports: list[MigrationReport] = []
        failures: list[BaseException] = []

        def migrate() -> None:
            try:
                reports.append(
                    drain(
                        Queue(opts.queue, source),
                        dest_queue,
                        quiet_period=DRAIN_QUIET_SECONDS,
                        stop=stop,
                    )
                )
            except BaseException as exc:
                failures.append(exc)

        def work() -> None:
            try:
                worker.run(handle_signals=False)
            except BaseException as exc:
                failures.append(exc)

        threads = [
            threading.Thread(target=migrate, name="demo-migrate", daemon=True),
            threading.Thread(target=work, name="demo-worker", daemon=True),
        ]
        for thread in threads:
            thread.start()
        try:
            _watch(opts, source, dest, counter, threads[0], worker, console, show_progress)
        finally:
            stop.set()
            worker.stop()
            for thread in threads:
                thread.join()

        left: Counter[str] = Counter(t.tag or "" for t in source.list_tasks(opts.queue))
        rows = [
            TagRow(
                tag=tag,
                produced=len(produced[tag]),
                migrated=dest.confirmed[tag],
                processed=counter.counts[tag],
                produced_sum=sum(produced[tag]),
                counted_sum=counter.sums[tag],
                left_in_source=left[tag],
            )
            for tag in tags
        ]
        report = reports[0] if reports else MigrationReport(source="memory://", destination="")
        problems = [f"{type(exc).__name__}: {exc}" for exc in failures]
        if not report.ok:
            problems.append(f"the migration did not finish cleanly: {report.stopped}")
        if report.deleted != opts.tasks:
            problems.append(f"the migration deleted {report.deleted} of {opts.tasks} from source")
        if worker.stats.failed or worker.stats.leases_lost:
            problems.append("some worker batches failed or lost their lease")
        if counter.foreign:
            problems.append(
                f"{len(counter.foreign)} tasks the demo did not add turned up in queue"
                f" {opts.queue!r}; they were left there, untouched"
            )
        extra = set(counter.counts) - set(tags)
        if extra:
            problems.append(f"the workers counted tags nobody produced: {sorted(extra)}")
        result = DemoResult(
            source=f"{source.url} (through pullqueue.compat.taskqueue)",
            destination=dest.url,
            queue=opts.queue,
            rows=rows,
            report=report,
            worker=worker.stats.snapshot(),
            deliveries=counter.deliveries,
            elapsed=time.monotonic() - started,
            problems=problems,
            leftovers_cleared=cleared,
        )
        if linger is not None:
            linger(result, web.url if web is not None else None)
        return result
    finally:
        if web is not None:
            web.stop()
        dest.close()


def _serve_console(backend: Backend, listen: tuple[str, int], console: Console) -> Any:
    """The web console over the demo's destination, read every second, in a thread."""
    from pullqueue.console import create_app
    from pullqueue.console.app import loopback_hosts
    from pullqueue.console.server import BackgroundConsole
    from pullqueue.listen import bind

    app = create_app(backend, period=1.0, allowed_hosts=loopback_hosts())
    web = BackgroundConsole(app, bind(*listen))
    console.print(f"console: open {web.url} to watch the queue and the workers")
    return web


def refuse_if_in_use(queue: Queue) -> int:
    """Make sure the destination queue holds only what earlier demo runs left (an interrupted
    run leaves its tasks): delete those, and refuse a queue holding any other task, handing it
    back at once; the demo never deletes what no demo added, and its counts would not reconcile.
    Return how many leftovers were deleted. The first look is one task, so a user's queue sees
    a single extra delivery attempt (Pub/Sub counts one per lease)."""
    cleared = 0
    size = 1
    while found := queue.lease(PEEK_LEASE_SECONDS, size):
        foreign: list[Task] = []
        leftovers: list[Task] = []
        for task in found:
            own = DEMO_TASK_NAME.fullmatch(task.name or "")
            (leftovers if own else foreign).append(task)
        if leftovers:
            queue.delete(leftovers)
            cleared += len(leftovers)
        for task in foreign:
            queue.modify_lease(task, 0)
        if foreign:
            raise QueueInUseError(
                f"the queue already holds tasks (one is {foreign[0].name!r}) on"
                f" {queue.backend.url}; the demo needs a queue of its own and never deletes tasks"
                " it did not add: pass --queue with an unused name",
                queue=queue.name,
            )
        size = 1000
    return cleared


def _watch(
    opts: DemoOptions,
    source: MemoryBackend,
    dest: Tally,
    counter: TagCounter,
    migration: threading.Thread,
    worker: Worker,
    console: Console,
    show_progress: bool,
) -> None:
    """Show progress until every migrated task is processed (or the timeout passes)."""
    deadline = time.monotonic() + opts.timeout
    columns = (
        TextColumn("{task.description:<10}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, disable=not show_progress) as progress:
        progress.add_task("produced", total=opts.tasks, completed=opts.tasks)
        migrated = progress.add_task("migrated", total=opts.tasks)
        processed = progress.add_task("processed", total=opts.tasks)
        said = False
        while time.monotonic() < deadline:
            progress.update(migrated, completed=dest.total)
            progress.update(processed, completed=counter.processed)
            if not migration.is_alive() and not said and not console.is_terminal:
                said = True  # a log line where no bar is drawn (CI, a pipe)
                console.print(f"migration finished: {dest.total} tasks; the workers go on")
            if not migration.is_alive() and counter.processed >= dest.total:
                break
            if worker.error is not None:
                break
            time.sleep(0.1)
        else:
            console.print(f"[red]timed out after {opts.timeout:.0f} s[/red]")
        progress.update(migrated, completed=dest.total)
        progress.update(processed, completed=counter.processed)


def render(result: DemoResult, console: Console) -> None:
    """Print the reconciliation table and the verdict."""
    console.print(f"queue {result.queue!r}: {result.source} -> {result.destination}")
    table = Table()
    for column in ("tag", "produced", "migrated", "processed", "sum produced", "sum counted"):
        table.add_column(column, justify="left" if column == "tag" else "right")
    table.add_column("", justify="center")
    for row in result.rows:
        table.add_row(
            row.tag,
            str(row.produced),
            str(row.migrated),
            str(row.processed),
            str(row.produced_sum),
            str(row.counted_sum),
            "ok" if row.ok else "[red]MISMATCH[/red]",
        )
    totals = [sum(getattr(r, f) for r in result.rows) for f in TOTALS]
    table.add_row("total", *map(str, totals), "", end_section=True)
    console.print(table)
    report, stats = result.report, result.worker
    console.print(
        f"migration: leased {report.leased}, written {report.written}, deleted {report.deleted},"
        f" failed {report.failed} ({report.stopped})\n"
        f"workers:   processed {stats.processed} in {stats.lease_requests} lease calls,"
        f" failed {stats.failed}, redelivered {stats.retried},"
        f" deliveries {result.deliveries}\n"
        f"elapsed:   {result.elapsed:.1f} s"
    )
    if result.leftovers_cleared:
        console.print(f"cleared:   {result.leftovers_cleared} tasks an earlier demo left")
    for problem in result.problems:
        console.print(f"[red]problem:[/red] {problem}")
    if result.ok:
        console.print(
            f"[green]reconciled:[/green] all {result.produced} tasks were produced, migrated once"
            " and processed once, per tag and in sum"
        )
    else:
        console.print("[red]NOT reconciled[/red]: see the rows marked MISMATCH and the problems")


TOTALS = ("produced", "migrated", "processed", "produced_sum", "counted_sum")
