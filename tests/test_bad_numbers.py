"""NaN, infinities and booleans against Google's SDK stub, and in task and worker arguments.

Where the SDK answers a bad number with a legacy error, pullqueue raises the same class; where it
fails late with a ValueError, TypeError or OverflowError, or takes the value, pullqueue raises the
legacy error of the parameter instead (docs/semantics.md, "Bad numbers"). Each row is run on the
SDK here, so the documented difference is the SDK's real answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pullqueue import Queue, Settings, Task
from pullqueue.adapters.memory import MemoryBackend
from pullqueue.compat import taskqueue as compat
from pullqueue.errors import ConfigurationError, InvalidEtaError, InvalidTaskError
from pullqueue.migrate import drain
from pullqueue.worker import Backoff, Worker
from tests.conformance.harness import FakeClock
from tests.legacy_stub import legacy_taskqueue

NAN, INF = math.nan, math.inf

Call = Callable[[Any, Any], object]
"""(taskqueue module, its Queue 'q' holding one available task) -> the call under test."""

LEASE, MAX, DEADLINE = "InvalidLeaseTimeError", "InvalidMaxTasksError", "InvalidDeadlineError"
ETA, RETRY = "InvalidEtaError", "InvalidTaskRetryOptionsError"


def pull(tq: Any, countdown: object) -> Any:
    return tq.Task(payload="x", method="PULL", countdown=countdown)


def one(queue: Any) -> Any:
    return queue.lease_tasks(60, 1)[0]


ROWS: list[tuple[str, Call, str, str]] = [
    # (call, what the SDK stub does, what pullqueue raises)
    ("lease_tasks(nan, 10)", lambda tq, q: q.lease_tasks(NAN, 10), "ValueError", LEASE),
    ("lease_tasks(inf, 10)", lambda tq, q: q.lease_tasks(INF, 10), LEASE, LEASE),
    ("lease_tasks(-inf, 10)", lambda tq, q: q.lease_tasks(-INF, 10), LEASE, LEASE),
    ("lease_tasks(True, 10)", lambda tq, q: q.lease_tasks(True, 10), "ok", LEASE),
    ("lease_tasks(60, nan)", lambda tq, q: q.lease_tasks(60, NAN), "TypeError", MAX),
    ("lease_tasks(60, True)", lambda tq, q: q.lease_tasks(60, True), "TypeError", MAX),
    ("lease_tasks(60, False)", lambda tq, q: q.lease_tasks(60, False), MAX, MAX),
    (
        "lease_tasks(deadline=nan)",
        lambda tq, q: q.lease_tasks(60, 10, deadline=NAN),
        "ok",
        DEADLINE,
    ),
    (
        "lease_tasks(deadline=inf)",
        lambda tq, q: q.lease_tasks(60, 10, deadline=INF),
        "ok",
        DEADLINE,
    ),
    (
        "lease_tasks(deadline=-inf)",
        lambda tq, q: q.lease_tasks(60, 10, deadline=-INF),
        DEADLINE,
        DEADLINE,
    ),
    (
        "lease_tasks(deadline=False)",
        lambda tq, q: q.lease_tasks(60, 10, deadline=False),
        DEADLINE,
        DEADLINE,
    ),
    (
        "lease_tasks_by_tag(nan, 10)",
        lambda tq, q: q.lease_tasks_by_tag(NAN, 10),
        "ValueError",
        LEASE,
    ),
    ("lease_tasks_by_tag(inf, 10)", lambda tq, q: q.lease_tasks_by_tag(INF, 10), LEASE, LEASE),
    ("add(Task(countdown=nan)", lambda tq, q: q.add(pull(tq, NAN)), "ValueError", ETA),
    ("add(Task(countdown='nan')", lambda tq, q: q.add(pull(tq, "nan")), "ValueError", ETA),
    ("add(Task(countdown=inf)", lambda tq, q: q.add(pull(tq, INF)), ETA, ETA),
    ("add(Task(countdown=-inf)", lambda tq, q: q.add(pull(tq, -INF)), "OverflowError", ETA),
    ("add(Task(countdown=True)", lambda tq, q: q.add(pull(tq, True)), "ok", ETA),
    (
        "fetch_statistics(deadline=nan)",
        lambda tq, q: q.fetch_statistics(deadline=NAN),
        "ok",
        DEADLINE,
    ),
    ("create_rpc(deadline=nan)", lambda tq, q: tq.create_rpc(deadline=NAN), "ok", DEADLINE),
    ("create_rpc(deadline=-inf)", lambda tq, q: tq.create_rpc(deadline=-INF), DEADLINE, DEADLINE),
    (
        "TaskRetryOptions(min_backoff_seconds=nan)",
        lambda tq, q: tq.TaskRetryOptions(min_backoff_seconds=NAN),
        "ok",
        RETRY,
    ),
    (
        "TaskRetryOptions(task_age_limit=inf)",
        lambda tq, q: tq.TaskRetryOptions(task_age_limit=INF),
        "OverflowError",
        RETRY,
    ),
    (
        "modify_task_lease(leased, nan)",
        lambda tq, q: q.modify_task_lease(one(q), NAN),
        "ValueError",
        LEASE,
    ),
    (
        "modify_task_lease(leased, inf)",
        lambda tq, q: q.modify_task_lease(one(q), INF),
        LEASE,
        LEASE,
    ),
    (
        "modify_task_lease(leased, True)",
        lambda tq, q: q.modify_task_lease(one(q), True),
        "ok",
        LEASE,
    ),
]


def _outcome(call: Callable[[], object]) -> str:
    try:
        call()
    except Exception as exc:  # the class is what a caller observes
        return type(exc).__name__
    return "ok"


def test_bad_numbers_against_the_sdk_stub(tmp_path: Path) -> None:
    clock = FakeClock()
    seen_sdk: dict[str, str] = {}
    with legacy_taskqueue(clock, tmp_path, {"q": None}) as tq:
        for label, call, _, _ in ROWS:
            queue = tq.Queue("q")
            queue.purge()
            queue.add(tq.Task(payload="x", method="PULL"))
            clock.advance(1)
            seen_sdk[label] = _outcome(lambda: call(tq, queue))  # noqa: B023
    backend = MemoryBackend(clock=clock)
    seen: dict[str, str] = {}
    for label, call, _, _ in ROWS:
        queue = compat.Queue(f"q{len(seen)}", backend=backend)
        queue.add(compat.Task(payload="x", method="PULL"))
        clock.advance(1)
        seen[label] = _outcome(lambda: call(compat, queue))  # noqa: B023
        assert len(queue.lease_tasks(60, 10)) == (0 if label.startswith("modify") else 1), label
    assert seen_sdk == {label: sdk for label, _, sdk, _ in ROWS}
    assert seen == {label: ours for label, _, _, ours in ROWS}
    agreed = {label for label, _, sdk, ours in ROWS if sdk == ours}
    assert all(seen_sdk[label].startswith("Invalid") for label in agreed)


@pytest.mark.parametrize("bad", [NAN, INF, -INF, True, False])
def test_task_refuses_a_bad_countdown_or_retry_limit(bad: object) -> None:
    with pytest.raises(InvalidEtaError):
        Task(b"x", countdown=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidTaskError):
        Task(b"x", retry_limit=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "option",
    [
        {"lease_seconds": NAN},
        {"lease_seconds": True},
        {"batch_size": True},
        {"batch_size": INF},
        {"concurrency": NAN},
        {"concurrency": True},
        {"exit_when_idle": NAN},
        {"exit_when_idle": -INF},
        {"lease_requests_per_second": NAN},
        {"tag": "t" * 501},
    ],
    ids=lambda option: "-".join(f"{k}={v!r}" for k, v in option.items())[:40],
)
def test_worker_refuses_bad_options_before_it_starts(option: dict[str, Any]) -> None:
    queue = Queue("numbers", MemoryBackend())
    name = next(iter(option))
    with pytest.raises((ValueError, compat.Error)) as raised:
        Worker(queue, lambda task: None, **option)
    text = str(raised.value)
    assert name.removesuffix("_size") in text or "tag" in text


@pytest.mark.parametrize("values", [(NAN, 10.0), (0.1, INF), (0.1, 10.0, NAN), (True, 10.0)])
def test_backoff_refuses_bad_numbers(values: tuple[float, ...]) -> None:
    with pytest.raises(ValueError):
        Backoff(*values)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_settings_refuse_non_finite_numbers(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("PULLQUEUE_PUBSUB_HOLD_SECONDS", value)
    with pytest.raises(ValueError, match="pubsub_hold_seconds"):
        Settings()


@pytest.mark.parametrize(
    "option",
    [
        {"batch_size": True},
        {"lease_seconds": NAN},
        {"quiet_period": NAN},
        {"max_wait": INF},
        {"lease_rate": NAN},
        {"write_threads": True},
    ],
    ids=lambda option: "-".join(f"{k}={v!r}" for k, v in option.items()),
)
def test_drain_refuses_bad_numbers_and_moves_nothing(option: dict[str, Any]) -> None:
    backend = MemoryBackend()
    source, dest = Queue("from", backend), Queue("to", backend)
    source.add(Task(b"x", name="stays"))
    with pytest.raises(ConfigurationError, match=next(iter(option))):
        drain(source, dest, **option)
    assert (source.stats().tasks, dest.stats().tasks) == (1, 0)
