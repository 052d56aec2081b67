"""The NameRegistry protocol the Pub/Sub adapter calls around publish and ack.

Small on purpose: claim names atomically (create-if-absent), give a claim back when a publish
fails, and turn a claim into a tombstone with a time to live when the task is deleted.
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

    def purge(self, queue: str) -> None:
        """Tombstone the live names of a purged queue: the legacy queue keeps purged names
        as it keeps deleted ones (the SDK stub's rule), so a re-add is TombstonedTaskError."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...
