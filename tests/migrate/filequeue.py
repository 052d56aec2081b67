"""A durable pull-queue backend in one SQLite file (`filequeue:///PATH`), for crash tests.

`pullqueue migrate` runs as a subprocess that the tests SIGKILL; its source (and, in some
tests, destination) must outlive it, which memory:// cannot. This backend keeps the legacy
lease semantics (ETA order, lease = new ETA and token, retry_count, tombstones) in a file that
several processes share; `tests.migrate.plugin` registers it through PULLQUEUE_PLUGINS.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import SplitResult, parse_qs

from pullqueue.errors import (
    ConfigurationError,
    Error,
    TaskAlreadyExistsError,
    TaskLeaseExpiredError,
    TombstonedTaskError,
)
from pullqueue.task import USEC, QueueStats, Task, to_usec

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    queue TEXT NOT NULL, name TEXT NOT NULL, payload BLOB NOT NULL, tag TEXT,
    eta_usec INTEGER NOT NULL, retry_count INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, name)
);
CREATE INDEX IF NOT EXISTS tasks_by_eta ON tasks (queue, eta_usec, name);
CREATE TABLE IF NOT EXISTS tombstones (queue TEXT NOT NULL, name TEXT NOT NULL,
    PRIMARY KEY (queue, name));
"""


