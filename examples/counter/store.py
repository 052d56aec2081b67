"""The counters' storage: one SQLite file standing in for the service's database.

`apply` adds a batch of increments and records their task names in the same transaction, so a
batch delivered twice (a worker killed between the write and the delete) is counted once.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable


class CounterStore:
    """Named counters, updated idempotently by task name."""

    def __init__(self, path: str) -> None:
        self.db = sqlite3.connect(path, timeout=30, check_same_thread=False)
        with self.db:
            self.db.execute("CREATE TABLE IF NOT EXISTS counter (key TEXT PRIMARY KEY, n INTEGER)")
            self.db.execute("CREATE TABLE IF NOT EXISTS applied (task TEXT PRIMARY KEY)")

    def apply(self, key: str, increments: Iterable[tuple[str, int]]) -> int:
        """Add each (task name, amount) not seen before to counter `key`; return the sum added."""
        added = 0
        with self.db:
            for task, amount in increments:
                fresh = self.db.execute(
                    "INSERT OR IGNORE INTO applied (task) VALUES (?)", (task,)
                ).rowcount
                if fresh:
                    added += amount
            self.db.execute(
                "INSERT INTO counter (key, n) VALUES (?, ?)"
                " ON CONFLICT(key) DO UPDATE SET n = n + excluded.n",
                (key, added),
            )
        return added

    def totals(self) -> dict[str, int]:
        """Every counter's value."""
        return dict(self.db.execute("SELECT key, n FROM counter ORDER BY key").fetchall())

    def close(self) -> None:
        self.db.close()
