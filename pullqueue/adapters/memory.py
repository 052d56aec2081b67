"""The in-memory reference backend (`memory://`): exact legacy pull-queue semantics, thread-safe.

It is the oracle the other adapters are tested against (itself checked call by call against the
App Engine SDK's taskqueue stub) and a first-class backend for tests and local rehearsal; binary
heaps with lazy invalidation keep every operation O(log n) per task touched.

How the indexes work (docs/semantics.md says it for users):

- `waiting` is a heap of (eta_usec, name) of the tasks not under lease, future ETAs included;
  `by_tag[tag]` is the same for each tag. Ties on ETA go by name, as in the SDK stub.
- `leases` is a heap of (expiry_usec, name) of the leased tasks. Before each operation, leases
  that ended (expiry < now) move back to `waiting` with their expiry as ETA, the legacy rule.
- Nothing is ever searched for and removed from a heap: when a task is leased, deleted or moved,
  its old heap items simply stop matching the task (its state or ETA changed) and are dropped
  when they reach the top. A compaction rebuilds the heaps once the pushes since the last one
  outnumber the live tasks, so stale items cost O(1) amortized and memory stays O(live tasks).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import SplitResult

from pullqueue.errors import (
    ConfigurationError,
    Error,
    TaskAlreadyExistsError,
    TaskLeaseExpiredError,
    TombstonedTaskError,
)
from pullqueue.task import USEC, QueueStats, Task

_log = logging.getLogger(__name__)
_heappush = heapq.heappush
_heappop = heapq.heappop
_MINUTE_USEC = 60 * USEC
_COMPACT_SLACK = 4096


def _held_lease(task: Task) -> int:
    """The lease expiry (usec) a task object holds: its lease token, else its ETA (legacy)."""
    if task.lease_token is not None and task.lease_token.isdigit():
        return int(task.lease_token)
    if task.eta_posix is not None:
        return round(task.eta_posix * 1e6)
    return -1


def _usec(seconds: float) -> int:
    """Seconds to whole microseconds, truncated, as the SDK stub reads its clock and leases."""
    return int(seconds * 1e6)


class _Entry:
    """One task in a queue. `eta` is the ETA while waiting and the lease expiry while leased."""

    __slots__ = ("eta", "leased", "name", "payload", "retry_count", "retry_limit", "tag")

    def __init__(
        self, name: str, payload: bytes, tag: str | None, eta: int, retry_limit: int | None
    ) -> None:
        self.name = name
        self.payload = payload
        self.tag = tag
        self.eta = eta
        self.retry_count = 0
        self.retry_limit = retry_limit
        self.leased = False


class _QueueState:
    """The tasks of one queue and the heaps that order them (see the module docstring)."""

    __slots__ = (
        "by_tag",
        "executed",
        "executed_total",
        "leased",
        "leases",
        "pushes",
        "retry_limit",
        "tasks",
        "used_names",
        "waiting",
    )

    def __init__(self, retry_limit: int | None) -> None:
        self.retry_limit = retry_limit
        self.tasks: dict[str, _Entry] = {}
        self.used_names: set[str] = set()
        self.waiting: list[tuple[int, str]] = []
        self.by_tag: dict[str, list[tuple[int, str]]] = {}
        self.leases: list[tuple[int, str]] = []
        self.leased = 0
        self.pushes = 0
        self.executed: deque[tuple[int, int]] = deque()
        self.executed_total = 0

    def wait(self, entry: _Entry) -> None:
        """Index a task that is not under lease (just added, released or its lease ended)."""
        item = (entry.eta, entry.name)
        _heappush(self.waiting, item)
        if entry.tag is not None:
            heap = self.by_tag.get(entry.tag)
            if heap is None:
                self.by_tag[entry.tag] = [item]
            else:
                _heappush(heap, item)
            self.pushes += 2
        else:
            self.pushes += 1

    def release_expired(self, now: int) -> None:
        """Move tasks whose lease ended (expiry < now) back among the waiting ones."""
        leases, tasks = self.leases, self.tasks
        while leases and leases[0][0] < now:
            expiry, name = _heappop(leases)
            entry = tasks.get(name)
            if entry is not None and entry.leased and entry.eta == expiry:
                entry.leased = False
                self.leased -= 1
                self.wait(entry)

    def oldest_waiting(self) -> _Entry | None:
        """The waiting task with the smallest (ETA, name), dropping stale items on the way."""
        waiting, tasks = self.waiting, self.tasks
        while waiting:
            eta, name = waiting[0]
            entry = tasks.get(name)
            if entry is not None and not entry.leased and entry.eta == eta:
                return entry
            _heappop(waiting)
        return None

    def oldest_lease(self) -> _Entry | None:
        """The leased task whose lease ends first, dropping stale items on the way."""
        leases, tasks = self.leases, self.tasks
        while leases:
            expiry, name = leases[0]
            entry = tasks.get(name)
            if entry is not None and entry.leased and entry.eta == expiry:
                return entry
            _heappop(leases)
        return None

    def take(self, heap: list[tuple[int, str]], now: int, limit: int) -> list[_Entry]:
        """Up to `limit` available tasks (ETA < now) from heap, oldest first, marked leased."""
        tasks = self.tasks
        taken: list[_Entry] = []
        while heap and len(taken) < limit and heap[0][0] < now:
            eta, name = _heappop(heap)
            entry = tasks.get(name)
            if entry is not None and not entry.leased and entry.eta == eta:
                entry.leased = True
                taken.append(entry)
        return taken

    def take_untagged(self, now: int, limit: int) -> list[_Entry]:
        """The untagged tasks among the `limit` oldest available ones, marked leased.

        The SDK stub's rule for lease_tasks_by_tag(tag=None) when the oldest task is untagged:
        it reads the first max_tasks available tasks by ETA and keeps only the untagged ones.
        """
        waiting, tasks = self.waiting, self.tasks
        taken: list[_Entry] = []
        passed: list[tuple[int, str]] = []
        seen: set[str] = set()
        while waiting and len(seen) < limit and waiting[0][0] < now:
            item = _heappop(waiting)
            entry = tasks.get(item[1])
            if entry is None or entry.leased or entry.eta != item[0] or item[1] in seen:
                continue
            seen.add(item[1])
            if entry.tag is None:
                entry.leased = True
                taken.append(entry)
            else:
                passed.append(item)
        for item in passed:
            _heappush(waiting, item)
        return taken

    def maybe_compact(self) -> None:
        """Rebuild the heaps without stale items once pushes outnumber the live tasks."""
        if self.pushes <= len(self.tasks) + _COMPACT_SLACK:
            return
        self.pushes = 0
        tasks = self.tasks
        waiting: list[tuple[int, str]] = []
        leases: list[tuple[int, str]] = []
        by_tag: dict[str, list[tuple[int, str]]] = {}
        for name, entry in tasks.items():
            item = (entry.eta, name)
            if entry.leased:
                leases.append(item)
                continue
            waiting.append(item)
            if entry.tag is not None:
                tagged = by_tag.get(entry.tag)
                if tagged is None:
                    by_tag[entry.tag] = [item]
                else:
                    tagged.append(item)
        heapq.heapify(waiting)
        heapq.heapify(leases)
        for tagged in by_tag.values():
            heapq.heapify(tagged)
        self.waiting, self.leases, self.by_tag = waiting, leases, by_tag

    def count_executed(self, now: int, leased: int) -> None:
        """Record `leased` tasks handed out at `now` for executed_last_minute."""
        if leased:
            self.executed.append((now, leased))
            self.executed_total += leased
            self.executed_last_minute(now)

    def executed_last_minute(self, now: int) -> int:
        """Tasks leased in the 60 seconds up to now."""
        executed = self.executed
        while executed and executed[0][0] <= now - _MINUTE_USEC:
            self.executed_total -= executed.popleft()[1]
        return self.executed_total


class MemoryBackend:
    """Pull queues in this process's memory, thread-safe, on an injectable clock.

    `clock` returns POSIX seconds (default `time.time`); tests pass a fake one to move time.
    `retry_limits` maps queue names to the legacy queue.yaml `task_retry_limit`: a task already
    leased that many times (or its own `Task.retry_limit` times, when set) is deleted instead of
    being leased again. Queues are created on first
    use. Task names, once used in a queue, stay tombstoned for the life of the backend (deleted
    and purged tasks included), as in the legacy service's stub.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        retry_limits: Mapping[str, int] | None = None,
    ) -> None:
        self.url = "memory://"
        self._clock = clock
        self._retry_limits = dict(retry_limits or {})
        self._lock = threading.Lock()
        self._queues: dict[str, _QueueState] = {}
        self._names = itertools.count(1)

    def now(self) -> float:
        return self._clock()

    def _queue(self, queue: str) -> _QueueState:
        state = self._queues.get(queue)
        if state is None:
            state = self._queues[queue] = _QueueState(self._retry_limits.get(queue))
        return state

    def add(self, queue: str, tasks: Sequence[Task]) -> list[Error | None]:
        with self._lock:
            state = self._queue(queue)
            now = self._clock()
            live, used = state.tasks, state.used_names
            outcomes: list[Error | None] = []
            for task in tasks:
                name = task.name
                if name is None:
                    name = self._fresh_name(state)
                    task.name = name
                elif name in live:
                    outcomes.append(
                        TaskAlreadyExistsError(
                            "a task with this name is in the queue; choose another name, or"
                            " treat the task as already added",
                            queue=queue,
                            task=name,
                        )
                    )
                    continue
                elif name in used:
                    outcomes.append(
                        TombstonedTaskError(
                            "a task with this name was in the queue and was deleted or purged;"
                            " names are never reused: choose another name",
                            queue=queue,
                            task=name,
                        )
                    )
                    continue
                eta_posix = task.eta_posix
                if eta_posix is None:
                    eta_posix = task.resolve_eta(now)
                eta = round(eta_posix * 1e6)
                task.eta_posix = eta / USEC
                limit = task.retry_limit if task.retry_limit is not None else state.retry_limit
                entry = _Entry(name, task.payload, task.tag or None, eta, limit)
                live[name] = entry
                used.add(name)
                state.wait(entry)
                outcomes.append(None)
            state.maybe_compact()
            return outcomes

    def _fresh_name(self, state: _QueueState) -> str:
        """task1, task2, ... as the SDK stub names them, skipping names the queue has used."""
        while True:
            name = f"task{next(self._names)}"
            if name not in state.used_names:
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
            now = _usec(self._clock())
            state.release_expired(now)
            if tag:
                heap = state.by_tag.get(tag)
                chosen = state.take(heap, now, max_tasks) if heap else []
            elif group_by_tag:
                oldest = state.oldest_waiting()
                if oldest is None or oldest.eta >= now:
                    chosen = []
                elif oldest.tag is not None:
                    chosen = state.take(state.by_tag[oldest.tag], now, max_tasks)
                else:
                    chosen = state.take_untagged(now, max_tasks)
            else:
                chosen = state.take(state.waiting, now, max_tasks)
            leased = self._hand_out(queue, state, chosen, now + _usec(lease_seconds))
            state.count_executed(now, len(leased))
            state.maybe_compact()
            return leased

    @staticmethod
    def _hand_out(queue: str, state: _QueueState, chosen: list[_Entry], expiry: int) -> list[Task]:
        """Put the chosen entries under lease until expiry and return them as tasks.

        A task already leased retry_limit times is deleted instead (the legacy rule).
        """
        leases = state.leases
        expiry_posix = expiry / USEC
        token = str(expiry)
        leased: list[Task] = []
        for entry in chosen:
            if entry.retry_limit is not None and entry.retry_count >= entry.retry_limit:
                _log.warning(
                    "task %s in queue %s cannot be leased again after %d leases; deleted",
                    entry.name,
                    queue,
                    entry.retry_count,
                )
                del state.tasks[entry.name]
                continue
            entry.eta = expiry
            entry.retry_count += 1
            _heappush(leases, (expiry, entry.name))
            leased.append(
                Task.restore(
                    payload=entry.payload,
                    name=entry.name,
                    tag=entry.tag,
                    eta_posix=expiry_posix,
                    retry_count=entry.retry_count,
                    lease_token=token,
                    queue_name=queue,
                )
            )
        state.leased += len(leased)
        state.pushes += len(leased)
        return leased

    def modify_lease(self, queue: str, task: Task, lease_seconds: float) -> None:
        name = task.name
        if name is None:
            raise TaskLeaseExpiredError("a task without a name holds no lease", queue=queue)
        with self._lock:
            state = self._queue(queue)
            entry = state.tasks.get(name)
            if entry is None:
                if name in state.used_names:
                    raise TombstonedTaskError(
                        "the task was deleted (or purged); its lease cannot change",
                        queue=queue,
                        task=name,
                    )
                raise Error(
                    "no task of this name is in the queue; modify_lease needs a task returned"
                    " by a lease",
                    queue=queue,
                    task=name,
                )
            now = _usec(self._clock())
            state.release_expired(now)
            held = _held_lease(task)
            if entry.eta != held or entry.eta < now:
                raise TaskLeaseExpiredError(
                    "the lease has expired or another worker holds it now: stop working on"
                    " the task and lease it again",
                    queue=queue,
                    task=name,
                )
            entry.eta = now + _usec(lease_seconds)
            if entry.leased and lease_seconds == 0:
                entry.leased = False
                state.leased -= 1
            if entry.leased:
                _heappush(state.leases, (entry.eta, name))
                state.pushes += 1
            else:
                state.wait(entry)
            state.maybe_compact()
            task.eta_posix = entry.eta / USEC
            task.lease_token = str(entry.eta)

    def delete(self, queue: str, tasks: Sequence[Task]) -> list[bool]:
        with self._lock:
            state = self._queue(queue)
            live = state.tasks
            results: list[bool] = []
            for task in tasks:
                entry = live.pop(task.name, None)  # type: ignore[arg-type]
                if entry is None:
                    results.append(False)
                else:
                    if entry.leased:
                        state.leased -= 1
                    results.append(True)
            return results

    def purge(self, queue: str) -> None:
        with self._lock:
            state = self._queue(queue)
            state.tasks.clear()
            state.waiting.clear()
            state.by_tag.clear()
            state.leases.clear()
            state.leased = 0
            state.pushes = 0

    def stats(self, queue: str) -> QueueStats:
        with self._lock:
            state = self._queue(queue)
            now = _usec(self._clock())
            state.release_expired(now)
            etas = [e.eta for e in (state.oldest_waiting(), state.oldest_lease()) if e is not None]
            return QueueStats(
                queue=queue,
                tasks=len(state.tasks),
                oldest_eta=min(etas) / USEC if etas else None,
                leased=state.leased,
                executed_last_minute=state.executed_last_minute(now),
            )

    def list_tasks(self, queue: str) -> Iterator[Task]:
        """Every task of the queue, leased or not, oldest ETA (or lease expiry) first."""
        with self._lock:
            state = self._queue(queue)
            snapshot = [
                Task.restore(
                    payload=e.payload,
                    name=e.name,
                    tag=e.tag,
                    eta_posix=e.eta / USEC,
                    retry_count=e.retry_count,
                    queue_name=queue,
                )
                for e in sorted(state.tasks.values(), key=lambda e: (e.eta, e.name))
            ]
        yield from snapshot

    def close(self) -> None:
        """Nothing to release: the queues live as long as the object."""


def from_url(url: SplitResult, options: dict[str, Any]) -> MemoryBackend:
    """Build a MemoryBackend for `memory://` (options: clock, retry_limits)."""
    if url.netloc or url.path not in ("", "/"):
        raise ConfigurationError(f"memory:// takes no host or path, got {url.geturl()!r}")
    clock = options.get("clock", time.time)
    return MemoryBackend(clock=clock, retry_limits=options.get("retry_limits"))
