"""The in-memory reference backend (`memory://`): exact legacy pull-queue semantics.

It is the oracle the other adapters are tested against and a first-class backend for tests and
local rehearsal; sorted indexes keep every operation O(log n) per task touched.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import SplitResult

from sortedcontainers import SortedList

from pullqueue.errors import (
    ConfigurationError,
    Error,
    TaskAlreadyExistsError,
    TaskLeaseExpiredError,
    TombstonedTaskError,
)
from pullqueue.task import USEC, QueueStats, Task, to_usec

_UNTAGGED = ""


@dataclass(slots=True)
class _Entry:
    name: str
    payload: bytes
    tag: str | None
    eta_usec: int
    retry_count: int = 0


@dataclass
class _QueueState:
    by_name: dict[str, _Entry] = field(default_factory=dict)
    by_eta: SortedList = field(default_factory=SortedList)
    by_tag: dict[str, SortedList] = field(default_factory=dict)
    tombstones: set[str] = field(default_factory=set)
    recent_leases: list[tuple[int, int]] = field(default_factory=list)

    def index(self, entry: _Entry) -> None:
        self.by_eta.add((entry.eta_usec, entry.name))
        key = entry.tag if entry.tag is not None else _UNTAGGED
        tagged = self.by_tag.get(key)
        if tagged is None:
            tagged = self.by_tag[key] = SortedList()
        tagged.add((entry.eta_usec, entry.name))

    def unindex(self, entry: _Entry) -> None:
        self.by_eta.remove((entry.eta_usec, entry.name))
        key = entry.tag if entry.tag is not None else _UNTAGGED
        tagged = self.by_tag[key]
        tagged.remove((entry.eta_usec, entry.name))
        if not tagged:
            del self.by_tag[key]


def _available(index: SortedList, now_usec: int, limit: int) -> list[str]:
    """Names of the first `limit` entries whose ETA is before now (the legacy test: eta < now)."""
    end = index.bisect_left((now_usec, ""))
    return [name for _, name in index.islice(0, min(end, limit))]


class MemoryBackend:
    """Pull queues in this process's memory, thread-safe, on an injectable clock."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.url = "memory://"
        self._clock = clock
        self._lock = threading.RLock()
        self._queues: dict[str, _QueueState] = {}
        self._names = itertools.count(1)

    def now(self) -> float:
        return self._clock()

    def _queue(self, queue: str) -> _QueueState:
        state = self._queues.get(queue)
        if state is None:
            state = self._queues[queue] = _QueueState()
        return state

    def add(self, queue: str, tasks: Sequence[Task]) -> list[Error | None]:
        with self._lock:
            state = self._queue(queue)
            now = self._clock()
            outcomes: list[Error | None] = []
            for task in tasks:
                name = task.name
                if name is not None and name in state.by_name:
                    outcomes.append(
                        TaskAlreadyExistsError(
                            "a task with this name exists", queue=queue, task=name
                        )
                    )
                    continue
                if name is not None and name in state.tombstones:
                    outcomes.append(
                        TombstonedTaskError(
                            "this name was used by a deleted task; choose another",
                            queue=queue,
                            task=name,
                        )
                    )
                    continue
                if name is None:
                    name = self._fresh_name(state)
                    task.name = name
                eta_usec = to_usec(task.resolve_eta(now))
                task.eta_posix = eta_usec / USEC
                entry = _Entry(name, task.payload, task.tag, eta_usec)
                state.by_name[name] = entry
                state.index(entry)
                outcomes.append(None)
            return outcomes

    def _fresh_name(self, state: _QueueState) -> str:
        while True:
            name = f"task{next(self._names)}"
            if name not in state.by_name and name not in state.tombstones:
                return name

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
            state = self._queue(queue)
            now_usec = to_usec(self._clock())
            if group_by_tag and tag is not None:
                names = _available(state.by_tag.get(tag, SortedList()), now_usec, max_tasks)
            elif group_by_tag:
                names = _available(state.by_eta, now_usec, 1)
                if names:
                    oldest = state.by_name[names[0]].tag
                    if oldest is not None:
                        names = _available(state.by_tag[oldest], now_usec, max_tasks)
                    else:
                        names = [
                            n
                            for n in _available(state.by_eta, now_usec, max_tasks)
                            if state.by_name[n].tag is None
                        ]
            else:
                names = _available(state.by_eta, now_usec, max_tasks)
            if names:
                state.recent_leases.append((now_usec, len(names)))
            expiry = now_usec + to_usec(lease_seconds)
            leased: list[Task] = []
            for name in names:
                entry = state.by_name[name]
                state.unindex(entry)
                entry.eta_usec = expiry
                entry.retry_count += 1
                state.index(entry)
                leased.append(self._as_task(queue, entry))
            return leased

    @staticmethod
    def _as_task(queue: str, entry: _Entry) -> Task:
        return Task.restore(
            payload=entry.payload,
            name=entry.name,
            tag=entry.tag,
            eta_posix=entry.eta_usec / USEC,
            retry_count=entry.retry_count,
            lease_token=str(entry.eta_usec),
            queue_name=queue,
        )

    def modify_lease(self, queue: str, task: Task, lease_seconds: float) -> None:
        assert task.name is not None
        with self._lock:
            state = self._queue(queue)
            entry = state.by_name.get(task.name)
            if entry is None:
                if task.name in state.tombstones:
                    raise TombstonedTaskError(
                        "the task was deleted; its lease cannot change", queue=queue, task=task.name
                    )
                raise TaskLeaseExpiredError(
                    "no such task in the queue", queue=queue, task=task.name
                )
            now_usec = to_usec(self._clock())
            token = task.lease_token or (str(to_usec(task.eta_posix)) if task.eta_posix else "")
            if str(entry.eta_usec) != token or entry.eta_usec < now_usec:
                raise TaskLeaseExpiredError(
                    "the lease has expired or another worker holds it now; lease the task again",
                    queue=queue,
                    task=task.name,
                )
            state.unindex(entry)
            entry.eta_usec = now_usec + to_usec(lease_seconds)
            state.index(entry)
            task.eta_posix = entry.eta_usec / USEC
            task.lease_token = str(entry.eta_usec)

    def delete(self, queue: str, tasks: Sequence[Task]) -> list[bool]:
        with self._lock:
            state = self._queue(queue)
            results: list[bool] = []
            for task in tasks:
                assert task.name is not None
                entry = state.by_name.pop(task.name, None)
                if entry is None:
                    results.append(False)
                    continue
                state.unindex(entry)
                state.tombstones.add(entry.name)
                results.append(True)
            return results

    def purge(self, queue: str) -> None:
        with self._lock:
            state = self._queue(queue)
            state.tombstones.update(state.by_name)
            state.by_name.clear()
            state.by_eta.clear()
            state.by_tag.clear()

    def stats(self, queue: str) -> QueueStats:
        with self._lock:
            state = self._queue(queue)
            now_usec = to_usec(self._clock())
            oldest = state.by_eta[0][0] / USEC if state.by_eta else None
            leased = sum(1 for _ in self._leased(state, now_usec))
            minute_ago = now_usec - 60 * USEC
            executed = sum(n for at, n in state.recent_leases if at > minute_ago)
            return QueueStats(
                queue=queue,
                tasks=len(state.by_name),
                oldest_eta=oldest,
                leased=leased,
                executed_last_minute=executed,
            )

    @staticmethod
    def _leased(state: _QueueState, now_usec: int) -> Iterator[_Entry]:
        for _, name in state.by_eta.irange((now_usec, "")):
            entry = state.by_name[name]
            if entry.retry_count > 0:
                yield entry

    def list_tasks(self, queue: str) -> Iterator[Task]:
        with self._lock:
            state = self._queue(queue)
            snapshot = [self._as_task(queue, state.by_name[n]) for _, n in state.by_eta]
        for task in snapshot:
            task.lease_token = None
            yield task

    def close(self) -> None:
        """Nothing to release: the queues live as long as the object."""


def from_url(url: SplitResult, options: dict[str, Any]) -> MemoryBackend:
    """Build a MemoryBackend for `memory://` (options: clock)."""
    if url.netloc or url.path not in ("", "/"):
        raise ConfigurationError(f"memory:// takes no host or path, got {url.geturl()!r}")
    clock = options.get("clock", time.time)
    return MemoryBackend(clock=clock)
