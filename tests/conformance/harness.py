"""What a backend brings to the conformance suite: a backend, a clock to move, fresh queues.

Each `case_<backend>.py` beside this file exposes `CASE: BackendCase`; conftest parametrizes the
suite over every case, leaving out only the features a case documents as behaving differently.

How a backend joins: write `tests/conformance/case_<name>.py` with

    CASE = BackendCase(name="<name>", open=<context manager yielding a Harness>,
                       differs={"<feature>": "why this backend behaves differently"})

A test that needs a feature carries `@pytest.mark.feature("<feature>", ...)`; it is not generated
for a case listing that feature in `differs` (never skipped). Feature names (FEATURES below):

- exact_eta_order: a lease returns the available tasks strictly oldest ETA first (ties by name).
- future_eta: a task with a future ETA (eta= or countdown=) is not leased before it is due.
- lease_expiry: a lease neither deleted nor extended ends after lease_seconds; the task can then
  be leased again, with retry_count one higher.
- oldest_tag: lease_tasks_by_tag(tag=None) leases the tag of the oldest available task, and only
  untagged tasks (among the max_tasks oldest) when that task is untagged.
- unique_names: adding a name that is in the queue raises TaskAlreadyExistsError.
- tombstones: a deleted name stays tombstoned (TombstonedTaskError on re-add and on modify).
- purge_tombstones: names of purged tasks are tombstoned too (the legacy stub's rule).
- lease_token: modify_lease refuses (TaskLeaseExpiredError) a lease that expired or that another
  holder took since; a current lease can be extended, or released with 0.
- delete_unleased: delete/delete_by_name work on tasks this process does not hold a lease on.
- stats_exact: stats() reports exact `tasks` and `oldest_eta` (the oldest ETA, leased included).
- stats_leased: stats().leased is the number of tasks under a current lease.
- executed_last_minute: stats().executed_last_minute counts tasks leased in the last 60 s.
- retry_limit: a task added with Task(retry_limit=N) is deleted instead of being leased an
  N+1th time (the legacy task_retry_limit).
- full_mib_payload: a payload of exactly MAX_PULL_TASK_SIZE_BYTES is accepted (the legacy
  service counts its own request overhead against that limit, so it refuses one).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from pullqueue import Backend, Queue

FEATURES: Mapping[str, str] = {
    "exact_eta_order": "leases return available tasks strictly oldest ETA first",
    "future_eta": "tasks with a future ETA wait until due",
    "lease_expiry": "an expired lease makes the task leasable again, retry_count + 1",
    "oldest_tag": "lease_tasks_by_tag(tag=None) follows the oldest available task's tag",
    "unique_names": "TaskAlreadyExistsError for a name already in the queue",
    "tombstones": "deleted names stay tombstoned",
    "purge_tombstones": "purged names are tombstoned",
    "lease_token": "modify_lease only on the current lease; 0 releases",
    "delete_unleased": "delete by name works without holding the lease",
    "stats_exact": "stats() tasks and oldest_eta are exact",
    "stats_leased": "stats().leased counts tasks under lease",
    "executed_last_minute": "stats().executed_last_minute counts leases of the last minute",
    "retry_limit": "Task(retry_limit=N) is deleted instead of a lease number N+1",
    "full_mib_payload": "a payload of exactly 1 MiB is accepted",
}

_counter = itertools.count(1)


@dataclass
class Harness:
    """One backend under test with the means to drive it."""

    backend: Backend
    advance: Callable[[float], None]
    """Move the backend's clock forward by seconds: a fake clock ticks, a real one sleeps."""
    short_lease: float = 1.0
    """The shortest lease (seconds) whose expiry the backend honours precisely."""
    prefix: str = "conf"

    def new_queue(self) -> Queue:
        """A fresh, empty queue on this backend (a unique legal queue name)."""
        return Queue(f"{self.prefix}-{next(_counter)}", self.backend)


@dataclass
class BackendCase:
    """A backend the conformance suite runs on."""

    name: str
    open: Callable[[], AbstractContextManager[Harness]]
    differs: Mapping[str, str] = field(default_factory=dict)
    """feature -> why this backend behaves differently (documented, and tested on its own)."""


class FakeClock:
    """A settable clock for backends that take `clock=`: `advance()` moves it, nothing sleeps."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock forward by seconds."""
        with self._lock:
            self._now += seconds

    def set(self, now: float) -> None:
        """Put the clock at `now` (POSIX seconds)."""
        self._now = now


def iter_cases() -> Iterator[BackendCase]:
    """Every CASE in the case_*.py modules beside this file."""
    import importlib
    import pkgutil
    from pathlib import Path

    for info in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda m: m.name):
        if info.name.startswith("case_"):
            module = importlib.import_module(f"tests.conformance.{info.name}")
            if module.CASE is not None:  # a case may be opt-in (case_pubsub_service.py)
                yield module.CASE
