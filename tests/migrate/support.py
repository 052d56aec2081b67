"""Backends that wrap a MemoryBackend to inject faults, for the in-process migration tests.

`Hooked` delegates every call to the wrapped backend unless a hook replaces it; a hook gets the
real method and the arguments, so it can fail before, after or instead of the real call.
`Crash` is a BaseException: it passes through drain() untouched, like a killed process.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from pullqueue import Queue
from pullqueue.adapters.delegating import DelegatingBackend
from pullqueue.adapters.memory import MemoryBackend
from pullqueue.errors import Error
from pullqueue.task import QueueStats, Task

Hook = Callable[..., Any]


class Crash(BaseException):
    """Stands for SIGKILL: raised by a hook, nothing in drain() catches it."""


class Hooked(DelegatingBackend):
    """A backend that is a MemoryBackend, except for the calls given a hook. Not listing."""

    def __init__(self, inner: MemoryBackend | None = None, **hooks: Hook) -> None:
        super().__init__(inner or MemoryBackend())
        self.hooks: dict[str, Hook] = dict(hooks)
        self.calls: Counter[str] = Counter()

    def _call(self, op: str, *args: Any, **kwargs: Any) -> Any:
        self.calls[op] += 1
        real = getattr(self.inner, op)
        hook = self.hooks.get(op)
        return hook(real, *args, **kwargs) if hook else real(*args, **kwargs)

    def add(self, queue: str, tasks: Sequence[Task]) -> list[Error | None]:
        result: list[Error | None] = self._call("add", queue, tasks)
        return result

    def lease(self, queue: str, lease_seconds: float, max_tasks: int, **kw: Any) -> list[Task]:
        result: list[Task] = self._call("lease", queue, lease_seconds, max_tasks, **kw)
        return result

    def modify_lease(self, queue: str, task: Task, lease_seconds: float) -> None:
        self._call("modify_lease", queue, task, lease_seconds)

    def delete(self, queue: str, tasks: Sequence[Task]) -> list[bool]:
        result: list[bool] = self._call("delete", queue, tasks)
        return result

    def purge(self, queue: str) -> None:
        self._call("purge", queue)

    def stats(self, queue: str) -> QueueStats:
        result: QueueStats = self._call("stats", queue)
        return result


class EveryCopy(Hooked):
    """A destination that keeps every copy it is given, as Pub/Sub does without a name
    registry: a task sent twice is there twice. `copies` counts them by name."""

    def __init__(self, **hooks: Hook) -> None:
        super().__init__(MemoryBackend(), **hooks)
        self.copies: Counter[str] = Counter()

    def add(self, queue: str, tasks: Sequence[Task]) -> list[Error | None]:
        def keep(queue: str, tasks: Sequence[Task]) -> list[Error | None]:
            self.copies.update(task.name or "" for task in tasks)
            return [None] * len(tasks)

        self.calls["add"] += 1
        hook = self.hooks.get("add")
        result: list[Error | None] = hook(keep, queue, tasks) if hook else keep(queue, tasks)
        return result

    def duplicates(self) -> int:
        """Copies beyond the first of each name."""
        return sum(self.copies.values()) - len(self.copies)


class HookedListing(Hooked):
    """As Hooked, and it lists tasks (as MemoryBackend does)."""

    def list_tasks(self, queue: str) -> Iterator[Task]:
        result: Iterator[Task] = self._call("list_tasks", queue)
        return result


def fill(queue: Queue, count: int, *, prefix: str = "t", named: bool = True) -> list[Task]:
    """Add count tasks (payload and tag derived from the index) in adds of 100."""
    tasks = [
        Task(
            f"payload-{i}".encode(),
            name=f"{prefix}{i}" if named else None,
            tag=f"tag{i % 3}" if i % 2 else None,
        )
        for i in range(count)
    ]
    for start in range(0, count, 100):
        queue.add(tasks[start : start + 100])
    return tasks


def contents(backend: MemoryBackend, queue: str) -> dict[str, tuple[bytes, str | None, float]]:
    """Every task of a memory queue: name -> (payload, tag, eta)."""
    return {
        task.name or "": (task.payload, task.tag, task.eta_posix or 0.0)
        for task in backend.list_tasks(queue)
    }
