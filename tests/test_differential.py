"""Differential tests: pullqueue.compat.taskqueue on MemoryBackend against Google's SDK stub.

Seeded random sequences of legacy calls (adds with names, tags, ETAs and faults; leases, leases by
tag, lease changes, deletes, purges, statistics, bad arguments, clock ticks) run on both, on one
fake clock; results and exception classes (by class name) must agree call by call.
"""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pullqueue.adapters.memory import MemoryBackend
from pullqueue.compat import taskqueue as compat
from tests.conformance.harness import FakeClock
from tests.legacy_stub import legacy_taskqueue

QUEUES: dict[str, int | None] = {"pull-a": None, "pull-b": None, "pull-limited": 3}
TAGS = ["red", "green", "blue", "t" * 500]
SEEDS = range(16)
OPS_PER_SEED = 500
TICKS = [1e-6, 0.1, 0.5, 1.0, 2.0, 5.0, 30.0, 61.0, 600.0, 3600.0]
LEASE_SECONDS = [0, 0.5, 1, 2.5, 10, 60, 3600, 604800]
MAX_TASKS = [1, 2, 3, 5, 10, 50, 1000]


def _outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    """('ok', value) or ('error', exception class name): what a caller of the API can observe."""
    try:
        return ("ok", call())
    except Exception as exc:  # every exception is an outcome a caller observes
        return ("error", type(exc).__name__)


@dataclass
class Side:
    """One implementation of the legacy API: the SDK on its stub, or pullqueue's compat layer."""

    tq: Any
    queues: dict[str, Any]
    rename: dict[str, str] = field(default_factory=dict)
    """This side's name of a task -> the legacy side's name (identity for the SDK side)."""

    def common(self, name: str | None) -> str | None:
        return None if name is None else self.rename.get(name, name)


def _usec(seconds: float | None) -> int | None:
    return None if seconds is None else round(seconds * 1e6)


def _task_view(side: Side, task: Any) -> tuple[Any, ...]:
    tag = task.tag.decode() if isinstance(task.tag, bytes) else task.tag
    return (side.common(task.name), task.payload, tag, _usec(task.eta_posix), task.retry_count)


