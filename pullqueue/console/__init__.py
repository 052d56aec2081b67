"""The web console (`pullqueue console`): queues, tasks by tag, dead letters, plots and actions.

It shows what `pullqueue stats`, `tasks` and `dead-letters` show, from the same functions, in a
browser that refreshes itself; install it with `pip install 'pullqueue[console]'`.
"""

from __future__ import annotations

from pullqueue.console.app import create_app

__all__ = ["create_app"]
