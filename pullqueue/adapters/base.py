"""The Backend protocol: the few operations every pull-queue adapter must do.

Arguments arrive already validated by `pullqueue.Queue` (limits, names, tags), so an adapter
only maps each call onto its service and reports per-task outcomes in the legacy error types.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol, runtime_checkable

from pullqueue.errors import Error
from pullqueue.task import QueueStats, Task


@runtime_checkable
class Backend(Protocol):
    """A place pull queues live: memory, Pub/Sub, Cloud Tasks or the App Engine bundled API."""

    url: str

    def now(self) -> float:
        """The backend's clock in POSIX seconds (ETAs and lease expiries are on this clock)."""
        ...

    def add(self, queue: str, tasks: Sequence[Task]) -> list[Error | None]:
        """Add tasks; one outcome per task, None when added (name and eta_posix then set).

        Tasks whose outcome is None are in the queue even when others failed, as in the
        legacy bulk add (TaskAlreadyExistsError, TombstonedTaskError per task).
        """
        ...

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
        """Lease up to max_tasks available tasks, oldest ETA first.

        With a tag only tasks of that tag; with group_by_tag and no tag only tasks sharing the
        tag of the oldest available task. Each returned task has its lease token set.
        """
        ...

    def modify_lease(self, queue: str, task: Task, lease_seconds: float) -> None:
        """Extend or end (0 seconds) the caller's current lease; updates task in place.

        Raises TaskLeaseExpiredError when the caller's lease is no longer current.
        """
        ...

    def delete(self, queue: str, tasks: Sequence[Task]) -> list[bool]:
        """Delete tasks; True per task deleted, False when it was unknown or already gone."""
        ...

    def purge(self, queue: str) -> None:
        """Remove every task from the queue."""
        ...

    def stats(self, queue: str) -> QueueStats:
        """Counts the backend can tell about the queue."""
        ...

    def close(self) -> None:
        """Release resources; leases still held by this process are released where possible."""
        ...


def queue_identity(backend: Backend, queue: str) -> str:
    """What identifies `queue` on `backend` however its URL was spelled: two pairs with the same
    identity are one queue. A backend may say it with a `queue_identity(queue)` method (a file
    queue resolves its path, memory names its object); else its URL and the queue name do."""
    own = getattr(backend, "queue_identity", None)
    if callable(own):
        return str(own(queue))
    return f"{backend.url} {queue}"


@runtime_checkable
class ListingBackend(Backend, Protocol):
    """A backend that can also list tasks without leasing them, future ETAs included."""

    def list_tasks(self, queue: str) -> Iterator[Task]:
        """Every task in the queue, leased or not, in ETA order where the service allows."""
        ...


@runtime_checkable
class TombstoneBackend(Backend, Protocol):
    """A backend that keeps the names of tasks gone from a queue (deleted, purged), as the
    legacy service did: what lets a second delete answer TOMBSTONED_TASK, not UNKNOWN_TASK."""

    def tombstoned(self, queue: str, names: Sequence[str]) -> set[str] | None:
        """The names among `names` whose task is gone but whose name is kept; None when this
        backend keeps no names (Pub/Sub without a name registry)."""
        ...


@runtime_checkable
class QueueListingBackend(Backend, Protocol):
    """A backend that can name its pull queues (for the console's queues page)."""

    def list_queues(self) -> list[str]:
        """The names of the pull queues this backend holds or has provisioned, sorted."""
        ...


@runtime_checkable
class PagingBackend(ListingBackend, Protocol):
    """A listing backend that pages through a queue in (ETA, name) order without copying it."""

    def task_page(
        self, queue: str, *, tag: str | None, after: tuple[float, str] | None, limit: int
    ) -> list[Task]:
        """Up to `limit` tasks (of `tag`) ordered by (ETA, name), starting past `after`."""
        ...

    def tag_counts(self, queue: str) -> dict[str | None, int]:
        """How many tasks each tag has in the queue (None: untagged), leased ones included."""
        ...