class Differential:
    """Drives the SDK and pullqueue through the same random calls and compares each result."""

    def __init__(self, seed: int, clock: FakeClock, legacy: Side, ours: Side) -> None:
        self.rng = random.Random(seed)
        self.clock = clock
        self.legacy, self.ours = legacy, ours
        self.held: list[tuple[str, Any, Any]] = []
        self.named: dict[str, list[str]] = {q: [] for q in QUEUES}
        self.seen: dict[str, list[str]] = {q: [] for q in QUEUES}
        self.fresh = 0
        self.history: list[str] = []
        self.coverage: Counter[str] = Counter()

    # one step

    def step(self) -> None:
        op = self.rng.choices(
            [
                self.add,
                self.lease,
                self.lease_by_tag,
                self.modify,
                self.delete,
                self.delete_by_name,
                self.purge,
                self.stats,
                self.tick,
            ],
            weights=[30, 14, 16, 10, 10, 5, 1, 6, 12],
        )[0]
        op()

    def compare(self, what: str, legacy: tuple[str, Any], ours: tuple[str, Any]) -> None:
        self.history.append(f"{what} -> {legacy}")
        self.coverage[f"{what.split('(')[0]}:{legacy[0]}"] += 1
        if legacy[0] == "error":
            self.coverage[f"error:{legacy[1]}"] += 1
        if legacy != ours:
            recent = "\n  ".join(self.history[-25:])
            pytest.fail(
                f"pullqueue differs from the SDK stub on {what}\n"
                f"  SDK:       {legacy}\n  pullqueue: {ours}\nrecent calls:\n  {recent}"
            )

    def queue(self) -> str:
        return self.rng.choice(list(QUEUES))

    # adds

    def _spec(self, queue: str) -> dict[str, Any]:
        rng = self.rng
        spec: dict[str, Any] = {"payload": rng.randbytes(rng.randrange(0, 12))}
        if rng.random() < 0.15:
            spec["payload"] = spec["payload"].hex()
        roll = rng.random()
        if roll < 0.25:
            self.fresh += 1
            spec["name"] = f"n{self.fresh}-{rng.randrange(1000)}"
        elif roll < 0.35 and self.named[queue]:
            spec["name"] = rng.choice(self.named[queue])
        if rng.random() < 0.55:
            spec["tag"] = rng.choice([*TAGS, ""]) if rng.random() < 0.9 else b"red"
        roll = rng.random()
        if roll < 0.25:
            spec["countdown"] = rng.choice([-30, -1, 0, 0.5, 1, 5, 30, 120, 3600])
        elif roll < 0.4:
            offset = rng.choice([-100.25, -3, 0.75, 10, 90, 7200])
            spec["eta"] = dt.datetime.fromtimestamp(self.clock() + offset, tz=dt.timezone.utc)
        return spec

    def _fault(self, specs: list[dict[str, Any]]) -> str:
        kind = self.rng.choice(["dup", "bad-name", "long-tag", "too-large", "far-eta"])
        target = self.rng.randrange(len(specs))
        spec = specs[target]
        if kind == "dup" and len(specs) > 1:
            other = (target + 1) % len(specs)
            spec["name"] = specs[other]["name"] = f"twin{self.rng.randrange(100)}"
        elif kind == "bad-name":
            spec["name"] = self.rng.choice(["has space", "dot.ted", "x" * 501])
        elif kind == "long-tag":
            spec["tag"] = "t" * 501
        elif kind == "too-large":
            spec["payload"] = b"z" * (compat.MAX_PULL_TASK_SIZE_BYTES + 100)
        else:
            spec.pop("eta", None)
            spec["countdown"] = 31 * 24 * 3600
        return kind

    def add(self) -> None:
        queue, rng = self.queue(), self.rng
        size = rng.choice([1, 1, 1, 2, 3, 5, 10, 40]) if rng.random() > 0.02 else 101
        specs = [self._spec(queue) for _ in range(size)]
        fault = self._fault(specs) if size <= 100 and rng.random() < 0.15 else "none"
        single = size == 1 and rng.random() < 0.5
        results = [self._add(side, queue, specs, single) for side in (self.legacy, self.ours)]
        (legacy_outcome, legacy_tasks), (ours_outcome, our_tasks) = results
        for legacy_task, our_task in zip(legacy_tasks, our_tasks, strict=False):
            if legacy_task.was_enqueued and our_task.was_enqueued:
                # The stub numbers unnamed tasks task1, task2, ... but with protobuf's upb
                # runtime often fails to report the name it chose (it matches results by id()
                # of short-lived wrappers). pullqueue reports it always; both number alike, so
                # an unreported name is taken to be ours, and the next lease proves it.
                assert our_task.name, "pullqueue must report the name it chose"
                legacy_name = legacy_task.name or our_task.name
                self.ours.rename[our_task.name] = legacy_name
                self.seen[queue].append(legacy_name)
        for spec in specs:
            if "name" in spec and spec["name"] not in self.named[queue]:
                self.named[queue].append(spec["name"])
        self.compare(f"add({queue}, {size} tasks, fault={fault})", legacy_outcome, ours_outcome)

    def _add(
        self, side: Side, queue: str, specs: list[dict[str, Any]], single: bool
    ) -> tuple[tuple[str, Any], list[Any]]:
        tasks: list[Any] = []

        def build_and_add() -> Any:
            for spec in specs:
                tasks.append(side.tq.Task(method="PULL", **spec))
            return side.queues[queue].add(tasks[0] if single else tasks)

        outcome = _outcome(build_and_add)
        view = [
            (t.was_enqueued, side.common(t.name) if t.was_enqueued and "name" in spec else None)
            for t, spec in zip(tasks, specs, strict=False)
        ]
        etas = [_usec(t.eta_posix) for t in tasks if t.was_enqueued]
        if outcome[0] == "ok":
            returned = outcome[1] if isinstance(outcome[1], list) else [outcome[1]]
            assert [id(t) for t in returned] == [id(t) for t in tasks]
        return (outcome[0], (view, etas) if outcome[0] == "ok" else outcome[1]), tasks

    # leases

    def _lease_args(self) -> tuple[float, int, float]:
        rng = self.rng
        lease = rng.choice(LEASE_SECONDS) if rng.random() > 0.04 else rng.choice([-1, 604801])
        count = rng.choice(MAX_TASKS) if rng.random() > 0.04 else rng.choice([0, -2, 1001])
        deadline = 10 if rng.random() > 0.02 else 0
        return lease, count, deadline

    def _leased(self, queue: str, results: list[tuple[str, Any]]) -> None:
        (legacy_kind, legacy_tasks), (ours_kind, our_tasks) = results
        if legacy_kind == ours_kind == "ok" and len(legacy_tasks) == len(our_tasks):
            self.held.extend((queue, a, b) for a, b in zip(legacy_tasks, our_tasks, strict=True))
            del self.held[:-300]

    def lease(self) -> None:
        queue = self.queue()
        lease, count, deadline = self._lease_args()
        results = [
            _outcome(lambda s=side: s.queues[queue].lease_tasks(lease, count, deadline))
            for side in (self.legacy, self.ours)
        ]
        self._leased(queue, results)
        self.compare(
            f"lease_tasks({queue}, {lease}, {count}, deadline={deadline})",
            *self._views(results),
        )

    def lease_by_tag(self) -> None:
        queue = self.queue()
        lease, count, deadline = self._lease_args()
        tag = self.rng.choice([None, None, None, *TAGS, "unknown", "", b"green"])
        results = [
            _outcome(lambda s=side: s.queues[queue].lease_tasks_by_tag(lease, count, tag, deadline))
            for side in (self.legacy, self.ours)
        ]
        self._leased(queue, results)
        legacy, ours = self._views(results)
        if tag is None and legacy[0] == "ok" and legacy[1] and legacy[1][0][2] is None:
            self.coverage["lease_by_tag:untagged-oldest"] += 1
        shown = tag if not isinstance(tag, str) or len(tag) < 20 else f"<{len(tag)} chars>"
        self.compare(f"lease_tasks_by_tag({queue}, {lease}, {count}, tag={shown!r})", legacy, ours)

    def _views(self, results: list[tuple[str, Any]]) -> tuple[tuple[str, Any], tuple[str, Any]]:
        views = []
        for side, (kind, value) in zip((self.legacy, self.ours), results, strict=True):
            if kind == "ok":
                value = [_task_view(side, t) for t in value]
            views.append((kind, value))
        return views[0], views[1]

    def modify(self) -> None:
        if not self.held:
            return self.lease()
        queue, legacy_task, our_task = self.rng.choice(self.held)
        seconds = self.rng.choice([0, 0.5, 1, 10, 60, 600]) if self.rng.random() > 0.05 else -1
        results = []
        for side, task in ((self.legacy, legacy_task), (self.ours, our_task)):

            def call(s: Side = side, t: Any = task) -> Any:
                s.queues[queue].modify_task_lease(t, seconds)
                return _usec(t.eta_posix)

            results.append(_outcome(call))
        self.compare(f"modify_task_lease({queue}, {legacy_task.name}, {seconds})", *results)

    # deletes, purge, statistics, time

    def delete(self) -> None:
        if not self.held:
            return self.lease()
        picks = self.rng.sample(self.held, min(len(self.held), self.rng.choice([1, 1, 2, 5])))
        queue = picks[0][0]
        picks = [p for p in picks if p[0] == queue]
        single = len(picks) == 1 and self.rng.random() < 0.5
        results = []
        for side, index in ((self.legacy, 1), (self.ours, 2)):
            tasks = [p[index] for p in picks]

            def call(s: Side = side, ts: list[Any] = tasks) -> Any:
                done = s.queues[queue].delete_tasks(ts[0] if single else ts)
                return [t.was_deleted for t in (done if isinstance(done, list) else [done])]

            results.append(_outcome(call))
        self.compare(f"delete_tasks({queue}, {[p[1].name for p in picks]})", *results)

    def delete_by_name(self) -> None:
        queue, rng = self.queue(), self.rng
        pool = self.seen[queue][-50:] + self.named[queue][-20:] + ["never-added"]
        wanted = rng.sample(pool, min(len(pool), rng.choice([1, 2, 4])))
        if rng.random() < 0.05:
            wanted.append(wanted[0])
        if rng.random() < 0.03:
            wanted.append("bad name")
        ours_names = {legacy: ours for ours, legacy in self.ours.rename.items()}
        single = len(wanted) == 1 and rng.random() < 0.5
        results = []
        for side, names in (
            (self.legacy, wanted),
            (self.ours, [ours_names.get(n, n) for n in wanted]),
        ):

            def call(s: Side = side, ns: list[str] = names) -> Any:
                done = s.queues[queue].delete_tasks_by_name(ns[0] if single else ns)
                done = done if isinstance(done, list) else [done]
                return [(s.common(t.name), t.was_deleted) for t in done]

            results.append(_outcome(call))
        self.compare(f"delete_tasks_by_name({queue}, {wanted})", *results)

    def purge(self) -> None:
        queue = self.queue()
        results = [
            _outcome(lambda s=side: s.queues[queue].purge()) for side in (self.legacy, self.ours)
        ]
        self.compare(f"purge({queue})", *results)

    def stats(self) -> None:
        queue = self.queue()
        results = []
        for side in (self.legacy, self.ours):

            def call(s: Side = side) -> Any:
                stats = s.queues[queue].fetch_statistics()
                return (stats.queue.name, stats.tasks, stats.oldest_eta_usec)

            results.append(_outcome(call))
        self.compare(f"fetch_statistics({queue})", *results)

    def tick(self) -> None:
        seconds = self.rng.choice(TICKS)
        self.clock.advance(seconds)
        self.history.append(f"tick {seconds}")


