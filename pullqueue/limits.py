"""The legacy pull-queue limits, by their legacy names.

`pullqueue.Queue` enforces them above every backend so a worker sees the same limits after the
move as before it; `pullqueue.compat.taskqueue` re-exports them as module constants.
"""

from __future__ import annotations

import math

MAX_QUEUE_NAME_LENGTH = 100
MAX_TASK_NAME_LENGTH = 500
MAX_PULL_TASK_SIZE_BYTES = 2**20
MAX_TASKS_PER_ADD = 100
MAX_TASKS_PER_LEASE = 1000
MAX_TAG_LENGTH = 500
MAX_LEASE_SECONDS = 3600 * 24 * 7
MAX_COUNTDOWN_SECONDS = 3600 * 24 * 30
LEASE_REQUESTS_PER_SECOND = 10


def bad_number(value: object) -> bool:
    """True for a boolean, NaN or an infinity: values of a number type that count no seconds
    and no tasks. Every call refuses them with the legacy error of the parameter they were
    given for, before anything changes."""
    return isinstance(value, bool) or (isinstance(value, float) and not math.isfinite(value))