class FileQueueBackend:
    """Pull queues in a SQLite file; every call is one transaction, safe across processes."""

    def __init__(self, path: str, *, add_delay: float = 0.0) -> None:
        self.url = f"filequeue://{path}"
        self.path = path
        self.add_delay = add_delay
        """Seconds each add call sleeps first: a slow destination, for tests of stopping."""
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)

    def now(self) -> float:
        return time.time()

    def queue_identity(self, queue: str) -> str:
        """The file itself (device and inode) and the queue: the same however the path is
        spelled (`/./`, `//`, `sub/../`, a symlinked directory, a hard link)."""
        found = os.stat(self.path)
        return f"filequeue://{found.st_dev}:{found.st_ino}/{queue}"

    def _tx(self) -> _Transaction:
        return _Transaction(self._db, self._lock)

    def add(self, queue: str, tasks: Sequence[Task]) -> list[Error | None]:
        time.sleep(self.add_delay)
        outcomes: list[Error | None] = []
        with self._tx() as db:
            now = self.now()
            for task in tasks:
                name = task.name
                if name is not None:
                    exists = db.execute(
                        "SELECT 1 FROM tasks WHERE queue = ? AND name = ?", (queue, name)
                    ).fetchone()
                    if exists:
                        outcomes.append(TaskAlreadyExistsError("exists", queue=queue, task=name))
                        continue
                    if db.execute(
                        "SELECT 1 FROM tombstones WHERE queue = ? AND name = ?", (queue, name)
                    ).fetchone():
                        outcomes.append(TombstonedTaskError("tombstoned", queue=queue, task=name))
                        continue
                else:
                    name = task.name = f"task-{uuid.uuid4().hex}"
                eta_usec = to_usec(task.resolve_eta(now))
                task.eta_posix = eta_usec / USEC
                db.execute(
                    "INSERT INTO tasks (queue, name, payload, tag, eta_usec) VALUES (?,?,?,?,?)",
                    (queue, name, task.payload, task.tag, eta_usec),
                )
                outcomes.append(None)
        return outcomes

    def lease(
        self,
        queue: str,
        lease_seconds: float,
        max_tasks: int,
        *,
        tag: str | None = None,
        group_by_tag: bool = False,
        deadline: float = 10.0,
    ) -> list[Task]:
        with self._tx() as db:
            now_usec = to_usec(self.now())
            where, args = "queue = ? AND eta_usec < ?", [queue, now_usec]
            if group_by_tag and tag is None:
                oldest = db.execute(
                    f"SELECT tag FROM tasks WHERE {where} ORDER BY eta_usec, name LIMIT 1", args
                ).fetchone()
                if oldest is None:
                    return []
                tag = oldest[0]
                if tag is None:
                    where += " AND tag IS NULL"
            if tag is not None:
                where += " AND tag = ?"
                args.append(tag)
            rows = db.execute(
                f"SELECT name, payload, tag, retry_count FROM tasks WHERE {where}"
                " ORDER BY eta_usec, name LIMIT ?",
                [*args, max_tasks],
            ).fetchall()
            expiry = now_usec + to_usec(lease_seconds)
            db.executemany(
                "UPDATE tasks SET eta_usec = ?, retry_count = retry_count + 1"
                " WHERE queue = ? AND name = ?",
                [(expiry, queue, row[0]) for row in rows],
            )
        return [
            Task.restore(
                payload=payload,
                name=name,
                tag=row_tag,
                eta_posix=expiry / USEC,
                retry_count=retry + 1,
                lease_token=str(expiry),
                queue_name=queue,
            )
            for name, payload, row_tag, retry in rows
        ]

    def modify_lease(self, queue: str, task: Task, lease_seconds: float) -> None:
        with self._tx() as db:
            row = db.execute(
                "SELECT eta_usec FROM tasks WHERE queue = ? AND name = ?", (queue, task.name)
            ).fetchone()
            if (
                row is None
                and db.execute(
                    "SELECT 1 FROM tombstones WHERE queue = ? AND name = ?", (queue, task.name)
                ).fetchone()
            ):
                raise TombstonedTaskError("the task was deleted", queue=queue, task=task.name)
            now_usec = to_usec(self.now())
            if row is None or str(row[0]) != task.lease_token or row[0] < now_usec:
                raise TaskLeaseExpiredError("the lease is not current", queue=queue, task=task.name)
            expiry = now_usec + to_usec(lease_seconds)
            db.execute(
                "UPDATE tasks SET eta_usec = ? WHERE queue = ? AND name = ?",
                (expiry, queue, task.name),
            )
        task.eta_posix = expiry / USEC
        task.lease_token = str(expiry)

    def delete(self, queue: str, tasks: Sequence[Task]) -> list[bool]:
        results = []
        with self._tx() as db:
            for task in tasks:
                cursor = db.execute(
                    "DELETE FROM tasks WHERE queue = ? AND name = ?", (queue, task.name)
                )
                if cursor.rowcount:
                    db.execute("INSERT OR IGNORE INTO tombstones VALUES (?, ?)", (queue, task.name))
                results.append(cursor.rowcount > 0)
        return results

    def purge(self, queue: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM tasks WHERE queue = ?", (queue,))

    def stats(self, queue: str) -> QueueStats:
        now_usec = to_usec(self.now())
        with self._tx() as db:
            count, oldest = db.execute(
                "SELECT count(*), min(eta_usec) FROM tasks WHERE queue = ?", (queue,)
            ).fetchone()
            (leased,) = db.execute(
                "SELECT count(*) FROM tasks WHERE queue = ? AND retry_count > 0 AND eta_usec >= ?",
                (queue, now_usec),
            ).fetchone()
        return QueueStats(
            queue=queue,
            tasks=count,
            oldest_eta=oldest / USEC if oldest is not None else None,
            leased=leased,
        )

    def list_tasks(self, queue: str) -> Iterator[Task]:
        with self._tx() as db:
            rows = db.execute(
                "SELECT name, payload, tag, eta_usec, retry_count FROM tasks WHERE queue = ?"
                " ORDER BY eta_usec, name",
                (queue,),
            ).fetchall()
        for name, payload, tag, eta_usec, retry in rows:
            yield Task.restore(
                payload=payload,
                name=name,
                tag=tag,
                eta_posix=eta_usec / USEC,
                retry_count=retry,
                queue_name=queue,
            )

    def close(self) -> None:
        self._db.close()


class _Transaction:
    def __init__(self, db: sqlite3.Connection, lock: threading.Lock) -> None:
        self.db = db
        self.lock = lock

    def __enter__(self) -> sqlite3.Connection:
        self.lock.acquire()
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except BaseException:
            self.lock.release()
            raise
        return self.db

    def __exit__(self, kind: object, value: object, traceback: object) -> None:
        try:
            self.db.execute("COMMIT" if kind is None else "ROLLBACK")
        finally:
            self.lock.release()


def from_url(url: SplitResult, options: dict[str, Any]) -> FileQueueBackend:
    """`filequeue:///absolute/path.db[?add_delay=SECONDS]`."""
    if not url.path:
        raise ConfigurationError(f"filequeue:// needs a file path, got {url.geturl()!r}")
    query = parse_qs(url.query)
    return FileQueueBackend(url.path, add_delay=float(query.get("add_delay", ["0"])[0]))
