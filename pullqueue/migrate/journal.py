"""The migration journal: a SQLite file recording which tasks the destination has confirmed.

A rerun after a crash reads it to skip tasks already written (deleting them from the source
without sending them again), to hand back the leases the crashed run held, and to know which
re-sent tasks might be duplicates.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from pullqueue.errors import ConfigurationError
from pullqueue.task import Task

LEASED = 0
"""Leased from the source by the current run; the destination has not confirmed it yet."""
WRITTEN = 1
"""The destination confirmed the task: never send it again, only delete it from the source."""
IN_DOUBT = 2
"""In flight when a run crashed (or after an add whose outcome was unknown): the destination
may or may not have it, so sending it again may make a duplicate."""
FAILED = 3
"""Refused by the destination: not there; the run holds its lease until it ends."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    started_at REAL NOT NULL,
    finished_at REAL,
    lease_seconds REAL NOT NULL,
    lease_calls INTEGER NOT NULL DEFAULT 0,
    lease_calls_recorded INTEGER NOT NULL DEFAULT 0,
    holds_until REAL NOT NULL DEFAULT 0,
    settled_batch INTEGER NOT NULL DEFAULT 0,
    report TEXT
);
CREATE TABLE IF NOT EXISTS tasks (
    name TEXT PRIMARY KEY,
    state INTEGER NOT NULL,
    run INTEGER NOT NULL,
    batch INTEGER NOT NULL,
    lease_token TEXT,
    lease_expires REAL
) WITHOUT ROWID;
"""
_SQL_VARIABLES = 900


@dataclass(frozen=True)
class CrashedRun:
    """An earlier run that ended without finishing (killed): what it may still hold."""

    run: int
    holds_until: float
    """On the source's clock: every lease the run took ends before this."""
    all_leases_recorded: bool
    """Every lease call it made has its tasks in the journal (none returned unrecorded)."""


@dataclass(frozen=True)
class HeldLease:
    """A lease a crashed run held, as recorded: enough to hand it back to the source."""

    name: str
    lease_token: str | None
    lease_expires: float | None


