"""The migration report: what a drain leased, wrote, deleted, skipped, left waiting and failed.

One object feeds the progress bar while the drain runs, the summary printed at the end and the
JSON written with --report, so the three always agree; `ok` decides the command's exit status.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import asdict, dataclass, field
from typing import Any

MAX_LISTED = 100
"""Failures and waiting tasks named one by one in the report, at most (the counts are exact)."""


def iso(posix: float | None) -> str | None:
    """POSIX seconds as an ISO 8601 UTC string (None stays None)."""
    if posix is None:
        return None
    return dt.datetime.fromtimestamp(posix, tz=dt.timezone.utc).isoformat(timespec="seconds")


@dataclass
class TaskFailure:
    """A task the destination refused: it stays in the source, and why."""

    task: str
    error: str


@dataclass
class Waiting:
    """Tasks left in the source that could not be moved yet, grouped by why."""

    reason: str
    count: int
    oldest_eta: str | None = None
    tasks: list[dict[str, str | None]] = field(default_factory=list)
    """Up to MAX_LISTED of them by name with their ETA, where the source can list them."""


@dataclass
class DryRun:
    """What a dry run found: the tasks that would move, and how it found out."""

    listed: bool
    """True when the source listed its tasks; False when only its statistics were read."""
    tasks: int | None = 0
    """None (JSON null) where the source cannot count its tasks (Pub/Sub's API), as for the
    other counts: unknown, never a made-up 0."""
    available: int | None = 0
    future_eta: int | None = 0
    leased_elsewhere: int | None = 0
    already_written: int = 0
    payload_bytes: int | None = 0
    oldest_eta: str | None = None
    by_tag: dict[str, int] = field(default_factory=dict)
    sample: list[dict[str, Any]] = field(default_factory=list)
    note: str = ""


@dataclass
class MigrationReport:
    """Counts of one drain (one run); see docs/migration.md, "Reading the report"."""

    source: str
    destination: str
    dry_run: bool = False
    follow: bool = False
    journal: str | None = None
    source_tasks_at_start: int | None = None
    started_at: float = 0.0
    elapsed: float = 0.0
    leased: int = 0
    """Tasks leased from the source (a task leased twice counts twice)."""
    listed: int = 0
    """Tasks with a future ETA copied from the source's listing (they cannot be leased yet)."""
    written: int = 0
    """Tasks the destination confirmed in this run."""
    already_written: int = 0
    """Tasks an earlier run had written (per the journal): deleted from the source, not re-sent."""
    skipped_duplicates: int = 0
    """Tasks the destination already had under the same name: dropped there, not a failure."""
    possible_duplicates: int = 0
    """Extra copies the destination may hold, an upper bound: a send with no known outcome (a
    batch being written when a run was killed, or an add that failed midway) may have left a
    copy, counted once the task is sent again (same task_name: the destination cannot tell the
    copies apart). It includes the counts of earlier runs of the journal killed before they
    could report (see the next field); docs/migration.md, "The duplicate window"."""
    possible_duplicates_from_killed_runs: int = 0
    """The part of possible_duplicates counted by earlier runs that were killed (their count
    is kept in the journal and given by the next run that finishes, and by no later one)."""
    deleted: int = 0
    """Tasks deleted from the source after the destination confirmed them."""
    gone_from_source: int = 0
    """Tasks already deleted from the source by someone else when the drain came to delete them
    (a worker still running on the source): they may be processed twice."""
    not_deleted: int = 0
    """Tasks written but still in the source because deleting them failed; a rerun with the
    journal deletes them without re-sending."""
    released: int = 0
    """Leases handed back to the source without writing (a stop, a destination failure)."""
    released_from_crashed_run: int = 0
    """Leases a killed earlier run held, handed back at start so the tasks move at once."""
    failed: int = 0
    failures: list[TaskFailure] = field(default_factory=list)
    still_waiting: int = 0
    waiting: list[Waiting] = field(default_factory=list)
    unexplained: int = 0
    """Tasks left in the source that are available now yet could not be leased."""
    left_in_source: int | None = None
    """Tasks still in the source when the run ended (the legacy queue's estimate where it only
    estimates); None when the source cannot count them (Pub/Sub): unknown, never a guessed 0."""
    interrupted: bool = False
    """A stop (SIGINT, SIGTERM, drain's `stop` event) ended the run before the source was empty
    (not with `follow`, where a stop is the normal end): run it again to finish."""
    stopped: str = ""
    error: str | None = None
    dry: DryRun | None = None

    @property
    def tasks_per_second(self) -> float:
        """Tasks written per second of elapsed time."""
        return self.written / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def left_text(self) -> str:
        """left_in_source for people: the count, or 'unknown' where the source cannot count."""
        return "unknown" if self.left_in_source is None else str(self.left_in_source)

    @property
    def moved(self) -> int:
        """Tasks now in the destination and gone from the source thanks to this run."""
        return self.deleted

    @property
    def ok(self) -> bool:
        """Nothing failed, nothing remains unexplained (waiting tasks with ETAs are fine) and the
        run was not interrupted."""
        return (
            self.error is None
            and not self.interrupted
            and self.failed == 0
            and self.unexplained == 0
            and self.not_deleted == 0
        )

    def add_failure(self, task: str, error: str) -> None:
        """Count a refused task, naming it while the list is short."""
        self.failed += 1
        if len(self.failures) < MAX_LISTED:
            self.failures.append(TaskFailure(task, error))

    def to_dict(self) -> dict[str, Any]:
        """Every field, plus the derived ones, as JSON-ready values."""
        data = asdict(self)
        data["started_at"] = iso(self.started_at)
        data["tasks_per_second"] = round(self.tasks_per_second, 1)
        data["elapsed"] = round(self.elapsed, 3)
        data["ok"] = self.ok
        return data

    def to_json(self) -> str:
        """The report as indented JSON (what --report writes)."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=False)

    def render(self) -> str:
        """The human summary printed at the end of `pullqueue migrate`."""
        lines = [f"{self.source} -> {self.destination}"]
        if self.dry is not None:
            lines += self._render_dry(self.dry)
        else:
            lines += [
                f"  leased            {self.leased}",
                f"  listed (future)   {self.listed}",
                f"  written           {self.written}",
                f"  deleted           {self.deleted}",
                f"  already written   {self.already_written}  (earlier run, not re-sent)",
                f"  skipped as dup.   {self.skipped_duplicates}  (destination had the name)",
                f"  possible dup.     {self.possible_duplicates}  (re-sent after an unknown"
                " outcome"
                + (
                    f"; {self.possible_duplicates_from_killed_runs} counted by killed runs)"
                    if self.possible_duplicates_from_killed_runs
                    else ")"
                ),
                f"  gone from source  {self.gone_from_source}",
                f"  released          {self.released + self.released_from_crashed_run}",
                f"  still waiting     {self.still_waiting}",
                f"  failed            {self.failed}",
                f"  elapsed           {self.elapsed:.1f} s  ({self.tasks_per_second:.0f} tasks/s)",
            ]
            if self.not_deleted:
                lines.append(f"  NOT deleted       {self.not_deleted}  (rerun to delete them)")
            if self.unexplained:
                lines.append(f"  UNEXPLAINED       {self.unexplained}  (left in the source)")
            lines.append(f"  left in source    {self.left_text}")
        for wait in self.waiting:
            eta = f", oldest ETA {wait.oldest_eta}" if wait.oldest_eta else ""
            lines.append(f"  waiting: {wait.count} {wait.reason}{eta}")
        for failure in self.failures[:10]:
            lines.append(f"  failed: {failure.task}: {failure.error}")
        if self.failed > 10:
            lines.append(f"  ... {self.failed - 10} more failures (see --report)")
        if self.error:
            lines.append(f"  error: {self.error}")
        if self.interrupted:
            left = (
                "an unknown number of tasks (the source cannot count them)"
                if self.left_in_source is None
                else f"{self.left_in_source} tasks"
            )
            lines.append(
                f"  INTERRUPTED       {left} left in the source; run the same command again to"
                " finish"
            )
        lines.append(f"  stopped: {self.stopped}" + ("" if self.ok else "  [NOT OK]"))
        return "\n".join(lines)

    @staticmethod
    def _render_dry(dry: DryRun) -> list[str]:
        def known(count: int | None) -> str:
            return "unknown" if count is None else str(count)

        lines = [
            f"  dry run: {known(dry.tasks)} tasks would move (nothing changed)",
            f"    available now     {known(dry.available)}",
            f"    future ETA        {known(dry.future_eta)}",
            f"    leased elsewhere  {known(dry.leased_elsewhere)}",
            f"    already written   {dry.already_written}",
            f"    payload bytes     {known(dry.payload_bytes)}",
        ]
        if dry.oldest_eta:
            lines.append(f"    oldest ETA        {dry.oldest_eta}")
        for tag, count in dry.by_tag.items():
            lines.append(f"    tag {tag!r}: {count}")
        for item in dry.sample:
            lines.append(f"    sample: {item}")
        if dry.note:
            lines.append(f"    note: {dry.note}")
        return lines
