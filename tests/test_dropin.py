"""Drop-in fidelity of `pullqueue.compat`: what a worker sees matches Google's SDK exactly.

Each test runs the same legacy call on the SDK (`google.appengine.api.taskqueue` and
`google.appengine.runtime.apiproxy_errors`, on the testbed stub) and on pullqueue's compat layer,
and compares what the caller observes: values with their types, exception classes by name, and
the cost of building a Queue per request.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from google.appengine.api import apiproxy_stub_map
from google.appengine.api import taskqueue as sdk
from google.appengine.runtime import apiproxy_errors as sdk_apiproxy_errors

from pullqueue import Task as CoreTask
from pullqueue.adapters.delegating import DelegatingBackend
from pullqueue.adapters.memory import MemoryBackend
from pullqueue.compat import apiproxy_errors, taskqueue
from pullqueue.errors import DeadlineExceededError, Error
from pullqueue.task import QueueStats
from tests.support.appengine_testbed import AppEngineTestbed, appengine_testbed


def _outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return ("ok", call())
    except Exception as exc:  # the exception class is what a caller observes
        return ("error", type(exc).__name__)


def _typed(value: Any) -> Any:
    """A value with the type of every part spelled out, so b'a' and 'a' never compare equal."""
    if isinstance(value, dict):
        return sorted((_typed(k), _typed(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value).__name__, value)


# (a) extract_params

PAYLOADS: list[str | bytes] = [
    "a=1&b=2",
    b"a=1&b=2&b=3",
    "",
    "a=",
    "a=1&a=",
    "key+with+spaces=v%20w",
    "a=%C3%A9",
    b"caf\xc3\xa9=1",
    "novalue",
    "a=1&&b=2",
    "shard=7&post_ids=p1&post_ids=p2&new_topic=",
]


@pytest.mark.parametrize("payload", PAYLOADS, ids=repr)
def test_extract_params_returns_what_the_sdk_returns(payload: str | bytes) -> None:
    legacy = _outcome(lambda: _typed(sdk.Task(payload=payload, method="PULL").extract_params()))
    ours = _outcome(lambda: _typed(taskqueue.Task(payload=payload, method="PULL").extract_params()))
    assert ours == legacy


def test_extract_params_of_a_leased_task_reads_the_keys_the_sdk_gives() -> None:
    queue = taskqueue.Queue("params", backend=MemoryBackend(clock=lambda: 1_700_000_000.0))
    queue.add(taskqueue.Task(params={"shard": "7", "post_ids": ["p1", "p2"]}, method="PULL"))
    backend = queue.backend
    assert isinstance(backend, MemoryBackend)
    backend._clock = lambda: 1_700_000_001.0
    (task,) = queue.lease_tasks(60, 10)
    assert task.extract_params() == {b"shard": b"7", b"post_ids": [b"p1", b"p2"]}


# (f) apiproxy_errors


def _classes(module: Any) -> dict[str, type[BaseException]]:
    return {
        name: value
        for name, value in vars(module).items()
        if isinstance(value, type)
        and issubclass(value, BaseException)
        and value.__module__ == module.__name__
    }


def test_apiproxy_errors_has_every_sdk_name_in_the_same_hierarchy() -> None:
    legacy, ours = _classes(sdk_apiproxy_errors), _classes(apiproxy_errors)
    assert sorted(legacy) == sorted(ours)
    for name, cls in legacy.items():
        for other_name, other in legacy.items():
            assert issubclass(ours[name], ours[other_name]) == issubclass(cls, other), (
                name,
                other_name,
            )
        assert not issubclass(ours[name], taskqueue.Error), name
    boom = ValueError("boom")
    for build in (
        lambda m: m.ApplicationError(5, "detail"),
        lambda m: m.ApplicationError(3),
        lambda m: m.InterruptedError(boom, "rpc"),
        lambda m: m.DeadlineExceededError("slow"),
    ):
        legacy_error, our_error = build(sdk_apiproxy_errors), build(apiproxy_errors)
        assert (str(our_error), our_error.args) == (str(legacy_error), legacy_error.args)
    interrupted = apiproxy_errors.InterruptedError(ValueError("boom"), "rpc")
    assert (interrupted.rpc, str(interrupted.exception)) == ("rpc", "boom")


def _legacy_worker(tq: Any, errors: Any, lease: Callable[[], Any]) -> str:
    """The lease loop of Google's pull-queue samples: both errors are caught and logged."""
    try:
        return f"leased {len(lease())}"
    except (tq.TransientError, errors.DeadlineExceededError) as exc:
        return f"caught {type(exc).__name__}"


