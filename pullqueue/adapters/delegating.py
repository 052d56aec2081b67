"""A backend that passes every call to another backend, for wrappers that change a few calls.

Counting, fault injection and instrumentation override only the operations they touch and
inherit the rest, so no wrapper restates the whole Backend protocol.
"""

from __future__ import annotations

from collections.abc import Sequence

from pullqueue.adapters.base import Backend, queue_identity
from pullqueue.errors import Error
from pullqueue.task import QueueStats, Task


class DelegatingBackend:
    """Every Backend operation forwarded, unchanged, to `inner`; subclasses override some."""

    def __init__(self, inner: Backend, url: str | None = None) -> None:
        self.inner = inner
        self.url = inner.url if url is None else url

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
        return self.inner.lease(
            queue, lease_seconds, max_tasks, tag=tag, group_by_tag=group_by_tag, deadline=deadline
        )

    def modify_lease(self, queue: str, task: Task, lease_seconds: float) -> None:
        self.inner.modify_lease(queue, task, lease_seconds)

    def delete(self, queue: str, tasks: Sequence[Task]) -> list[bool]:
        return self.inner.delete(queue, tasks)

    def purge(self, queue: str) -> None:
        self.inner.purge(queue)

    def stats(self, queue: str) -> QueueStats:
        return self.inner.stats(queue)

    def close(self) -> None:
        self.inner.close()

    def queue_identity(self, queue: str) -> str:
        return queue_identity(self.inner, queue)

    def check_named_adds(self, queue: str, *, what: str) -> None:
        """The inner backend's refusal of named adds, if it has one (Pub/Sub, no registry)."""
        check = getattr(self.inner, "check_named_adds", None)
        if callable(check):
            check(queue, what=what)
