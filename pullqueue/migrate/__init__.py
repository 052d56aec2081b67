"""The migration: drain a legacy pull queue into the new backend, resumably, nothing lost.

`drain(source, dest, **options)` is the library entry point (also used by `pullqueue demo`);
`pullqueue migrate` (command.py) wraps it with a journal, a progress bar and a report file.
"""

from __future__ import annotations

from pullqueue.migrate.drain import drain
from pullqueue.migrate.journal import Journal
from pullqueue.migrate.report import MigrationReport

__all__ = ["Journal", "MigrationReport", "drain"]