def _run(seed: int, ops: int, tmp_path: Path) -> Counter[str]:
    clock = FakeClock(1_700_000_000.0 + seed * 1000.123457)
    backend = MemoryBackend(
        clock=clock, retry_limits={q: n for q, n in QUEUES.items() if n is not None}
    )
    with legacy_taskqueue(clock, tmp_path, QUEUES) as sdk:
        legacy = Side(sdk, {q: sdk.Queue(q) for q in QUEUES})
        ours = Side(compat, {q: compat.Queue(q, backend=backend) for q in QUEUES})
        run = Differential(seed, clock, legacy, ours)
        for _ in range(ops):
            run.step()
    return run.coverage


@pytest.mark.parametrize("seed", SEEDS)
def test_random_calls_agree_with_the_sdk_stub(seed: int, tmp_path: Path) -> None:
    coverage = _run(seed, OPS_PER_SEED, tmp_path)
    assert coverage["lease_tasks:ok"] + coverage["lease_tasks_by_tag:ok"] > OPS_PER_SEED // 5


def test_random_calls_reach_every_interesting_outcome(tmp_path: Path) -> None:
    """The generator is only worth its runtime if it reaches the subtle cases; check it does."""
    coverage: Counter[str] = Counter()
    for seed in range(3):
        (tmp_path / str(seed)).mkdir()
        coverage += _run(1000 + seed, OPS_PER_SEED, tmp_path / str(seed))
    wanted = [
        "error:TaskAlreadyExistsError",
        "error:TombstonedTaskError",
        "error:DuplicateTaskNameError",
        "error:InvalidTaskNameError",
        "error:InvalidTagError",
        "error:TaskTooLargeError",
        "error:InvalidEtaError",
        "error:TooManyTasksError",
        "error:TaskLeaseExpiredError",
        "error:InvalidLeaseTimeError",
        "error:InvalidMaxTasksError",
        "error:InvalidDeadlineError",
        "error:BadTaskStateError",
        "lease_by_tag:untagged-oldest",
        "modify_task_lease:ok",
        "delete_tasks_by_name:ok",
        "purge:ok",
    ]
    missing = [what for what in wanted if coverage[what] == 0]
    assert not missing, f"the random calls never reached {missing}"


