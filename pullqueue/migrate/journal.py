"""The migration journal: a SQLite file recording each batch in flight and what became of it.

A rerun after a crash reads it to delete, without sending them again, the tasks the destination
had confirmed; to hand back the leases the dead run held; and to count, across every run, the
sends whose outcome is unknown, so the report bounds the duplicates even when several runs died.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from pathlib import Path

from pullqueue.errors import ConfigurationError
from pullqueue.migrate.journal_check import database_damage, file_damage
from pullqueue.task import Task

OWNER_ONLY = 0o600
"""The journal holds task names and lease tokens: readable by its owner only, like its -wal and
-shm files (SQLite gives them the journal's mode)."""


class JournalDamagedError(ConfigurationError):
    """The journal file or its write-ahead log is damaged: resuming from it could re-send
    tasks uncounted, so the migration refuses to start."""


WRITTEN = 1
"""The destination confirmed the task and it may still be in the source: do not send it again,
only delete it from the source."""
IN_DOUBT = 2
"""Being written when a run crashed (or after an add whose outcome was unknown): the destination
may or may not have it, so sending it again may make a duplicate."""

_RUN_COLUMNS = {
    "possible_duplicates": "INTEGER NOT NULL DEFAULT 0",
    "reported_by": "INTEGER",
}
"""Columns of `runs` added after the first journals were written: added on open if missing."""

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
    written INTEGER NOT NULL DEFAULT 0,
    report TEXT,
    possible_duplicates INTEGER NOT NULL DEFAULT 0,
    reported_by INTEGER
);
CREATE TABLE IF NOT EXISTS batches (
    run INTEGER NOT NULL,
    batch INTEGER NOT NULL,
    tasks TEXT NOT NULL,
    sending INTEGER NOT NULL DEFAULT 0,
    written TEXT,
    PRIMARY KEY (run, batch)
);
CREATE TABLE IF NOT EXISTS doubt (name TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS undeleted (name TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS held (
    name TEXT PRIMARY KEY,
    run INTEGER NOT NULL,
    lease_token TEXT,
    lease_expires REAL
) WITHOUT ROWID;
"""
"""runs: one row per run; possible_duplicates is what the run counted (kept as it counts, so a
killed run's count survives it), reported_by the finished run whose report included it.
batches: one row per batch in flight (its names and lease tokens; marked when its writing
starts; the names the destination confirmed), deleted once the batch is settled. doubt: names
whose send had no known outcome. undeleted: names written whose source delete failed. held:
leases a run keeps, until it ends, on tasks the destination refused. Each of these names is of
a task still in the source (or about to leave it), so a name is never confused with a later
task that reuses it after the legacy tombstone expired.

Possible duplicates, counted by construction: a send with no known outcome (a batch being
written when its run was killed, an add that failed without saying what it stored) may leave a
copy. The first such send of a name puts it in `doubt`; each further one (the name is already
there) counts one possible duplicate at once; a later send the destination confirms as a new
copy counts one more and clears the doubt (a copy the destination drops by name clears it
without counting). So a task is counted once per unknown send once it is confirmed, and one
less before that, which bounds its extra copies either way, however many runs died."""


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


def _encode_rows(tasks: Sequence[Task], *, leased: bool) -> str | None:
    """The JSON json.dumps gives for the named tasks' [name, lease token, lease end] rows (the
    lease fields null if not `leased`), or None for none. Built here because json.dumps spends
    most of its time writing each task's lease end, which a lease call mostly gives them all
    alike: each distinct one is written once."""
    quote = encode_basestring_ascii
    ends: dict[float | None, str] = {None: "null"}
    rows = []
    for task in tasks:
        if task.name is None:
            continue
        if not leased:
            rows.append(f"[{quote(task.name)}, null, null]")
            continue
        end = task.eta_posix
        written = ends.get(end)
        if written is None:
            written = ends[end] = json.dumps(end)
        token = "null" if task.lease_token is None else quote(task.lease_token)
        rows.append(f"[{quote(task.name)}, {token}, {written}]")
    return f"[{', '.join(rows)}]" if rows else None


class Journal:
    """One migration's journal file, locked for the lifetime of the object.

    A batch costs five one-row writes, none per task: before the lease call (the run may hold
    leases until T), after it (the batch's names and lease tokens), when its writing starts,
    once the destination confirmed (the names), after the source delete (the batch is settled).
    WAL mode with synchronous=NORMAL: a killed process loses nothing committed; a power cut may
    lose the last commits, which can only cause a re-send (a duplicate), never a lost task,
    because a task leaves the source only after the destination confirmed it.
    """

    def __init__(self, path: str | os.PathLike[str], *, source: str, destination: str) -> None:
        self.path = Path(path)
        self.source = source
        self.destination = destination
        self.run: int | None = None
        self.batch = 0
        self._doubt: set[str] = set()
        self._written: set[str] = set()
        """Names confirmed by the destination in earlier runs and perhaps still in the source."""
        self._held: set[str] = set()
        self._mutex = threading.RLock()
        self._lock_fd = self._lock(self.path)
        try:
            self._refuse_damage(file_damage(self.path))
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._refuse_damage(database_damage(self._db))
            _owner_only(self.path)
            self._db.executescript(_SCHEMA)
            self._upgrade()
            self._check_identity()
            self._load()
        except sqlite3.DatabaseError as exc:
            self._release_lock()
            raise ConfigurationError(
                f"journal {str(self.path)!r} is not a usable SQLite file ({exc}); give another"
                " --journal path"
            ) from exc
        except BaseException:
            self._release_lock()
            raise

    def _refuse_damage(self, problem: str | None) -> None:
        if problem is None:
            return
        raise JournalDamagedError(
            f"journal {str(self.path)!r} is damaged: {problem}. It may have lost the record of"
            " tasks already written, so resuming from it could send them again uncounted;"
            " nothing was moved. Move it aside (mv it to a new name) and run the same command"
            " again: the tasks the killed run was writing may then reach the destination twice"
            " (nothing is lost either way)"
        )

    @staticmethod
    def _lock(path: Path) -> int:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, OWNER_ONLY)
            if os.fstat(fd).st_mode & 0o777 != OWNER_ONLY:
                os.fchmod(fd, OWNER_ONLY)
        except OSError as exc:
            raise ConfigurationError(
                f"cannot open the journal {str(path)!r}: {exc.strerror or exc}; give a --journal"
                " path in a writable directory"
            ) from exc
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
        """One transaction, in one thread at a time (the lease loop and the writer share us)."""
        with self._mutex:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _execute(self, sql: str, args: tuple[object, ...]) -> None:
        with self._mutex:
            self._db.execute(sql, args)

    def _upgrade(self) -> None:
        """Add the columns a journal written by an earlier version lacks."""
        have = {row[1] for row in self._db.execute("PRAGMA table_info(runs)")}
        for column, kind in _RUN_COLUMNS.items():
            if column not in have:
                self._db.execute(f"ALTER TABLE runs ADD COLUMN {column} {kind}")

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

    def _load(self) -> None:
        """What earlier runs left: names in doubt, written names perhaps still in the source."""
        self._doubt = {name for (name,) in self._db.execute("SELECT name FROM doubt")}
        self._written = {name for (name,) in self._db.execute("SELECT name FROM undeleted")}
        for (written,) in self._db.execute("SELECT written FROM batches"):
            self._written.update(json.loads(written or "[]"))

    # --- runs ----------------------------------------------------------------------------

    def start_run(
        self, lease_seconds: float, now: float
    ) -> tuple[list[CrashedRun], list[HeldLease]]:
        """Begin a run. Return the earlier runs that crashed and the leases they may still
        hold at `now` (source clock). Of the tasks they were writing when killed, those the
        destination confirmed are to be deleted only, the others are now in doubt (each one
        already in doubt from an earlier unknown send counts a possible duplicate of this run)."""
        with self._transaction() as db:
            crashed = [
                CrashedRun(run, holds_until, bool(recorded))
                for run, holds_until, recorded in db.execute(
                    "SELECT id, holds_until, lease_calls = lease_calls_recorded FROM runs"
                    " WHERE finished_at IS NULL"
                )
            ]
            held = [
                HeldLease(name, token, expires)
                for name, token, expires in db.execute(
                    "SELECT name, lease_token, lease_expires FROM held"
                )
            ]
            rows = db.execute("SELECT tasks, sending, written FROM batches").fetchall()
            written = set(self._written)
            for _, _, confirmed in rows:
                written.update(json.loads(confirmed or "[]"))
            doubt: dict[str, None] = {}  # in order, once each: one unknown send per name
            for tasks, sending, _ in rows:
                for name, token, expires in json.loads(tasks):
                    if sending and name not in written:
                        doubt[name] = None  # it may have reached the destination
                    if token is not None:
                        held.append(HeldLease(name, token, expires))
            self._written = written
            db.executemany("INSERT OR IGNORE INTO undeleted VALUES (?)", [(n,) for n in written])
            db.execute("DELETE FROM batches")
            db.execute("DELETE FROM held")
            db.execute("UPDATE runs SET finished_at = -1 WHERE finished_at IS NULL")
            cursor = db.execute(
                "INSERT INTO runs (started_at, lease_seconds) VALUES (?, ?)",
                (time.time(), lease_seconds),
            )
            self.run = cursor.lastrowid
            self._add_doubt(db, list(doubt))
        self.batch = 0
        live = [lease for lease in held if lease.lease_expires is None or lease.lease_expires > now]
        return crashed, live

    def finish_run(self, report: dict[str, object], *, source_empty: bool = False) -> None:
        """Mark the run finished (so a later run does not treat it as crashed); the failed
        tasks it held are back in the source by now. With `source_empty` (the drain left
        nothing behind) no name recorded as written or in doubt can be in the source any more.
        The report includes the possible duplicates of the killed runs before it
        (possible_duplicates()): they are marked reported, so no later report counts them."""
        with self._transaction() as db:
            db.execute(
                "UPDATE runs SET reported_by = ? WHERE reported_by IS NULL"
                " AND (id = ? OR finished_at = -1)",
                (self.run, self.run),
            )
            if source_empty:
                db.execute("DELETE FROM undeleted")
                db.execute("DELETE FROM doubt")
                self._written.clear()
                self._doubt.clear()
            db.execute("DELETE FROM held WHERE run = ?", (self.run,))
            db.execute("DELETE FROM batches WHERE run = ?", (self.run,))
            db.execute(
                "UPDATE runs SET finished_at = ?, report = ? WHERE id = ?",
                (time.time(), json.dumps(report), self.run),
            )
            self._held.clear()

    # --- batches -------------------------------------------------------------------------

    def lease_starting(self, holds_until: float) -> int:
        """Record, before a lease call, that this run may hold leases until holds_until;
        return the call's batch number."""
        self.batch += 1
        self._execute(
            "UPDATE runs SET lease_calls = lease_calls + 1, holds_until = max(holds_until, ?)"
            " WHERE id = ?",
            (holds_until, self.run),
        )
        return self.batch

    def record_leases(self, tasks: Sequence[Task]) -> None:
        """Record what the last lease call returned (maybe nothing), with the lease tokens.
        What the journal knows of these names is read when the batch is written (states()),
        not now: a batch still being written may settle some of them first."""
        self._record(tasks, self.batch, leased=True)

    def record_listed(self, tasks: Sequence[Task]) -> None:
        """Record tasks about to be copied from a listing (not leased); as record_leases."""
        self.batch += 1
        self._record(tasks, self.batch, leased=False)

    def _record(self, tasks: Sequence[Task], batch: int, *, leased: bool) -> None:
        # Encoded before taking the lock: the other thread's journal writes need not wait for it.
        encoded = _encode_rows(tasks, leased=leased)
        if encoded is None:
            if leased:  # one statement: atomic on its own
                self._execute(
                    "UPDATE runs SET lease_calls_recorded = lease_calls_recorded + 1 WHERE id = ?",
                    (self.run,),
                )
            return
        with self._transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO batches (run, batch, tasks) VALUES (?, ?, ?)",
                (self.run, batch, encoded),
            )
            if leased:
                db.execute(
                    "UPDATE runs SET lease_calls_recorded = lease_calls_recorded + 1 WHERE id = ?",
                    (self.run,),
                )

    def sending(self, batch: int) -> None:
        """Writing `batch` to the destination starts: from now on a crash leaves it in doubt."""
        self._execute(
            "UPDATE batches SET sending = 1 WHERE run = ? AND batch = ?", (self.run, batch)
        )

    def mark_written(
        self, batch: int, confirmed: Sequence[str], duplicates: Sequence[str] = ()
    ) -> int:
        """Record that the destination confirmed these tasks of `batch` as new copies, or
        already had them (`duplicates`, dropped there by name). Return the possible duplicates
        this adds: the new copies of names in doubt (an earlier send may have left one)."""
        names = [*confirmed, *duplicates]
        if not names:
            return 0
        encoded = json.dumps(names)  # before taking the lock, as in _record()
        with self._transaction() as db:
            possible = sum(1 for name in confirmed if name in self._doubt)
            db.execute(
                "UPDATE batches SET written = ? WHERE run = ? AND batch = ?",
                (encoded, self.run, batch),
            )
            db.execute(
                "UPDATE runs SET written = written + ?,"
                " possible_duplicates = possible_duplicates + ? WHERE id = ?",
                (len(names), possible, self.run),
            )
            self._forget(db, "doubt", self._doubt, names)
            self._forget(db, "held", self._held, names)
        return possible

    def settled(self, batch: int, deleted: Iterable[str] = ()) -> None:
        """Every task of batches up to `batch` is deleted from the source, handed back, held
        as failed or recorded as undeleted (batches settle in order)."""
        settle = "DELETE FROM batches WHERE run = ? AND batch <= ?"
        with self._mutex:
            if not self._written:  # one statement: atomic on its own
                self._db.execute(settle, (self.run, batch))
                return
            with self._transaction() as db:
                db.execute(settle, (self.run, batch))
                self._forget(db, "undeleted", self._written, list(deleted))

    @staticmethod
    def _forget(db: sqlite3.Connection, table: str, known: set[str], names: Sequence[str]) -> None:
        gone = [(name,) for name in names if name in known]
        if gone:
            db.executemany(f"DELETE FROM {table} WHERE name = ?", gone)
            known.difference_update(name for (name,) in gone)

    # --- outcomes ------------------------------------------------------------------------

    def mark_in_doubt(self, names: Sequence[str]) -> int:
        """Record that an add of these tasks ended without a known outcome (each may have left
        a copy). Return the possible duplicates this adds: the names already in doubt."""
        if not names:
            return 0
        with self._transaction() as db:
            return self._add_doubt(db, names)

    def _add_doubt(self, db: sqlite3.Connection, names: Sequence[str]) -> int:
        """One more unknown send of each name: a name already in doubt counts one possible
        duplicate of this run (kept in its row at once, so a kill does not lose it)."""
        repeats = sum(1 for name in names if name in self._doubt)
        new = [(name,) for name in names if name not in self._doubt]
        db.executemany("INSERT OR IGNORE INTO doubt VALUES (?)", new)
        if repeats:
            db.execute(
                "UPDATE runs SET possible_duplicates = possible_duplicates + ? WHERE id = ?",
                (repeats, self.run),
            )
        self._doubt.update(name for (name,) in new)
        return repeats

    def mark_undeleted(self, names: Sequence[str]) -> None:
        """Record written tasks whose source delete failed: a later run deletes them only."""
        if names:
            with self._transaction() as db:
                db.executemany("INSERT OR IGNORE INTO undeleted VALUES (?)", [(n,) for n in names])
                self._written.update(names)

    def hold_failed(self, tasks: Sequence[Task]) -> None:
        """Record leases this run keeps, until it ends, on tasks the destination refused."""
        if tasks:
            with self._transaction() as db:
                db.executemany(
                    "INSERT OR REPLACE INTO held VALUES (?, ?, ?, ?)",
                    [(t.name, self.run, t.lease_token, t.eta_posix) for t in tasks],
                )
                self._held.update(t.name for t in tasks if t.name is not None)

    # --- reading -------------------------------------------------------------------------

    def states(self, names: Iterable[str]) -> dict[str, int]:
        """The state of each name the journal holds (as a rerun would find it)."""
        with self._mutex:
            known: dict[str, int] = {}
            if not self._written and not self._doubt:
                return known
            for name in names:
                if name in self._written:
                    known[name] = WRITTEN
                elif name in self._doubt:
                    known[name] = IN_DOUBT
        return known

    def possible_duplicates(self) -> tuple[int, int]:
        """(this run's count so far, the count of earlier runs killed before they reported):
        the possible duplicates this run's report gives are their sum."""
        with self._mutex:
            own, earlier = self._db.execute(
                "SELECT coalesce(sum(CASE WHEN id = ? THEN possible_duplicates END), 0),"
                " coalesce(sum(CASE WHEN id != ? THEN possible_duplicates END), 0)"
                " FROM runs WHERE reported_by IS NULL",
                (self.run, self.run),
            ).fetchone()
        return int(own), int(earlier)

    def written_count(self) -> int:
        """How many tasks the destination has confirmed over every run of this journal."""
        with self._mutex:
            row = self._db.execute("SELECT coalesce(sum(written), 0) FROM runs").fetchone()
        return int(row[0])

    def close(self) -> None:
        """Close the database and release the file lock."""
        with self._mutex:
            self._db.close()
        self._release_lock()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _owner_only(path: Path) -> None:
    """Make the journal and its -wal/-shm files readable and writable by their owner only (a
    journal from an earlier version may have been created with the umask)."""
    for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        with contextlib.suppress(FileNotFoundError):
            if file.stat().st_mode & 0o777 != OWNER_ONLY:
                file.chmod(OWNER_ONLY)
