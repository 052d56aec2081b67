"""The in-memory reference backend (`memory://`): exact legacy pull-queue semantics, thread-safe.

It is the oracle the other adapters are tested against (itself checked call by call against the
App Engine SDK's taskqueue stub) and a first-class backend for tests and local rehearsal; its
indexes keep every operation O(log n) per task touched, and nothing ever scans a whole queue.

How the indexes work (docs/semantics.md says it for users):

- An `_EtaOrder` keeps task names in (ETA, name) order, ties going by name as in the SDK stub:
  a heap of the distinct ETAs, each with a heap of its names. Tasks added in one call share an
  ETA and tasks leased in one call share an expiry, so a pop costs O(log batch), not
  O(log queue); with every ETA distinct it is a plain binary heap, O(log n).
- `waiting` orders the tasks not under lease (future ETAs included), `by_tag[tag]` those of each
  tag, and `leases` the leased tasks by expiry. Before each operation, leases that ended
  (expiry < now) go back to `waiting` with their expiry as ETA, the legacy rule.
- Nothing is ever searched for and removed from an index: when a task is leased, deleted or
  moved, its old entries stop matching the task (its state or ETA changed) and are dropped when
  they come first. A live task has at most two valid entries, so once the indexes hold more than
  four per live task a compaction rebuilds them: stale entries cost O(1) amortized and memory
  stays O(live tasks).
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
_heapify = heapq.heapify
_MINUTE_USEC = 60 * USEC
_HOUR_USEC = 3600 * USEC
_COMPACT_SLACK = 4096


def _usec(seconds: float) -> int:
    """Seconds to whole microseconds, truncated, as the SDK stub reads its clock and leases."""
    return int(seconds * 1e6)


def _held_lease(task: Task) -> int:
    """The lease expiry (usec) a task object holds: its lease token, else its ETA (legacy)."""
    if task.lease_token is not None and task.lease_token.isdigit():
        return int(task.lease_token)
    if task.eta_posix is not None:
        return round(task.eta_posix * 1e6)
    return -1


def _name_taken(queue: str, name: str, live: bool) -> Error:
    """The error for adding a name the queue has used: in the queue now, or tombstoned."""
    if live:
        return TaskAlreadyExistsError(
            "a task with this name is in the queue; choose another name, or treat the task as"
            " already added",
            queue=queue,
            task=name,
        )
    return TombstonedTaskError(
        "a task with this name was in the queue and was deleted or purged; names are never"
        " reused: choose another name",
        queue=queue,
        task=name,
    )


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


class _EtaOrder:
    """Task names in (ETA, name) order: a heap of distinct ETAs, each with a heap of names."""

    __slots__ = ("buckets", "etas")

    def __init__(self, buckets: dict[int, list[str]] | None = None) -> None:
        self.buckets: dict[int, list[str]] = buckets if buckets is not None else {}
        self.etas: list[int] = list(self.buckets)
        if buckets:
            _heapify(self.etas)
            for names in buckets.values():
                if len(names) > 1:
                    _heapify(names)

    def push(self, eta: int, name: str) -> None:
        bucket = self.buckets.get(eta)
        if bucket is None:
            self.buckets[eta] = [name]
            _heappush(self.etas, eta)
        else:
            _heappush(bucket, name)

    def push_all(self, eta: int, names: list[str]) -> None:
        """Push names sharing one ETA (names is kept: the caller hands it over)."""
        bucket = self.buckets.get(eta)
        if bucket is None:
            _heapify(names)
            self.buckets[eta] = names
            _heappush(self.etas, eta)
        else:
            for name in names:
                _heappush(bucket, name)

    def __len__(self) -> int:
        return sum(map(len, self.buckets.values()))


class _Recent:
    """A count of events in the last `span` microseconds: (time, count) pairs, dropped as they
    age; events less than `merge` microseconds after the newest kept pair join it, which bounds
    an hour's pairs at 3,600 with `merge` one second (they then age up to that much early)."""

    __slots__ = ("_events", "_merge", "_span", "_total")

    def __init__(self, span: int, merge: int = 0) -> None:
        self._events: deque[tuple[int, int]] = deque()
        self._total = 0
        self._span = span
        self._merge = merge

    def add(self, now: int, count: int) -> None:
        """Record `count` events at `now` (microseconds)."""
        if count:
            events = self._events
            if self._merge and events and now - events[-1][0] < self._merge:
                at, before = events[-1]
                events[-1] = (at, before + count)
            else:
                events.append((now, count))
            self._total += count
            self.total(now)

    def total(self, now: int) -> int:
        """The events of the span up to now."""
        events = self._events
        while events and events[0][0] <= now - self._span:
            self._total -= events.popleft()[1]
        return self._total