class Script:
    """Scripted calls on both sides, on a whole-second clock so boundaries can be hit exactly."""

    def __init__(self, clock: FakeClock, legacy: Side, ours: Side) -> None:
        self.clock = clock
        self.sides = ((legacy, {}), (ours, {}))

    def both(self, what: str, call: Callable[[Side, dict[str, Any]], Any]) -> Any:
        """Run call(side, side's store) on both sides; fail unless the outcomes agree."""
        legacy, ours = (_outcome(lambda s=s, st=st: call(s, st)) for s, st in self.sides)
        assert legacy == ours, f"{what}: SDK {legacy} != pullqueue {ours}"
        return legacy

    def add(self, what: str, queue: str, **spec: Any) -> Any:
        def call(side: Side, store: dict[str, Any]) -> Any:
            task = side.queues[queue].add(side.tq.Task(what, method="PULL", **spec))
            store[what] = task
            return (_usec(task.eta_posix), side.common(task.name) if "name" in spec else None)

        return self.both(f"add {what}", call)

    def lease(self, queue: str, seconds: float, count: int, **by_tag: Any) -> Any:
        def call(side: Side, store: dict[str, Any]) -> Any:
            q = side.queues[queue]
            if by_tag:
                tasks = q.lease_tasks_by_tag(seconds, count, by_tag.get("tag"))
            else:
                tasks = q.lease_tasks(seconds, count)
            for task in tasks:
                store[side.common(task.name)] = task
            return [_task_view(side, t) for t in tasks]

        return self.both(f"lease {queue} {seconds}s x{count} {by_tag}", call)

    def modify(self, key: str, queue: str, seconds: float) -> Any:
        def call(side: Side, store: dict[str, Any]) -> Any:
            side.queues[queue].modify_task_lease(store[key], seconds)
            return _usec(store[key].eta_posix)

        return self.both(f"modify {key} {seconds}s", call)

    def call(self, what: str, queue: str, method: str, *args: Any) -> Any:
        def run(side: Side, store: dict[str, Any]) -> Any:
            result = getattr(side.queues[queue], method)(*args)
            if method == "fetch_statistics":
                return (result.tasks, result.oldest_eta_usec)
            if isinstance(result, list):
                return [(side.common(t.name), t.was_deleted) for t in result]
            return None if result is None else (side.common(result.name), result.was_deleted)

        return self.both(what, run)


