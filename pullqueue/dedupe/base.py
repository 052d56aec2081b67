"""The NameRegistry protocol the Pub/Sub adapter calls around publish and ack.

Small on purpose: claim names atomically (create-if-absent), give a claim back when a publish
fails, turn a claim into a tombstone with a time to live when the task is deleted (by its
holder, or by name from anywhere), and say which names are tombstoned.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from pullqueue.errors import Error


@runtime_checkable
class NameRegistry(Protocol):
    """Where task names live while their task exists and, as tombstones, after it is deleted."""

    url: str

    def claim(self, queue: str, names: Sequence[str]) -> list[Error | None]:
        """Claim each name atomically; None when claimed, else TaskAlreadyExistsError or
        TombstonedTaskError for that name. Raises TransientError when the registry is unreachable
        (then nothing is claimed)."""
        ...

    def release(self, queue: str, names: Sequence[str]) -> None:
        """Give back claims whose task was never published (a failed publish)."""
        ...

    def tombstone(self, queue: str, names: Sequence[str]) -> None:
        """Mark names of deleted tasks as tombstoned until their time to live runs out."""
        ...

    def delete(self, queue: str, names: Sequence[str]) -> list[bool]:
        """Tombstone the names whose task is in the queue (live), for a delete by name from a
        process that holds no lease on the task; True per name that was live, False for a name
        unknown or already tombstoned (left as it was)."""
        ...

    def tombstoned(self, queue: str, names: Sequence[str]) -> set[str]:
        """The names among `names` that are tombstoned now: their task was deleted, so a copy
        still delivered must be dropped, never handed out."""
        ...

    def purge(self, queue: str) -> None:
        """Tombstone the live names of a purged queue: the legacy queue keeps purged names
        as it keeps deleted ones (the SDK stub's rule), so a re-add is TombstonedTaskError."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...