@pytest.fixture
def slow_bed() -> Iterator[AppEngineTestbed]:
    """A testbed whose taskqueue service answers lease calls past their deadline, as a slow
    production service did: the apiproxy raises DeadlineExceededError to the caller."""
    with appengine_testbed(["pulls"]) as bed:
        stub = apiproxy_stub_map.apiproxy.GetStub("taskqueue")
        original = stub._Dynamic_QueryAndOwnTasks

        def too_slow(*args: Any, **kwargs: Any) -> None:
            raise sdk_apiproxy_errors.DeadlineExceededError("The API call took too long")

        stub._Dynamic_QueryAndOwnTasks = too_slow
        try:
            yield bed
        finally:
            stub._Dynamic_QueryAndOwnTasks = original


def test_a_lease_past_its_deadline_raises_apiproxy_deadline_exceeded_as_the_sdk(
    slow_bed: AppEngineTestbed,
) -> None:
    slow_bed.seed("pulls", b"x", name="t1")
    slow_bed.clock.advance(1)
    legacy_queue = sdk.Queue("pulls")
    our_queue = taskqueue.Queue("pulls", backend=slow_bed.backend())
    for lease in (
        lambda q: q.lease_tasks(60, 10, deadline=1),
        lambda q: q.lease_tasks_by_tag(60, 10, deadline=1),
        lambda q: q.lease_tasks_by_tag(60, 10, tag="x", deadline=1),
    ):
        legacy = _outcome(lambda lease=lease: lease(legacy_queue))
        ours = _outcome(lambda lease=lease: lease(our_queue))
        assert ours == legacy == ("error", "DeadlineExceededError")
        assert _legacy_worker(
            taskqueue, apiproxy_errors, lambda lease=lease: lease(our_queue)
        ) == _legacy_worker(sdk, sdk_apiproxy_errors, lambda lease=lease: lease(legacy_queue))
    legacy_rpc = legacy_queue.lease_tasks_async(60, 10)
    our_rpc = our_queue.lease_tasks_async(60, 10)
    assert _outcome(our_rpc.get_result) == _outcome(legacy_rpc.get_result)


class _Slow(DelegatingBackend):
    """A backend whose every call ran out of its deadline (the service was too slow)."""

    def _late(self, queue: str) -> DeadlineExceededError:
        return DeadlineExceededError("the service did not answer in time", queue=queue)

    def add(self, queue: str, tasks: Sequence[CoreTask]) -> list[Error | None]:
        raise self._late(queue)

    def lease(self, queue: str, *args: Any, **kwargs: Any) -> list[CoreTask]:
        raise self._late(queue)

    def modify_lease(self, queue: str, task: CoreTask, lease_seconds: float) -> None:
        raise self._late(queue)

    def delete(self, queue: str, tasks: Sequence[CoreTask]) -> list[bool]:
        raise self._late(queue)

    def purge(self, queue: str) -> None:
        raise self._late(queue)

    def stats(self, queue: str) -> QueueStats:
        raise self._late(queue)


