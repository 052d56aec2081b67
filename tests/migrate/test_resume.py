"""A drain killed at each step of a batch, then rerun with its journal: nothing lost, nothing
re-sent that the destination had confirmed, and the duplicate window counted.

`Crash` (a BaseException) stands in for SIGKILL at an exact point; the subprocess tests in
test_crash.py kill the real command at random moments.
"""

from __future__ import annotations

import math
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pullqueue import Queue, Task
from pullqueue.adapters.memory import MemoryBackend
from pullqueue.errors import TransientError
from pullqueue.migrate import drain
from tests.migrate.support import Crash, EveryCopy, Hooked, HookedListing, contents, fill

pytestmark = pytest.mark.faults

FAST: dict[str, Any] = {"quiet_period": 0.05, "lease_rate": math.inf, "max_wait": 0.5}
COUNT = 2500


class World:
    """A source and a destination that outlive the runs, on one shiftable clock."""

    def __init__(self, tmp_path: Path, dest_backend: Hooked | None = None) -> None:
        self.shift = 0.0
        self.source_backend = HookedListing(MemoryBackend(clock=self.now))
        self.dest_backend = dest_backend or Hooked(MemoryBackend(clock=self.now))
        self.source = Queue("jobs", self.source_backend)
        self.dest = Queue("jobs", self.dest_backend)
        self.journal = tmp_path / "migrate.journal"
        self.tasks = fill(self.source, COUNT)

    def now(self) -> float:
        return time.time() + self.shift

    def run(self, **options: Any) -> Any:
        return drain(
            self.source, self.dest, journal=self.journal, write_threads=1, **{**FAST, **options}
        )

    def crash(self, **options: Any) -> None:
        with pytest.raises(Crash):
            self.run(**options)
        self.source_backend.hooks.clear()
        self.dest_backend.hooks.clear()

    def run_or_crash(self, **options: Any) -> Any:
        """Run; the report, or None if a hook crashed it (the hooks are cleared either way)."""
        try:
            return self.run(**options)
        except Crash:
            return None
        finally:
            self.source_backend.hooks.clear()
            self.dest_backend.hooks.clear()

    def assert_complete(self) -> None:
        moved = contents(self.dest_backend.inner, "jobs")
        assert sorted(moved) == sorted(t.name or "" for t in self.tasks)
        assert all(moved[t.name or ""][0] == t.payload for t in self.tasks)
        assert self.source.stats().tasks == 0


