"""A memory backend that fails on cue and records when it was called, for worker tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from pullqueue.adapters.memory import MemoryBackend
from pullqueue.errors import Error
from pullqueue.task import QueueStats, Task


class ScriptedBackend:
    """Delegates to a MemoryBackend; lease/delete raise the queued errors first."""

    def __init__(self, inner: MemoryBackend | None = None) -> None:
        self.inner = inner or MemoryBackend()
        self.url = "scripted://"
        self.lease_errors: list[Error] = []
        self.delete_errors: list[Error] = []
        self.always_fail_delete: Error | None = None
        self.lease_times: list[float] = []
        self._lock = threading.Lock()

    def now(self) -> float:
        return self.inner.now()

    def add(self, queue: str, tasks: Sequence[Task]) -> list[Error | None]:
        return self.inner.add(queue, tasks)

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
        with self._lock:
            self.lease_times.append(time.monotonic())
            error = self.lease_errors.pop(0) if self.lease_errors else None
        if error is not None:
            raise error
        return self.inner.lease(
            queue, lease_seconds, max_tasks, tag=tag, group_by_tag=group_by_tag, deadline=deadline
        )

    def modify_lease(self, queue: str, task: Task, lease_seconds: float) -> None:
        self.inner.modify_lease(queue, task, lease_seconds)

    def delete(self, queue: str, tasks: Sequence[Task]) -> list[bool]:
        with self._lock:
            error = self.delete_errors.pop(0) if self.delete_errors else self.always_fail_delete
        if error is not None:
            raise error
        return self.inner.delete(queue, tasks)

    def purge(self, queue: str) -> None:
        self.inner.purge(queue)

    def stats(self, queue: str) -> QueueStats:
        return self.inner.stats(queue)

    def close(self) -> None:
        self.inner.close()