def test_every_call_that_runs_out_of_its_deadline_raises_the_apiproxy_error() -> None:
    queue = taskqueue.Queue("slow", backend=_Slow(MemoryBackend()))
    task = taskqueue.Task(payload="x", method="PULL", name="t1")
    calls: dict[str, Callable[[], Any]] = {
        "add": lambda: queue.add(task),
        "add list": lambda: queue.add([taskqueue.Task(payload="y", method="PULL")]),
        "lease_tasks": lambda: queue.lease_tasks(60, 10),
        "lease_tasks_by_tag": lambda: queue.lease_tasks_by_tag(60, 10, "t"),
        "modify_task_lease": lambda: queue.modify_task_lease(task, 10),
        "delete_tasks": lambda: queue.delete_tasks(task),
        "delete_tasks_by_name": lambda: queue.delete_tasks_by_name(["t1"]),
        "purge": queue.purge,
        "fetch_statistics": queue.fetch_statistics,
        "lease_tasks_async": lambda: queue.lease_tasks_async(60, 10).get_result(),
        "delete_tasks_async": lambda: queue.delete_tasks_async(task).get_result(),
    }
    for what, call in calls.items():
        with pytest.raises(apiproxy_errors.DeadlineExceededError) as raised:
            call()
        assert not isinstance(raised.value, taskqueue.TransientError), what
        assert isinstance(raised.value.__cause__, DeadlineExceededError), what
        assert "'slow'" in str(raised.value), what


def test_the_pullqueue_api_keeps_deadline_exceeded_a_transient_error() -> None:
    from pullqueue import Queue

    with pytest.raises(taskqueue.TransientError):
        Queue("slow", backend=_Slow(MemoryBackend())).lease(60, 10)


# (g) Queue construction


def _best_per_call(build: Callable[[], Any], calls: int = 2000, rounds: int = 7) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(calls):
            build()
        best = min(best, (time.perf_counter() - started) / calls)
    return best


