"""Plugin module for PULLQUEUE_PLUGINS: registers the `filequeue://` test backend.

A `pullqueue migrate` subprocess started with PULLQUEUE_PLUGINS=tests.migrate.plugin can then
drain from and into SQLite files that survive it being killed.
"""

from __future__ import annotations

import pullqueue
from tests.migrate import filequeue

pullqueue.register("filequeue", filequeue.from_url)