def _chunks(items: Sequence[str], size: int = _SQL_VARIABLES) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class Journal:
    """One migration's journal file, locked for the lifetime of the object.

    Writes are one transaction per step of a batch (lease recorded, destination confirmed), in
    WAL mode with synchronous=NORMAL: a killed process loses nothing committed; a power cut may
    lose the last commits, which can only cause a re-send (a duplicate), never a lost task,
    because a task leaves the source only after the destination confirmed it.
    """

    def __init__(self, path: str | os.PathLike[str], *, source: str, destination: str) -> None:
        self.path = Path(path)
        self.source = source
        self.destination = destination
        self._lock_fd = self._lock(self.path)
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            self._check_identity()
        except sqlite3.DatabaseError as exc:
            self._release_lock()
            raise ConfigurationError(
                f"journal {str(self.path)!r} is not a usable SQLite file ({exc}); give another"
                " --journal path"
            ) from exc
        except BaseException:
            self._release_lock()
            raise
        self.run: int | None = None
        self.batch = 0

    @staticmethod
    def _lock(path: Path) -> int:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(fd)
            raise ConfigurationError(
                f"journal {str(path)!r} is in use by another migration; wait for it to finish"
                " (two drains of one queue would hold each other's tasks)"
            ) from exc
        return fd

    def _release_lock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _check_identity(self) -> None:
        wanted = {"source": self.source, "destination": self.destination}
        with self._transaction() as db:
            found = dict(db.execute("SELECT key, value FROM meta").fetchall())
            if not found:
                db.executemany("INSERT INTO meta VALUES (?, ?)", wanted.items())
                return
        for key, value in wanted.items():
            if found.get(key) != value:
                raise ConfigurationError(
                    f"journal {str(self.path)!r} belongs to another migration ({key}"
                    f" {found.get(key)!r}, not {value!r}); give a new --journal path for this one"
                )

    def start_run(self, lease_seconds: float) -> list[CrashedRun]:
        """Begin a run; return the earlier runs that crashed, whose in-flight tasks are now
        in doubt (the destination may have confirmed them just before the crash)."""
        with self._transaction() as db:
            rows = db.execute(
                "SELECT id, holds_until, lease_calls = lease_calls_recorded FROM runs"
                " WHERE finished_at IS NULL"
            ).fetchall()
            db.execute("UPDATE runs SET finished_at = -1 WHERE finished_at IS NULL")
            db.execute("UPDATE tasks SET state = ? WHERE state = ?", (IN_DOUBT, LEASED))
            cursor = db.execute(
                "INSERT INTO runs (started_at, lease_seconds) VALUES (?, ?)",
                (time.time(), lease_seconds),
            )
            self.run = cursor.lastrowid
        self.batch = 0
        return [CrashedRun(run, holds_until, bool(recorded)) for run, holds_until, recorded in rows]

    def held_leases(self, runs: Iterable[int], now: float) -> list[HeldLease]:
        """Leases the given (crashed) runs still held at `now`: those of batches they had not
        settled (written and deleted, or released), and of tasks they held as failed."""
        held: list[HeldLease] = []
        for run in runs:
            rows = self._db.execute(
                "SELECT name, lease_token, lease_expires FROM tasks WHERE run = ?"
                " AND (batch > (SELECT settled_batch FROM runs WHERE id = ?) OR state = ?)"
                " AND lease_token IS NOT NULL AND lease_expires > ?",
                (run, run, FAILED, now),
            ).fetchall()
            held += [HeldLease(name, token, expires) for name, token, expires in rows]
        return held

    def lease_starting(self, holds_until: float) -> int:
        """Record, before a lease call, that this run may hold leases until holds_until;
        return the call's batch number."""
        self.batch += 1
        self._db.execute(
            "UPDATE runs SET lease_calls = ?, holds_until = max(holds_until, ?) WHERE id = ?",
            (self.batch, holds_until, self.run),
        )
        return self.batch

    def record_leases(self, tasks: Sequence[Task]) -> dict[str, int]:
        """Record what the last lease call returned (maybe nothing); return the earlier state
        of the tasks the journal knew. WRITTEN stays so; IN_DOUBT stays in doubt."""
        return self._record(tasks, self.batch)

    def record_listed(self, tasks: Sequence[Task]) -> dict[str, int]:
        """Record tasks about to be copied from a listing (not leased); as record_leases."""
        return self._record(tasks, None)

    def _record(self, tasks: Sequence[Task], batch: int | None) -> dict[str, int]:
        names = [task.name for task in tasks if task.name is not None]
        leased = batch is not None
        with self._transaction() as db:
            known = self._states(db, names) if names else {}
            db.executemany(
                "INSERT INTO tasks (name, state, run, batch, lease_token, lease_expires)"
                " VALUES (?, 0, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET"
                " state = CASE WHEN state = 3 THEN 0 ELSE state END, run = excluded.run,"
                " batch = excluded.batch, lease_token = excluded.lease_token,"
                " lease_expires = excluded.lease_expires",
                [
                    (
                        task.name,
                        self.run,
                        batch or 0,
                        task.lease_token if leased else None,
                        task.eta_posix if leased else None,
                    )
                    for task in tasks
                    if task.name is not None and known.get(task.name) != WRITTEN
                ],
            )
            if leased:
                db.execute(
                    "UPDATE runs SET lease_calls_recorded = lease_calls_recorded + 1 WHERE id = ?",
                    (self.run,),
                )
        return known

    def settled(self, batch: int) -> None:
        """Every task of lease call `batch` is deleted from the source or handed back."""
        self._db.execute("UPDATE runs SET settled_batch = ? WHERE id = ?", (batch, self.run))

    @staticmethod
    def _states(db: sqlite3.Connection, names: Sequence[str]) -> dict[str, int]:
        known: dict[str, int] = {}
        for chunk in _chunks(names):
            marks = ",".join("?" * len(chunk))
            known.update(
                db.execute(f"SELECT name, state FROM tasks WHERE name IN ({marks})", chunk)
            )
        return known

    def states(self, names: Sequence[str]) -> dict[str, int]:
        """The recorded state of each name the journal knows."""
        return self._states(self._db, names)

    def mark_written(self, names: Sequence[str]) -> None:
        """Record that the destination confirmed these tasks (one transaction)."""
        self._set_state(names, WRITTEN, "state != 1")

    def mark_in_doubt(self, names: Sequence[str]) -> None:
        """Record that an add of these tasks ended without a known outcome."""
        self._set_state(names, IN_DOUBT, "state = 0")

    def mark_failed(self, names: Sequence[str]) -> None:
        """Record that the destination refused these tasks (they are not there)."""
        self._set_state(names, FAILED, "state IN (0, 2)")

    def _set_state(self, names: Sequence[str], state: int, where: str) -> None:
        if names:
            with self._transaction() as db:
                db.executemany(
                    f"UPDATE tasks SET state = ? WHERE name = ? AND {where}",
                    [(state, name) for name in names],
                )

    def forget(self, names: Sequence[str]) -> None:
        """Drop tasks known NOT to be in the destination once handed back to the source."""
        if names:
            with self._transaction() as db:
                db.executemany(
                    "DELETE FROM tasks WHERE name = ? AND state IN (0, 3)",
                    [(name,) for name in names],
                )

    def written_count(self) -> int:
        """How many tasks the destination has confirmed over every run of this journal."""
        row = self._db.execute("SELECT count(*) FROM tasks WHERE state = 1").fetchone()
        return int(row[0])

    def finish_run(self, report: dict[str, object]) -> None:
        """Mark the run finished (so a later run does not treat it as crashed); the failed
        tasks it held are back in the source by now."""
        with self._transaction() as db:
            db.execute("DELETE FROM tasks WHERE state = ?", (FAILED,))
            db.execute(
                "UPDATE runs SET finished_at = ?, report = ? WHERE id = ?",
                (time.time(), json.dumps(report), self.run),
            )

    def close(self) -> None:
        """Close the database and release the file lock."""
        self._db.close()
        self._release_lock()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