def crash_after(count: list[int]) -> Any:
    """A hook that lets the real call happen, and crashes after the count-th call."""

    def hook(real: Any, *args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        count[0] -= 1
        if count[0] == 0:
            raise Crash
        return result

    return hook


def test_crash_after_the_destination_confirmed_resends_only_the_batch_in_doubt(
    tmp_path: Path,
) -> None:
    world = World(tmp_path)
    world.dest_backend.hooks["add"] = crash_after([13])  # batch 2, chunk 3 confirmed, then kill
    world.crash()
    assert world.dest.stats().tasks == 1300 and world.source.stats().tasks == 1500

    report = world.run()

    world.assert_complete()
    assert report.ok
    # handed back at once, no waiting: the batch being written, and the last 500 if leased
    assert report.released_from_crashed_run in (1000, 1500)
    assert report.skipped_duplicates == 300  # re-sent; the destination knew the names
    assert report.possible_duplicates == 700  # re-sent in doubt; the destination had not them
    assert report.written == 700 + 500 and report.already_written == 0


def test_crash_after_the_journal_write_deletes_without_resending(tmp_path: Path) -> None:
    world = World(tmp_path)
    deletes = [0]

    def crash_before_second_delete(real: Any, *args: Any) -> Any:
        deletes[0] += 1
        if deletes[0] == 2:
            raise Crash
        return real(*args)

    world.source_backend.hooks["delete"] = crash_before_second_delete
    world.crash()
    adds_before = world.dest_backend.calls["add"]

    report = world.run()

    world.assert_complete()
    assert report.ok
    assert report.already_written == 1000  # confirmed before the kill: not sent again
    assert report.written == 500 and report.possible_duplicates == 0
    assert report.skipped_duplicates == 0
    assert world.dest_backend.calls["add"] - adds_before == 5


def test_crash_before_the_lease_was_recorded_waits_the_lease_out(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.source_backend.hooks["lease"] = crash_after([2])  # batch 2 leased, not recorded
    world.crash(lease_seconds=30)
    assert world.source.stats().leased == 1000

    world.shift += 28  # the rerun starts while the dead run's lease still holds (2 s more)
    started = time.monotonic()
    report = world.run(lease_seconds=30, max_wait=0)

    assert report.ok and report.written == 1500
    world.assert_complete()
    assert report.released_from_crashed_run == 0
    assert time.monotonic() - started >= 2  # waited for the lease, did not give up


def test_crash_before_any_write_releases_the_held_batch_at_start(tmp_path: Path) -> None:
    world = World(tmp_path)

    def crash_now(real: Any, *args: Any) -> Any:
        raise Crash

    world.dest_backend.hooks["add"] = crash_now
    world.crash(lease_seconds=600)
    started = time.monotonic()
    report = world.run(lease_seconds=600)
    assert time.monotonic() - started < 5  # no 600 s wait: the leases were handed back
    assert report.released_from_crashed_run in (1000, 2000)
    assert report.possible_duplicates == 1000  # its writing had begun: in doubt, if in vain
    world.assert_complete()


def test_repeated_crashes_at_different_points_still_finish(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.dest_backend.hooks["add"] = crash_after([4])
    world.crash()
    world.source_backend.hooks["delete"] = crash_after([1])
    world.crash()
    world.dest_backend.hooks["add"] = crash_after([7])
    world.crash()
    report = world.run()
    world.assert_complete()
    assert report.ok


def test_without_a_journal_a_rerun_resends_and_the_destination_drops_the_names(
    tmp_path: Path,
) -> None:
    world = World(tmp_path)
    world.dest_backend.hooks["add"] = crash_after([3])
    with pytest.raises(Crash):
        drain(world.source, world.dest, write_threads=1, lease_seconds=5, **FAST)
    world.dest_backend.hooks.clear()
    world.shift += 6  # the dead run's lease ran out
    report = drain(world.source, world.dest, write_threads=1, **FAST)
    world.assert_complete()
    assert report.skipped_duplicates == 300 and report.written == 2200


def test_a_finished_run_is_not_treated_as_crashed(tmp_path: Path) -> None:
    world = World(tmp_path)
    first = world.run()
    assert first.ok and first.written == COUNT
    world.source.add([Task(b"late", name="late")])
    second = world.run()
    assert second.released_from_crashed_run == 0
    assert second.written == 1 and second.possible_duplicates == 0


def assert_bounded(world: World, dest: EveryCopy, *reports: Any) -> int:
    """Every task arrived, none stayed, and the copies beyond one are within the possible
    duplicates of the reports (of every run that finished); return how many there are."""
    assert set(dest.copies) == {t.name for t in world.tasks}
    assert world.source.stats().tasks == 0
    assert reports[-1].ok
    duplicates = dest.duplicates()
    possible = sum(report.possible_duplicates for report in reports)
    assert duplicates <= possible, (duplicates, possible)
    return duplicates


def test_the_last_report_counts_the_duplicate_window_of_every_killed_run(tmp_path: Path) -> None:
    dest = EveryCopy()  # keeps every copy, as Pub/Sub without a name registry
    world = World(tmp_path, dest)
    dest.hooks["add"] = crash_after([3])  # killed writing its first batch: 300 copies made
    world.crash()
    dest.hooks["add"] = crash_after([20])  # the rerun is killed once its second batch is added
    world.crash()

    report = world.run()

    duplicates = assert_bounded(world, dest, report)
    assert duplicates >= 1300  # the 300 of the first window, the 1000 of the second
    assert report.possible_duplicates <= 2000  # at most one batch per kill
    assert 0 < report.possible_duplicates_from_killed_runs < report.possible_duplicates
    assert world.run().possible_duplicates == 0  # counted in one report only


@pytest.mark.parametrize("seed", range(6))
def test_killed_again_and_again_among_unanswered_adds_the_report_bounds_the_duplicates(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    dest = EveryCopy()
    world = World(tmp_path, dest)

    def flaky(crash_at: int | None) -> Any:
        calls = [0]

        def add(real: Any, queue: str, tasks: list[Task]) -> Any:
            calls[0] += 1
            result = real(queue, tasks)  # the copies are made; the answer may not come back
            if calls[0] == crash_at:
                raise Crash
            if rng.random() < 0.1:
                raise TransientError("no answer", queue=queue)
            return result

        return add

    reports = []  # of the runs that were not killed
    for _ in range(rng.randint(1, 3)):
        if rng.random() < 0.8:
            dest.hooks["add"] = flaky(rng.randint(1, 25))
        else:
            world.source_backend.hooks["delete"] = crash_after([rng.randint(1, 2)])
        if report := world.run_or_crash():
            reports.append(report)
    dest.hooks["add"] = flaky(None)

    reports.append(world.run())

    assert_bounded(world, dest, *reports)


def test_a_batch_leased_again_while_it_is_written_is_not_sent_twice(tmp_path: Path) -> None:
    """Its lease runs out mid-write and the next lease call gets its tasks again."""
    dest = EveryCopy()
    world = World(tmp_path, dest)
    world.source.purge()
    world.tasks = fill(world.source, 500, prefix="u")
    expired, leased_again = threading.Event(), threading.Event()
    adds = [0]

    def slow_add(real: Any, queue: str, tasks: list[Task]) -> Any:
        adds[0] += 1
        if adds[0] == 1:
            world.shift += 31  # the batch's 30 s lease runs out while it is being written
            expired.set()
            assert leased_again.wait(10)
        return real(queue, tasks)

    leases = [0]

    def lease(real: Any, *args: Any, **kwargs: Any) -> Any:
        leases[0] += 1
        if leases[0] == 2:
            assert expired.wait(10)
            tasks = real(*args, **kwargs)
            assert len(tasks) == 500  # the batch being written, all of it again
            leased_again.set()
            return tasks
        return real(*args, **kwargs)

    dest.hooks["add"] = slow_add
    world.source_backend.hooks["lease"] = lease

    report = world.run(batch_size=500, lease_seconds=30)

    assert leased_again.is_set()
    assert assert_bounded(world, dest, report) == 0
    assert report.leased == 1000 and report.written == report.deleted == 500
    assert report.possible_duplicates == report.gone_from_source == 0