def _scenario_boundaries(run: Script) -> None:
    run.add("later", "pull-a", name="later", countdown=5)
    run.clock.advance(5)
    assert run.lease("pull-a", 10, 10) == ("ok", [])  # eta == now is not yet available
    run.clock.advance(1)  # whole seconds: the clock lands exactly on the ETAs and expiries
    assert run.lease("pull-a", 10, 10)[1][0][0] == "later"
    run.clock.advance(10)
    assert run.lease("pull-a", 10, 10) == ("ok", [])  # expiry == now: the lease still holds
    run.modify("later", "pull-a", 20)  # and may still be extended
    run.clock.advance(20)
    run.modify("later", "pull-a", 0)
    run.modify("later", "pull-a", 30)  # released at this very microsecond: still its lease
    run.clock.advance(31)
    run.lease("pull-a", 10, 10)
    run.call("stats", "pull-a", "fetch_statistics")


def _scenario_purge_and_tombstones(run: Script) -> None:
    run.add("kept", "pull-b", name="kept")
    run.add("anon", "pull-b")
    ancient = dt.datetime(1969, 12, 31, tzinfo=dt.timezone.utc)
    assert run.add("ancient", "pull-b", name="ancient", eta=ancient) == ("error", "InvalidEtaError")
    run.call("purge", "pull-b", "purge")
    assert run.add("kept again", "pull-b", name="kept") == ("error", "TombstonedTaskError")
    run.call("delete purged", "pull-b", "delete_tasks_by_name", ["kept", "never"])
    run.call("stats after purge", "pull-b", "fetch_statistics")
    run.add("fresh", "pull-b", name="fresh", countdown=100)
    run.call("delete waiting", "pull-b", "delete_tasks_by_name", "fresh")
    assert run.add("fresh again", "pull-b", name="fresh") == ("error", "TombstonedTaskError")
    assert run.modify("fresh", "pull-b", 10) == ("error", "TombstonedTaskError")
    run.both(
        "modify unknown",
        lambda s, st: s.queues["pull-b"].modify_task_lease(
            s.tq.Task(payload="", method="PULL", name="stranger"), 10
        ),
    )


