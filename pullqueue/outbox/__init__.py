"""The transactional outbox: pull tasks staged in the app's datastore transaction, published after.

A transactional add writes its tasks as staging entities (`layout`) in the transaction; after the
commit they are published and the entities deleted (`publish`); a sweeper publishes what a crash
left staged (`sweep`). See docs/semantics.md, "Transactional adds".
"""

from __future__ import annotations

from pullqueue.outbox.layout import KIND, StagedTask, new_task_name
from pullqueue.outbox.publish import publish
from pullqueue.outbox.sweep import OutboxStore, SweepReport, sweep

__all__ = [
    "KIND",
    "OutboxStore",
    "StagedTask",
    "SweepReport",
    "new_task_name",
    "publish",
    "sweep",
]