class _QueueState:
    """The tasks of one queue and the orders that index them (see the module docstring)."""

    __slots__ = (
        "by_tag",
        "completed",
        "executed",
        "executed_hour",
        "items",
        "leased",
        "leases",
        "retry_limit",
        "tasks",
        "used_names",
        "waiting",
    )

    def __init__(self, retry_limit: int | None) -> None:
        self.retry_limit = retry_limit
        self.tasks: dict[str, _Entry] = {}
        self.used_names: set[str] = set()
        self.waiting = _EtaOrder()
        self.by_tag: dict[str, _EtaOrder] = {}
        self.leases = _EtaOrder()
        self.leased = 0
        self.items = 0
        self.executed = _Recent(_MINUTE_USEC)  # tasks leased
        self.executed_hour = _Recent(_HOUR_USEC, USEC)
        self.completed = _Recent(_MINUTE_USEC)  # leased tasks deleted by their holder

    def wait(self, entry: _Entry) -> None:
        """Index a task that is not under lease (just added, released or its lease ended)."""
        self.waiting.push(entry.eta, entry.name)
        if entry.tag is None:
            self.items += 1
            return
        order = self.by_tag.get(entry.tag)
        if order is None:
            order = self.by_tag[entry.tag] = _EtaOrder()
        order.push(entry.eta, entry.name)
        self.items += 2

    def release_expired(self, now: int) -> None:
        """Move tasks whose lease ended (expiry < now) back among the waiting ones."""
        etas, buckets, tasks = self.leases.etas, self.leases.buckets, self.tasks
        while etas and etas[0] < now:
            expiry = _heappop(etas)
            names = buckets.pop(expiry)
            self.items -= len(names)
            for name in names:
                entry = tasks.get(name)
                if entry is not None and entry.leased and entry.eta == expiry:
                    entry.leased = False
                    self.leased -= 1
                    self.wait(entry)

    def first(self, order: _EtaOrder, leased: bool) -> _Entry | None:
        """The first valid task of order (leased or waiting ones), dropping stale entries."""
        etas, buckets, tasks = order.etas, order.buckets, self.tasks
        while etas:
            eta = etas[0]
            bucket = buckets[eta]
            while bucket:
                entry = tasks.get(bucket[0])
                if entry is not None and entry.leased is leased and entry.eta == eta:
                    return entry
                _heappop(bucket)
                self.items -= 1
            _heappop(etas)
            del buckets[eta]
        return None

    def take(self, order: _EtaOrder, now: int, limit: int) -> list[_Entry]:
        """Up to `limit` available tasks (ETA < now) of order, oldest first, marked leased."""
        etas, buckets, tasks = order.etas, order.buckets, self.tasks
        taken: list[_Entry] = []
        popped = 0
        while etas and etas[0] < now:
            eta = etas[0]
            bucket = buckets[eta]
            # Never pop more names than tasks still wanted, so none has to be put back.
            if len(bucket) <= limit - len(taken):
                names = sorted(bucket)
                bucket.clear()
            else:
                names = [_heappop(bucket) for _ in range(limit - len(taken))]
            popped += len(names)
            for name in names:
                entry = tasks.get(name)
                if entry is not None and not entry.leased and entry.eta == eta:
                    entry.leased = True
                    taken.append(entry)
            if not bucket:
                _heappop(etas)
                del buckets[eta]
            if len(taken) == limit:
                break
        self.items -= popped
        return taken

    def take_untagged(self, now: int, limit: int) -> list[_Entry]:
        """The untagged tasks among the `limit` oldest available ones, marked leased.

        The SDK stub's rule for lease_tasks_by_tag(tag=None) when the oldest task is untagged:
        it reads the first max_tasks available tasks by ETA and keeps only the untagged ones.
        """
        seen = 0
        taken: list[_Entry] = []
        passed: list[_Entry] = []
        while seen < limit:
            entry = self.first(self.waiting, False)
            if entry is None or entry.eta >= now:
                break
            _heappop(self.waiting.buckets[entry.eta])
            self.items -= 1
            seen += 1
            entry.leased = True
            (taken if entry.tag is None else passed).append(entry)
        for entry in passed:
            entry.leased = False
            self.waiting.push(entry.eta, entry.name)
        self.items += len(passed)
        return taken

    def maybe_compact(self) -> None:
        """Rebuild the indexes without stale entries once they hold over 4 per live task."""
        if self.items <= 4 * len(self.tasks) + _COMPACT_SLACK:
            return
        waiting: dict[int, list[str]] = {}
        leases: dict[int, list[str]] = {}
        by_tag: dict[str, dict[int, list[str]]] = {}
        tagged = 0
        for name, entry in self.tasks.items():
            eta = entry.eta
            buckets = leases if entry.leased else waiting
            bucket = buckets.get(eta)
            if bucket is None:
                buckets[eta] = [name]
            else:
                bucket.append(name)
            if entry.tag is None or entry.leased:
                continue
            tagged += 1
            tag_buckets = by_tag.get(entry.tag)
            if tag_buckets is None:
                by_tag[entry.tag] = {eta: [name]}
            elif eta in tag_buckets:
                tag_buckets[eta].append(name)
            else:
                tag_buckets[eta] = [name]
        self.waiting, self.leases = _EtaOrder(waiting), _EtaOrder(leases)
        self.by_tag = {tag: _EtaOrder(buckets) for tag, buckets in by_tag.items()}
        self.items = len(self.tasks) + tagged