def _scenario_order_and_tags(run: Script) -> None:
    for name in ("b", "a", "c"):
        run.add(name, "pull-a", name=name, tag="grp")
    for index in range(12):
        run.add(f"anon{index}", "pull-a")
    run.add("old", "pull-a", name="old", countdown=-50)
    run.add("old-tagged", "pull-a", name="old-tagged", tag="x", countdown=-40)
    run.clock.advance(1)
    run.lease("pull-a", 60, 4, by_tag=True)  # follows the oldest task: untagged, among 4 oldest
    run.lease("pull-a", 60, 5, by_tag=True, tag="")  # '' means no tag given
    run.lease("pull-a", 60, 2, by_tag=True, tag="grp")
    run.lease("pull-a", 60, 6)
    run.lease("pull-a", 60, 1000, by_tag=True)
    run.lease("pull-a", 60, 1000)


def _scenario_modify_a_waiting_task(run: Script) -> None:
    run.add("future", "pull-a", name="future", countdown=100)
    run.modify("future", "pull-a", 10)  # the legacy service accepts it: the ETA matches
    run.clock.advance(11)
    run.lease("pull-a", 60, 10)


def _scenario_queue_retry_limit(run: Script) -> None:
    run.add("limited", "pull-limited", name="limited")
    for _ in range(4):
        run.clock.advance(1)
        run.lease("pull-limited", 0.5, 10)
    run.call("stats", "pull-limited", "fetch_statistics")
    assert run.add("limited again", "pull-limited", name="limited") == (
        "error",
        "TombstonedTaskError",
    )


def _scenario_task_retry_options_do_not_apply_to_pull_tasks(run: Script) -> None:
    # The SDK never sends a pull task's retry_options to the service (only push tasks carry
    # them), so a per-task task_retry_limit has no effect on a pull queue.
    def add(side: Side, store: dict[str, Any]) -> Any:
        options = side.tq.TaskRetryOptions(task_retry_limit=1)
        task = side.tq.Task(b"x", method="PULL", name="opt", retry_options=options)
        return side.queues["pull-a"].add(task).name

    run.both("add with retry_options", add)
    for _ in range(3):
        run.clock.advance(1)
        assert run.lease("pull-a", 0.5, 10)[1][0][0] == "opt"


def _scenario_stale_eta(run: Script) -> None:
    # The ETA is the lease token: a task rebuilt by name with an ETA one second before the lease
    # ends holds no lease, and the real lease stays modifiable.
    run.add("held", "pull-a", name="held")
    run.clock.advance(1)
    run.lease("pull-a", 60, 10)

    def stale(side: Side, store: dict[str, Any]) -> Any:
        ends = store["held"].eta_posix
        eta = dt.datetime.fromtimestamp(ends - 1, tz=dt.timezone.utc)
        copy = side.tq.Task(payload="", method="PULL", name="held", eta=eta)
        side.queues["pull-a"].modify_task_lease(copy, 5)

    assert run.both("modify with a stale eta", stale) == ("error", "TaskLeaseExpiredError")
    run.modify("held", "pull-a", 5)
    run.clock.advance(2)
    run.modify("held", "pull-a", 30)


def _scenario_delete_by_a_name_handle(run: Script) -> None:
    # Task(name=...) with no payload: the SDK builds a push task, pullqueue a name handle; both
    # delete the named task, leased or not, and neither can be added to a pull queue.
    run.add("waiting", "pull-b", name="job-41", countdown=100)
    run.add("leased", "pull-b", name="job-42")
    run.clock.advance(1)
    run.lease("pull-b", 60, 10)

    def delete(side: Side, store: dict[str, Any]) -> Any:
        handles = [side.tq.Task(name=n) for n in ("job-41", "job-42", "never-added")]
        done = [side.queues["pull-b"].delete_tasks(h).was_deleted for h in handles]
        again = side.queues["pull-b"].delete_tasks(side.tq.Task(name="job-42")).was_deleted
        return done, again

    assert run.both("delete by name handles", delete) == ("ok", ([True, True, False], False))
    run.clock.advance(200)
    assert run.lease("pull-b", 60, 10) == ("ok", [])
    assert run.add("re-add", "pull-b", name="job-42") == ("error", "TombstonedTaskError")
    run.both(
        "add a handle",
        lambda side, store: side.queues["pull-b"].add(side.tq.Task(name="job-43")),
    )


