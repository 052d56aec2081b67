"""A memory backend that fails on cue and records when it was called, for worker tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from pullqueue.adapters.delegating import DelegatingBackend
from pullqueue.adapters.memory import MemoryBackend
from pullqueue.errors import Error
from pullqueue.task import Task


class ScriptedBackend(DelegatingBackend):
    """Delegates to a MemoryBackend; lease/delete raise the queued errors first."""

    def __init__(self, inner: MemoryBackend | None = None) -> None:
        super().__init__(inner or MemoryBackend(), url="scripted://")
        self.lease_errors: list[Error] = []
        self.delete_errors: list[Error] = []
        self.always_fail_delete: Error | None = None
        self.lease_times: list[float] = []
        self._lock = threading.Lock()

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

    def delete(self, queue: str, tasks: Sequence[Task]) -> list[bool]:
        with self._lock:
            error = self.delete_errors.pop(0) if self.delete_errors else self.always_fail_delete
        if error is not None:
            raise error
        return self.inner.delete(queue, tasks)
