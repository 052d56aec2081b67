"""Named tasks on Pub/Sub without a name registry: refused, unless duplicates are accepted.

Pub/Sub cannot refuse a second task of a name as the legacy queue did; without a registry that
guarantee would be lost silently, so a named add fails with what to set, and a process that
accepts duplicates on purpose is warned once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from pullqueue.errors import ConfigurationError
from pullqueue.task import Task

log = logging.getLogger(__name__)

_warned = False
_lock = threading.Lock()


def no_registry_error(queue: str, task: str | None, *, what: str) -> ConfigurationError:
    """The error a named add gets on Pub/Sub with no registry and duplicates not accepted."""
    return ConfigurationError(
        "named tasks on Pub/Sub need a task-name registry to stay unique (the legacy queue"
        " refused a second task of a name, and Pub/Sub does not): set PULLQUEUE_DEDUPE_URL to"
        " firestore://PROJECT (memory:// for a single process), or set"
        " PULLQUEUE_ACCEPT_DUPLICATE_NAMES=1 (connect(..., accept_duplicate_names=True)) to"
        f" publish them unchecked, a name added twice becoming two tasks; {what}",
        queue=queue,
        task=task,
    )


def check_named(queue: str, tasks: Sequence[Task], *, accept: bool) -> None:
    """Refuse the whole add when it names a task and duplicates are not accepted; when they
    are, warn the first time a process adds a named task this way."""
    first = next((task.name for task in tasks if task.name is not None), None)
    if first is None:
        return
    if not accept:
        raise no_registry_error(queue, first, what="nothing was added")
    warn_once(queue)


def warn_once(queue: str) -> None:
    """Log, once per process, that named tasks are published without a uniqueness check."""
    global _warned
    with _lock:
        if _warned:
            return
        _warned = True
    log.warning(
        "queue %r: named tasks are published to Pub/Sub without a uniqueness check"
        " (duplicate names are accepted, PULLQUEUE_ACCEPT_DUPLICATE_NAMES, and no"
        " PULLQUEUE_DEDUPE_URL registry is set): a name added twice becomes two tasks, and a"
        " delete by name reaches only tasks this process saw. This is said once per process.",
        queue,
    )