@pytest.mark.parametrize(
    "scenario",
    [
        _scenario_stale_eta,
        _scenario_delete_by_a_name_handle,
        _scenario_task_retry_options_do_not_apply_to_pull_tasks,
        _scenario_boundaries,
        _scenario_purge_and_tombstones,
        _scenario_order_and_tags,
        _scenario_modify_a_waiting_task,
        _scenario_queue_retry_limit,
    ],
)
def test_scripted_boundaries_agree_with_the_sdk_stub(
    scenario: Callable[[Script], None], tmp_path: Path
) -> None:
    clock = FakeClock(1_700_000_000.0)
    backend = MemoryBackend(clock=clock, retry_limits={"pull-limited": 3})
    with legacy_taskqueue(clock, tmp_path, QUEUES) as sdk:
        legacy = Side(sdk, {q: sdk.Queue(q) for q in QUEUES})
        ours = Side(compat, {q: compat.Queue(q, backend=backend) for q in QUEUES})
        scenario(Script(clock, legacy, ours))


def _parameters(function: Callable[..., Any]) -> list[tuple[str, Any]]:
    import inspect

    return [
        (p.name, p.default)
        for p in inspect.signature(function).parameters.values()
        if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name != "self"
    ]


def test_the_compat_module_has_every_legacy_name_and_signature() -> None:
    """A service changes only its import line: every name, parameter and default is there."""
    from google.appengine.api import taskqueue as sdk

    missing = [name for name in sdk.__all__ if not hasattr(compat, name)]
    assert not missing, f"compat.taskqueue lacks {missing}"
    for name in sdk.__all__:
        legacy = getattr(sdk, name)
        if isinstance(legacy, type) and issubclass(legacy, Exception):
            assert issubclass(getattr(compat, name), compat.Error), name
        elif isinstance(legacy, int):
            assert getattr(compat, name) == legacy, name
    methods = [
        "add",
        "add_async",
        "lease_tasks",
        "lease_tasks_async",
        "lease_tasks_by_tag",
        "lease_tasks_by_tag_async",
        "modify_task_lease",
        "delete_tasks",
        "delete_tasks_async",
        "delete_tasks_by_name",
        "delete_tasks_by_name_async",
        "purge",
        "fetch_statistics",
        "fetch_statistics_async",
    ]
    for method in methods:
        legacy_params = _parameters(getattr(sdk.Queue, method))
        ours = _parameters(getattr(compat.Queue, method))
        assert ours[: len(legacy_params)] == legacy_params, method
    assert _parameters(compat.Queue.__init__)[:1] == _parameters(sdk.Queue.__init__)
    assert _parameters(compat.Task.__init__)[:1] == _parameters(sdk.Task.__init__)
    for attribute in [
        "eta",
        "eta_posix",
        "headers",
        "method",
        "name",
        "on_queue_url",
        "payload",
        "queue_name",
        "retry_count",
        "retry_options",
        "size",
        "tag",
        "target",
        "url",
        "was_deleted",
        "was_enqueued",
        "dispatch_deadline_usec",
        "extract_params",
        "add",
        "add_async",
    ]:
        assert hasattr(compat.Task, attribute) or attribute in compat.Task.__slots__, attribute
    task = compat.Task(payload="a=1&b=2&b=3", name="t")
    assert task.extract_params() == {b"a": b"1", b"b": [b"2", b"3"]}
    for attribute in ("queue", "tasks", "oldest_eta_usec", "executed_last_minute", "in_flight"):
        assert attribute in compat.QueueStatistics._ATTRS
    assert _parameters(compat.QueueStatistics.fetch) == _parameters(sdk.QueueStatistics.fetch)
