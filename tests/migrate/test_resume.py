"""A drain killed at each step of a batch, then rerun with its journal: nothing lost, nothing
re-sent that the destination had confirmed, and the duplicate window counted.

`Crash` (a BaseException) stands in for SIGKILL at an exact point; the subprocess tests in
test_crash.py kill the real command at random moments.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import pytest

from pullqueue import Queue, Task
from pullqueue.adapters.memory import MemoryBackend
from pullqueue.migrate import drain
from tests.migrate.support import Crash, Hooked, HookedListing, contents, fill

FAST: dict[str, Any] = {"quiet_period": 0.05, "lease_rate": math.inf, "max_wait": 0.5}
COUNT = 2500


class World:
    """A source and a destination that outlive the runs, on one shiftable clock."""

    def __init__(self, tmp_path: Path) -> None:
        self.shift = 0.0
        self.source_backend = HookedListing(MemoryBackend(clock=self.now))
        self.dest_backend = Hooked(MemoryBackend(clock=self.now))
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