def _process_clock() -> float:
    """`time.time()`, looked up at each call as the SDK's stub reads it: a test that stubs
    `time.time` moves the backend's clock with the ETAs `Task()` takes from it."""
    return time.time()


class MemoryBackend:
    """Pull queues in this process's memory, thread-safe, on an injectable clock.

    `clock` returns POSIX seconds (default `time.time()`, looked up at each call); tests pass a
    fake one to move time.
    `retry_limits` maps queue names to the legacy queue.yaml `task_retry_limit`: a task already
    leased that many times (or its own `Task.retry_limit` times, when set) is deleted instead of
    being leased again. Queues are created on first use. Task names, once used in a queue, stay
    tombstoned for the life of the backend (deleted and purged tasks included), as in the legacy
    service's stub.
    """

    def __init__(
        self,
        clock: Callable[[], float] = _process_clock,
        retry_limits: Mapping[str, int] | None = None,
    ) -> None:
        self.url = "memory://"
        self._clock = clock
        self._retry_limits = dict(retry_limits or {})
        self._lock = threading.Lock()
        self._queues: dict[str, _QueueState] = {}
        self._names = itertools.count(1)
        self._paused: dict[str, float] = {}
        """Queue -> when it was paused (pullqueue.pause): its leases answer [] meanwhile."""

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
            # Tasks without an ETA (most) are due now: one rounding for the call, and their
            # names go into the waiting order as one bucket (one heap push, not one per task).
            now_eta = round(now * 1e6)
            now_posix = now_eta / USEC
            due_now: list[str] = []
            live, used, by_tag = state.tasks, state.used_names, state.by_tag
            push = state.waiting.push
            queue_limit = state.retry_limit
            outcomes: list[Error | None] = []
            pushed = tagged = 0
            for task in tasks:
                name = task.name
                if name is None:
                    name = f"task{next(self._names)}"
                    if name in used:
                        name = self._fresh_name(state)
                    task.name = name
                elif name in used:
                    outcomes.append(_name_taken(queue, name, name in live))
                    continue
                eta_posix = task.eta_posix
                if eta_posix is None:
                    eta_posix = task.resolve_eta(now)
                if eta_posix == now:
                    eta = now_eta
                    task.eta_posix = now_posix
                    due_now.append(name)
                else:
                    eta = round(eta_posix * 1e6)
                    task.eta_posix = eta / USEC
                    push(eta, name)
                    pushed += 1
                limit = task.retry_limit
                tag = task.tag or None
                live[name] = _Entry(
                    name, task.payload, tag, eta, queue_limit if limit is None else limit
                )
                used.add(name)
                if tag is not None:
                    order = by_tag.get(tag)
                    if order is None:
                        order = by_tag[tag] = _EtaOrder()
                    order.push(eta, name)
                    tagged += 1
                outcomes.append(None)
            if due_now:
                state.waiting.push_all(now_eta, due_now)
            state.items += len(due_now) + pushed + tagged
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
            if queue in self._paused:
                return []
            now = _usec(self._clock())
            state.release_expired(now)
            if tag:
                order = state.by_tag.get(tag)
                chosen = state.take(order, now, max_tasks) if order is not None else []
            elif group_by_tag:
                oldest = state.first(state.waiting, False)
                if oldest is None or oldest.eta >= now:
                    chosen = []
                elif oldest.tag is not None:
                    chosen = state.take(state.by_tag[oldest.tag], now, max_tasks)
                else:
                    chosen = state.take_untagged(now, max_tasks)
            else:
                chosen = state.take(state.waiting, now, max_tasks)
            leased = self._hand_out(queue, state, chosen, now + _usec(lease_seconds))
            state.executed.add(now, len(leased))
            state.executed_hour.add(now, len(leased))
            state.maybe_compact()
            return leased

    @staticmethod
    def _hand_out(queue: str, state: _QueueState, chosen: list[_Entry], expiry: int) -> list[Task]:
        """Put the chosen entries under lease until expiry and return them as tasks.

        A task already leased retry_limit times is deleted instead (the legacy rule).
        """
        expiry_posix = expiry / USEC
        token = str(expiry)
        restore = Task.restore
        names: list[str] = []
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
            names.append(entry.name)
            leased.append(
                restore(
                    payload=entry.payload,
                    name=entry.name,
                    tag=entry.tag,
                    eta_posix=expiry_posix,
                    retry_count=entry.retry_count,
                    lease_token=token,
                    queue_name=queue,
                )
            )
        if names:
            state.leases.push_all(expiry, names)
        state.leased += len(leased)
        state.items += len(leased)
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
            if entry.eta != _held_lease(task) or entry.eta < now:
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
                state.leases.push(entry.eta, name)
                state.items += 1
            else:
                state.wait(entry)
            state.maybe_compact()
            task.eta_posix = entry.eta / USEC
            task.lease_token = str(entry.eta)

    def delete(self, queue: str, tasks: Sequence[Task]) -> list[bool]:
        with self._lock:
            state = self._queue(queue)
            pop = state.tasks.pop
            results: list[bool] = []
            ended = 0
            for task in tasks:
                entry = pop(task.name, None)  # type: ignore[arg-type]
                if entry is None:
                    results.append(False)
                else:
                    ended += entry.leased
                    results.append(True)
            state.leased -= ended
            state.completed.add(_usec(self._clock()), ended)
            state.maybe_compact()
            return results

    def purge(self, queue: str) -> None:
        with self._lock:
            state = self._queue(queue)
            state.tasks.clear()
            state.waiting, state.leases, state.by_tag = _EtaOrder(), _EtaOrder(), {}
            state.leased = 0
            state.items = 0

    def stats(self, queue: str) -> QueueStats:
        with self._lock:
            state = self._queue(queue)
            now = _usec(self._clock())
            state.release_expired(now)
            firsts = (state.first(state.waiting, False), state.first(state.leases, True))
            etas = [entry.eta for entry in firsts if entry is not None]
            return QueueStats(
                queue=queue,
                tasks=len(state.tasks),
                oldest_eta=min(etas) / USEC if etas else None,
                leased=state.leased,
                executed_last_minute=state.executed.total(now),
                executed_last_hour=state.executed_hour.total(now),
            )

    def set_paused(self, queue: str, paused: bool) -> None:
        """Pause (leases answer [] until resumed; adds, deletes and lease changes still work)
        or resume the queue; at once, as every user of this object shares it."""
        with self._lock:
            self._queue(queue)
            if not paused:
                self._paused.pop(queue, None)
            elif queue not in self._paused:
                self._paused[queue] = self._clock()

    def paused_since(self, queue: str, *, fresh: bool = False) -> float | None:
        """When the queue was paused (this backend's clock), None while it runs."""
        with self._lock:
            return self._paused.get(queue)

    def list_tasks(self, queue: str) -> Iterator[Task]:
        """Every task of the queue, leased or not, oldest ETA (or lease expiry) first."""
        with self._lock:
            state = self._queue(queue)
            ordered = sorted(state.tasks.values(), key=lambda e: (e.eta, e.name))
            snapshot = [_listed(e, queue) for e in ordered]
        yield from snapshot

    def get_task(self, queue: str, name: str) -> Task | None:
        """The task of this name as a listing shows it (leased or not), None when absent."""
        with self._lock:
            state = self._queue(queue)
            state.release_expired(_usec(self._clock()))
            entry = state.tasks.get(name)
            return None if entry is None else _listed(entry, queue)

    def find_payload(self, queue: str, needle: bytes, limit: int) -> tuple[list[Task], int]:
        """Up to `limit` tasks whose payload contains `needle` in (ETA, name) order, and how
        many tasks of the queue contain it: one pass over the whole queue, exact."""
        with self._lock:
            matches = [e for e in self._queue(queue).tasks.values() if needle in e.payload]
            first = heapq.nsmallest(limit, matches, key=lambda e: (e.eta, e.name))
            return [_listed(e, queue) for e in first], len(matches)

    def list_queues(self) -> list[str]:
        """Every queue this backend has seen used, sorted by name."""
        with self._lock:
            return sorted(self._queues)

    def task_page(
        self, queue: str, *, tag: str | None, after: tuple[float, str] | None, limit: int
    ) -> list[Task]:
        """Up to `limit` tasks (of `tag`) in (ETA, name) order past `after`: one pass over the
        queue keeping the `limit` smallest, so a page costs O(n log limit), not a sort."""
        with self._lock:
            state = self._queue(queue)
            entries: Iterator[_Entry] = iter(state.tasks.values())
            if tag is not None:
                entries = (e for e in entries if e.tag == tag)
            if after is not None:
                cursor = (round(after[0] * 1e6), after[1])
                entries = (e for e in entries if (e.eta, e.name) > cursor)
            page = heapq.nsmallest(limit, entries, key=lambda e: (e.eta, e.name))
            return [_listed(e, queue) for e in page]

    def tombstoned(self, queue: str, names: Sequence[str]) -> set[str]:
        """The names among `names` used in the queue whose task is gone (deleted, purged)."""
        with self._lock:
            state = self._queue(queue)
            return {n for n in names if n in state.used_names and n not in state.tasks}

    def tag_counts(self, queue: str) -> dict[str | None, int]:
        """Tasks per tag (None: untagged), leased ones included."""
        with self._lock:
            counts: dict[str | None, int] = {}
            for entry in self._queue(queue).tasks.values():
                counts[entry.tag] = counts.get(entry.tag, 0) + 1
            return counts

    def completed_last_minute(self, queue: str) -> int:
        """Leased tasks deleted (completed by their holder) in the last 60 seconds."""
        with self._lock:
            return self._queue(queue).completed.total(_usec(self._clock()))

    def close(self) -> None:
        """Nothing to release: the queues live as long as the object."""

    def queue_identity(self, queue: str) -> str:
        """This object's queue: two MemoryBackend objects never share one."""
        return f"memory://{id(self):x}/{queue}"


def from_url(url: SplitResult, options: dict[str, Any]) -> MemoryBackend:
    """Build a MemoryBackend for `memory://` (options: clock, retry_limits)."""
    if url.netloc or url.path not in ("", "/"):
        raise ConfigurationError(f"memory:// takes no host or path, got {url.geturl()!r}")
    clock = options.get("clock", time.time)
    return MemoryBackend(clock=clock, retry_limits=options.get("retry_limits"))


def _listed(entry: _Entry, queue: str) -> Task:
    """A task as a listing shows it (not leased by the caller): its fields and retry count."""
    return Task.restore(
        payload=entry.payload,
        name=entry.name,
        tag=entry.tag,
        eta_posix=entry.eta / USEC,
        retry_count=entry.retry_count,
        queue_name=queue,
    )