def test_building_a_queue_per_request_costs_about_what_the_sdk_costs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Legacy workers build `taskqueue.Queue('q')` per request; benchmarks/queue_construction.py
    prints the figures. The bound is loose (10x, measured as the best of several rounds each,
    interleaved) so a noisy machine does not fail it; when each Queue parsed the settings to
    find the process-wide backend the ratio was several hundred."""
    from pullqueue.registry import reset_default_backends

    monkeypatch.delenv("PULLQUEUE_URL", raising=False)
    reset_default_backends()
    try:
        with appengine_testbed(["q"]):
            taskqueue.Queue("q")
            sdk.Queue("q")
            ratios = []
            for _ in range(3):
                ours = _best_per_call(lambda: taskqueue.Queue("q"))
                legacy = _best_per_call(lambda: sdk.Queue("q"))
                ratios.append(ours / legacy)
    finally:
        reset_default_backends()
    assert min(ratios) < 10, f"compat Queue('q') costs {min(ratios):.1f}x the SDK's"


def test_the_process_wide_backend_follows_pullqueue_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pullqueue.registry import reset_default_backends

    reset_default_backends()
    try:
        monkeypatch.setenv("PULLQUEUE_URL", "memory://")
        first = taskqueue.Queue("q").backend
        assert taskqueue.Queue("other").backend is first
        monkeypatch.setenv("PULLQUEUE_URL", "memory:///")
        assert taskqueue.Queue("q").backend is not first
        monkeypatch.setenv("PULLQUEUE_URL", "memory://")
        assert taskqueue.Queue("q").backend is first
        monkeypatch.setenv("PULLQUEUE_URL", "nosuch://x")
        queue = taskqueue.Queue("q")  # as in the SDK, building a Queue reaches no service
        with pytest.raises(taskqueue.Error, match="unknown URL scheme"):
            queue.lease_tasks(60, 1)
        with pytest.raises(taskqueue.InvalidQueueNameError):
            taskqueue.Queue("no spaces")
    finally:
        reset_default_backends()


def test_compat_signatures_of_the_new_names_match_the_sdk() -> None:
    legacy = inspect.signature(sdk_apiproxy_errors.ApplicationError.__init__)
    ours = inspect.signature(apiproxy_errors.ApplicationError.__init__)
    assert list(ours.parameters) == list(legacy.parameters)


def test_a_naive_eta_is_utc_and_transactional_adds_outside_a_transaction_are_refused() -> None:
    """A documented difference from the SDK (docs/semantics.md 7), and the SDK's refusal of a
    transactional add with no transaction to join (docs/semantics.md 9)."""
    import calendar
    import datetime as dt

    tomorrow = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=1)
    eta = tomorrow.replace(tzinfo=None, microsecond=0)
    task = taskqueue.Task(payload="x", method="PULL", eta=eta)
    assert task.eta_posix == calendar.timegm(eta.timetuple())
    queue = taskqueue.Queue("q", backend=MemoryBackend())
    with pytest.raises(taskqueue.BadTransactionStateError):
        queue.add(taskqueue.Task(payload="x", method="PULL"), transactional=True)
    assert queue.fetch_statistics().tasks == 0


def test_an_eta_is_set_at_construction_and_an_immediate_task_is_due_when_added() -> None:
    """Task(countdown=n).eta and Task().eta are set by Task(), as in the SDK; what an add then
    keeps is documented in docs/migration-guide.md (the table of remaining differences)."""
    import datetime as dt

    from tests.conformance.harness import FakeClock

    before = time.time()
    later = taskqueue.Task(payload=b"later", method="PULL", countdown=15)
    now = taskqueue.Task(payload=b"now", method="PULL")
    after = time.time()
    assert later.eta_posix is not None and now.eta_posix is not None
    assert before + 15 <= later.eta_posix <= after + 15
    assert before <= now.eta_posix <= after
    assert taskqueue.Task(name="handle").eta is not None
    with pytest.raises(taskqueue.InvalidQueueModeError):  # a name handle, whatever its eta
        taskqueue.Queue("q", backend=MemoryBackend()).add(
            taskqueue.Task(name="handle", eta=dt.datetime.now(dt.timezone.utc))
        )
    with pytest.raises(taskqueue.InvalidEtaError):
        taskqueue.Task(payload=b"x", method="PULL", countdown=30 * 86400 + 300)

    # On the process clock the countdown's ETA stands; an immediate task is due when added.
    built_later, built_now = later.eta_posix, now.eta_posix
    queue = taskqueue.Queue("q", backend=MemoryBackend())
    queue.add([later, now])
    assert round(later.eta_posix * 1e6) == round(built_later * 1e6)  # kept in microseconds
    assert now.eta_posix >= built_now
    assert [t.payload for t in queue.lease_tasks(60, 10)] == [b"now"]

    # A failed add leaves the task's ETA as it was built.
    again = taskqueue.Task(payload=b"again", method="PULL", name="taken")
    queue.add(taskqueue.Task(payload=b"first", method="PULL", name="taken"))
    built = again.eta_posix
    with pytest.raises(taskqueue.TaskAlreadyExistsError):
        queue.add(again)
    assert again.eta_posix == built

    # On an injected clock, the countdown counts from that clock's time at the add.
    clock = FakeClock()
    on_fake = taskqueue.Queue("q", backend=MemoryBackend(clock=clock))
    task = on_fake.add(taskqueue.Task(payload=b"x", method="PULL", countdown=15))
    assert task.eta_posix == clock() + 15
    clock.advance(15.001)
    assert [t.payload for t in on_fake.lease_tasks(60, 10)] == [b"x"]


def test_a_test_that_stubs_time_time_sees_the_sdks_etas(tmp_path: Any) -> None:
    """An app's own test that stubs `time.time` (unittest.mock) sees the ETAs and leases the SDK
    on its stub gave: Task() and the memory backend both read `time.time()` when called."""
    from unittest import mock

    from tests.legacy_stub import legacy_taskqueue

    start = 1_700_000_000.0

    def run(tq: Any, queue: Any) -> list[Any]:
        seen: list[Any] = []
        with mock.patch("time.time", return_value=start) as clock:
            task = tq.Task(payload=b"later", method="PULL", countdown=15)
            queue.add([task, tq.Task(payload=b"now", method="PULL")])
            seen.append(round(task.eta_posix - start, 6))
            clock.return_value = start + 1
            seen.append([t.payload for t in queue.lease_tasks(60, 10)])
            clock.return_value = start + 20
            leased = queue.lease_tasks(60, 10)
            seen.append([(t.payload, round(t.eta_posix - start, 6)) for t in leased])
        return seen

    expected = run(taskqueue, taskqueue.Queue("q", backend=MemoryBackend()))
    with legacy_taskqueue(lambda: time.time(), tmp_path, {"q": None}) as sdk:
        assert run(sdk, sdk.Queue("q")) == expected
    assert expected == [15.0, [b"now"], [(b"later", 80.0)]]  # leased at +20 for 60 s
