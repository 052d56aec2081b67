"""`Queue`, the one entry point workers and producers use, whatever the backend.

Every legacy limit is checked here, once, before any backend is called, so a bad call fails
with the legacy error naming the queue, the task and the limit, and changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import overload

from pullqueue import limits, metrics
from pullqueue.adapters.base import Backend
from pullqueue.errors import (
    BadTaskStateError,
    DuplicateTaskNameError,
    Error,
    InvalidDeadlineError,
    InvalidEtaError,
    InvalidLeaseTimeError,
    InvalidMaxTasksError,
    InvalidQueueNameError,
    InvalidTagError,
    InvalidTaskNameError,
    TaskAlreadyExistsError,
    TaskTooLargeError,
    TombstonedTaskError,
    TooManyTasksError,
)
from pullqueue.task import QueueStats, Task

_QUEUE_NAME_RE = re.compile(rf"^[a-zA-Z0-9-]{{1,{limits.MAX_QUEUE_NAME_LENGTH}}}$")
_TASK_NAME_RE = re.compile(rf"^[a-zA-Z0-9_-]{{1,{limits.MAX_TASK_NAME_LENGTH}}}$")
_SIZE_OVERHEAD_BOUND = 4096
"""More than any task's size adds to its payload (a valid tag, or the legacy SDK's headers)."""


_checked_queue_names: set[str] = set()
"""Queue names found legal (bounded): services build a Queue per request with few names."""


def validate_queue_name(name: str) -> str:
    """Return name if it is a legal legacy queue name, else raise InvalidQueueNameError."""
    if type(name) is str and name in _checked_queue_names:
        return name
    if not isinstance(name, str) or not _QUEUE_NAME_RE.match(name):
        raise InvalidQueueNameError(
            f"queue name {name!r} must match {_QUEUE_NAME_RE.pattern}", queue=str(name)
        )
    if len(_checked_queue_names) < 10_000:
        _checked_queue_names.add(name)
    return name


def validate_task_name(name: str, queue: str | None = None) -> str:
    """Return name if it is a legal legacy task name, else raise InvalidTaskNameError."""
    if not isinstance(name, str) or not _TASK_NAME_RE.match(name):
        raise InvalidTaskNameError(
            f"task name must match {_TASK_NAME_RE.pattern}", queue=queue, task=str(name)
        )
    return name


def validate_tag(tag: str | None, queue: str | None = None, task: str | None = None) -> None:
    """Raise InvalidTagError when a tag is longer than the legacy 500-byte limit."""
    if tag is not None and len(tag.encode("utf-8")) > limits.MAX_TAG_LENGTH:
        raise InvalidTagError(
            f"tag is {len(tag.encode('utf-8'))} bytes; the limit is {limits.MAX_TAG_LENGTH}",
            queue=queue,
            task=task,
        )


def validate_lease_seconds(lease_seconds: float, queue: str | None = None) -> float:
    """A lease time as float seconds, 0 to one week, else the legacy error.

    A boolean, NaN or infinity is InvalidLeaseTimeError; a value that is not a number at all is
    TypeError, as in the legacy SDK.
    """
    if limits.bad_number(lease_seconds):
        raise InvalidLeaseTimeError(
            f"lease_seconds must be a finite number of seconds, not {lease_seconds!r}",
            queue=queue,
        )
    if not isinstance(lease_seconds, int | float):
        raise TypeError("lease_seconds must be a float or an integer")
    if lease_seconds < 0:
        raise InvalidLeaseTimeError("lease_seconds must not be negative", queue=queue)
    if lease_seconds > limits.MAX_LEASE_SECONDS:
        raise InvalidLeaseTimeError(
            f"lease_seconds {lease_seconds} is over the limit of {limits.MAX_LEASE_SECONDS}",
            queue=queue,
        )
    return float(lease_seconds)


def validate_max_tasks(max_tasks: int, queue: str | None = None) -> int:
    """max_tasks as an int from 1 to 1000, else the legacy error.

    A boolean, NaN or infinity is InvalidMaxTasksError; any other value that is not an int is
    TypeError, as in the legacy SDK.
    """
    if limits.bad_number(max_tasks):
        raise InvalidMaxTasksError(
            f"max_tasks must be a whole number of tasks, not {max_tasks!r}", queue=queue
        )
    if not isinstance(max_tasks, int):
        raise TypeError("max_tasks must be an integer")
    if max_tasks <= 0:
        raise InvalidMaxTasksError("max_tasks must be at least 1", queue=queue)
    if max_tasks > limits.MAX_TASKS_PER_LEASE:
        raise InvalidMaxTasksError(
            f"max_tasks {max_tasks} is over the limit of {limits.MAX_TASKS_PER_LEASE}",
            queue=queue,
        )
    return max_tasks


def validate_deadline(deadline: float, queue: str | None = None) -> float:
    """An RPC deadline in seconds, finite and above zero, else the legacy error."""
    if limits.bad_number(deadline):
        raise InvalidDeadlineError(
            f"deadline must be a finite number of seconds, not {deadline!r}", queue=queue
        )
    if not isinstance(deadline, int | float):
        raise TypeError("deadline must be numeric")
    if deadline <= 0:
        raise InvalidDeadlineError("deadline must be above zero", queue=queue)
    return float(deadline)


class Queue:
    """A named pull queue on a backend (the process-wide configured one by default)."""

    def __init__(self, name: str = "default", backend: Backend | None = None) -> None:
        self.name = validate_queue_name(name)
        if backend is None:
            from pullqueue.registry import default_backend

            backend = default_backend()
        self.backend: Backend = backend

    def __repr__(self) -> str:
        return f"Queue(name={self.name!r}, backend={self.backend.url!r})"

    @overload
    def add(self, task: Task) -> Task: ...

    @overload
    def add(self, task: Iterable[Task]) -> list[Task]: ...

    def add(self, task: Task | Iterable[Task]) -> Task | list[Task]:
        """Add one task or up to 100; raises the first per-task error after adding the rest."""
        single = isinstance(task, Task)
        tasks: list[Task] = [task] if isinstance(task, Task) else list(task)
        self._check_add(tasks)
        outcomes = self.backend.add(self.name, tasks)
        first: Error | None = None
        if any(outcomes):
            added = 0
            for item, outcome in zip(tasks, outcomes, strict=True):
                if outcome is None:
                    added += 1
                    item.was_added = True
                    item.queue_name = self.name
                elif first is None or isinstance(
                    first, TaskAlreadyExistsError | TombstonedTaskError
                ):
                    first = outcome
        else:  # every task added, the common case: no per-task branch
            name = self.name
            for item in tasks:
                item.was_added = True
                item.queue_name = name
            added = len(tasks)
        if added:
            metrics.sent.add(added, metrics.queue_attributes(self.backend.url, self.name))
        if first is not None:
            raise first
        return tasks[0] if single else tasks

    def _check_add(self, tasks: Sequence[Task]) -> None:
        if len(tasks) > limits.MAX_TASKS_PER_ADD:
            raise TooManyTasksError(
                f"{len(tasks)} tasks in one add; the limit is {limits.MAX_TASKS_PER_ADD}",
                queue=self.name,
            )
        now: float | None = None
        names: set[str] = set()
        for item in tasks:
            if not isinstance(item, Task):
                raise TypeError(f"add takes Task objects, not {type(item).__name__}")
            if item.was_added:
                raise BadTaskStateError(
                    "the task was already added", queue=self.name, task=item.name
                )
            if item.name is not None:
                validate_task_name(item.name, self.name)
                if item.name in names:
                    raise DuplicateTaskNameError(
                        "the name is used more than once in this add",
                        queue=self.name,
                        task=item.name,
                    )
                names.add(item.name)
            # Cheap bounds first: a tag of n characters has at most 4n UTF-8 bytes, and a task's
            # size is its payload plus at most _SIZE_OVERHEAD_BOUND bytes (tag, or legacy headers).
            if item.tag is not None and len(item.tag) * 4 > limits.MAX_TAG_LENGTH:
                validate_tag(item.tag, self.name, item.name)
            if len(item.payload) + _SIZE_OVERHEAD_BOUND > limits.MAX_PULL_TASK_SIZE_BYTES:
                size = item.size
                if size > limits.MAX_PULL_TASK_SIZE_BYTES:
                    raise TaskTooLargeError(
                        f"task is {size} bytes; the limit is {limits.MAX_PULL_TASK_SIZE_BYTES}",
                        queue=self.name,
                        task=item.name,
                    )
            if item.eta_posix is not None or item._countdown:
                if now is None:
                    now = self.backend.now()
                eta = item.eta_posix if item.eta_posix is not None else now + (item._countdown or 0)
                if eta - now > limits.MAX_COUNTDOWN_SECONDS:
                    raise InvalidEtaError(
                        f"ETA is more than {limits.MAX_COUNTDOWN_SECONDS} s ahead",
                        queue=self.name,
                        task=item.name,
                    )
                if eta < 0:
                    raise InvalidEtaError(
                        "ETA is before 1970-01-01; give a later eta or a smaller negative"
                        " countdown",
                        queue=self.name,
                        task=item.name,
                    )

    def lease(
        self,
        lease_seconds: float,
        max_tasks: int,
        *,
        tag: str | None = None,
        group_by_tag: bool = False,
        deadline: float = 10.0,
    ) -> list[Task]:
        """Lease up to max_tasks available tasks (of `tag`, or of the oldest task's tag)."""
        lease_seconds = validate_lease_seconds(lease_seconds, self.name)
        max_tasks = validate_max_tasks(max_tasks, self.name)
        deadline = validate_deadline(deadline, self.name)
        if isinstance(tag, bytes):
            tag = tag.decode("utf-8")
        validate_tag(tag, self.name)
        leased = self.backend.lease(
            self.name,
            lease_seconds,
            max_tasks,
            tag=tag,
            group_by_tag=group_by_tag or tag is not None,
            deadline=deadline,
        )
        if leased:
            metrics.consumed.add(len(leased), metrics.queue_attributes(self.backend.url, self.name))
        return leased

    def modify_lease(self, task: Task, lease_seconds: float) -> None:
        """Set the task's lease to end lease_seconds from now; 0 releases it at once."""
        lease_seconds = validate_lease_seconds(lease_seconds, self.name)
        if task.name is None:
            raise BadTaskStateError("a task must have a name to modify its lease", queue=self.name)
        self.backend.modify_lease(self.name, task, lease_seconds)

    def delete(self, tasks: Task | Iterable[Task]) -> list[Task]:
        """Delete tasks; each gets was_deleted True, or False when it was already gone."""
        items: list[Task] = [tasks] if isinstance(tasks, Task) else list(tasks)
        # Whole-batch checks pass the common case (every name given once, none deleted yet);
        # otherwise the item-by-item check finds the first bad task and names it.
        names = {item.name for item in items}
        if (
            len(names) != len(items)
            or None in names
            or "" in names
            or any(item.was_deleted for item in items)
        ):
            self._check_delete(items)
        for item, deleted in zip(items, self.backend.delete(self.name, items), strict=True):
            item.was_deleted = deleted
        return items

    def _check_delete(self, items: list[Task]) -> None:
        names: set[str] = set()
        for item in items:
            if not item.name:
                raise BadTaskStateError("a task name must be given to delete", queue=self.name)
            if item.was_deleted:
                raise BadTaskStateError(
                    "the task was already deleted", queue=self.name, task=item.name
                )
            if item.name in names:
                raise DuplicateTaskNameError(
                    "the name is used more than once in this delete",
                    queue=self.name,
                    task=item.name,
                )
            names.add(item.name)

    def delete_by_name(self, names: str | Iterable[str]) -> list[Task]:
        """Delete tasks by name alone (on Pub/Sub only tasks this process holds a lease on)."""
        wanted = [names] if isinstance(names, str) else list(names)
        return self.delete([Task(name=validate_task_name(n, self.name)) for n in wanted])

    def purge(self) -> None:
        """Remove every task from the queue."""
        self.backend.purge(self.name)

    def stats(self) -> QueueStats:
        """What the backend can tell about this queue."""
        return self.backend.stats(self.name)
