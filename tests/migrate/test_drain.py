"""drain() from memory to memory: what moves, what stays, what the report says."""

from __future__ import annotations

import datetime as dt
import math
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pullqueue import Queue, Task
from pullqueue.adapters.memory import MemoryBackend
from pullqueue.errors import (
    ConfigurationError,
    InvalidTaskError,
    PermissionDeniedError,
    TransientError,
    UnknownQueueError,
)
from pullqueue.migrate import MigrationReport, drain
from tests.migrate.support import Hooked, HookedListing, contents, fill

FAST: dict[str, Any] = {"quiet_period": 0.05, "lease_rate": math.inf, "max_wait": 0.5}


def queues(
    source_backend: Any = None, dest_backend: Any = None, name: str = "work"
) -> tuple[Queue, Queue]:
    return Queue(name, source_backend or MemoryBackend()), Queue(
        name, dest_backend or MemoryBackend()
    )


def test_every_task_moves_with_payload_name_and_tag(tmp_path: Path) -> None:
    source, dest = queues()
    named = fill(source, 1500)
    unnamed = fill(source, 700, named=False)
    before = contents(source.backend, "work")  # type: ignore[arg-type]

    report = drain(source, dest, journal=tmp_path / "j", **FAST)

    after = contents(dest.backend, "work")  # type: ignore[arg-type]
    assert {n: (p, t) for n, (p, t, _) in after.items()} == {
        n: (p, t) for n, (p, t, _) in before.items()
    }
    assert {t.name for t in unnamed} <= set(after)  # the source's generated names are carried
    assert len(named) + len(unnamed) == 2200
    assert source.stats().tasks == 0
    assert report.ok
    assert (report.leased, report.written, report.deleted) == (2200, 2200, 2200)
    assert report.failed == report.skipped_duplicates == report.possible_duplicates == 0
    assert report.stopped == "the source stayed empty"
    assert report.tasks_per_second > 0


def test_moved_tasks_are_available_at_once_in_the_destination() -> None:
    source, dest = queues()
    fill(source, 10)
    drain(source, dest, **FAST)
    leased = dest.lease(60, 100)
    assert len(leased) == 10
    assert all(task.retry_count == 1 for task in leased)


def test_future_eta_tasks_move_with_their_eta_from_a_listing_source() -> None:
    shift = [0.0]
    source_backend = MemoryBackend(clock=lambda: time.time() + shift[0])
    dest_backend = MemoryBackend(clock=lambda: time.time() + shift[0])
    source, dest = queues(source_backend, dest_backend)
    later = time.time() + 3600
    eta = dt.datetime.fromtimestamp(later, tz=dt.timezone.utc)
    source.add([Task(b"later", name="later", tag="x", eta=eta), Task(b"now", name="now")])

    report = drain(source, dest, **FAST)

    assert source.stats().tasks == 0
    assert (report.leased, report.listed, report.written, report.deleted) == (1, 1, 2, 2)
    moved = contents(dest_backend, "work")
    assert moved["later"] == (b"later", "x", pytest.approx(later))
    assert [t.name for t in dest.lease(7200, 10)] == ["now"]  # "later" is not due yet
    shift[0] = 3601
    assert [t.name for t in dest.lease(60, 10)] == ["later"]


def test_future_eta_tasks_on_a_source_that_cannot_list_are_reported_waiting() -> None:
    source_backend = Hooked()
    source, dest = queues(source_backend)
    later = time.time() + 7200
    source.add(
        [
            Task(b"a", name="later", eta=dt.datetime.fromtimestamp(later, tz=dt.timezone.utc)),
            Task(name="now"),
        ]
    )

    report = drain(source, dest, **FAST)

    assert report.ok  # explained: waiting on an ETA the statistics give
    assert (report.written, report.still_waiting, report.unexplained) == (1, 1, 0)
    assert report.waiting[0].count == 1
    assert report.waiting[0].oldest_eta == dt.datetime.fromtimestamp(
        later, tz=dt.timezone.utc
    ).isoformat(timespec="seconds")
    assert source.stats().tasks == 1  # still there, untouched
    assert next(source_backend.inner.list_tasks("work")).retry_count == 0


def test_tasks_due_soon_on_a_non_listing_source_are_waited_for() -> None:
    source, dest = queues(Hooked())
    source.add(Task(b"soon", name="soon", countdown=0.3))
    report = drain(source, dest, **FAST)
    assert report.written == 1 and report.still_waiting == 0
    assert source.stats().tasks == 0


def test_dry_run_on_a_listing_source_counts_samples_and_changes_nothing() -> None:
    source, dest = queues()
    fill(source, 30)
    source.add(Task(b"x" * 10, name="future", countdown=600))
    report = drain(source, dest, dry_run=True, sample_size=5, **FAST)
    assert report.dry is not None and report.dry.listed
    assert (report.dry.tasks, report.dry.available, report.dry.future_eta) == (31, 30, 1)
    assert len(report.dry.sample) == 5
    assert report.dry.by_tag == {"(untagged)": 16, "tag1": 5, "tag0": 5, "tag2": 5}
    assert report.leased == report.written == 0
    assert source.stats().tasks == 31 and dest.stats().tasks == 0
    assert all(t.retry_count == 0 for t in source.backend.list_tasks("work"))  # type: ignore[attr-defined]


def test_dry_run_on_a_non_listing_source_reads_statistics_and_never_leases() -> None:
    backend = Hooked()
    source, dest = queues(backend)
    fill(source, 12)
    report = drain(source, dest, dry_run=True, **FAST)
    assert report.dry is not None and not report.dry.listed
    assert report.dry.tasks == 12 and report.dry.sample == []
    assert "retry_count" in report.dry.note
    assert backend.calls["lease"] == 0
    assert "dry run" in report.render()


def test_dry_run_does_not_create_the_journal(tmp_path: Path) -> None:
    source, dest = queues()
    fill(source, 3)
    drain(source, dest, dry_run=True, journal=tmp_path / "journal", **FAST)
    assert not (tmp_path / "journal").exists()


def test_names_the_destination_already_has_are_skipped_as_duplicates() -> None:
    source, dest = queues()
    fill(source, 50)
    dest.add([Task(b"dual-written", name=f"t{i}") for i in range(10)])
    dest.add(Task(b"done", name="t10"))
    dest.delete_by_name("t10")  # tombstoned: a worker already did it

    report = drain(source, dest, **FAST)

    assert report.ok
    assert (report.written, report.skipped_duplicates, report.deleted) == (39, 11, 50)
    assert source.stats().tasks == 0
    assert contents(dest.backend, "work")["t0"][0] == b"dual-written"  # type: ignore[arg-type]


def test_a_task_the_destination_refuses_stays_in_the_source_and_fails_the_report() -> None:
    def refuse_t7(real: Any, queue: str, tasks: list[Task]) -> list[Any]:
        keep = [t for t in tasks if t.name != "t7"]
        outcomes = iter(real(queue, keep))
        return [
            InvalidTaskError("refused", queue=queue, task="t7")
            if t.name == "t7"
            else next(outcomes)
            for t in tasks
        ]

    source, dest = queues(dest_backend=Hooked(add=refuse_t7))
    fill(source, 20)
    report = drain(source, dest, **FAST)

    assert not report.ok
    assert report.failed == 1 and report.failures[0].task == "t7"
    assert "refused" in report.failures[0].error
    assert (report.written, report.deleted) == (19, 19)
    left = list(source.backend.list_tasks("work"))  # type: ignore[attr-defined]
    assert [t.name for t in left] == ["t7"]
    assert left[0].eta_posix <= time.time()  # released at the end: available again
    assert "NOT OK" in report.render()


def test_transient_destination_errors_are_retried_and_counted_as_possible_duplicates() -> None:
    failures = [2]

    def flaky(real: Any, queue: str, tasks: list[Task]) -> Any:
        if failures[0]:
            failures[0] -= 1
            raise TransientError("unavailable", queue=queue)
        return real(queue, tasks)

    source, dest = queues(dest_backend=Hooked(add=flaky))
    fill(source, 250)
    report = drain(source, dest, write_threads=1, **FAST)
    assert report.ok and report.written == 250 and dest.stats().tasks == 250
    # the first chunk's two adds got no answer, so each may have left a copy: 2 per task
    assert report.possible_duplicates == 200


def test_a_destination_that_stays_down_stops_the_drain_and_loses_nothing() -> None:
    def down(real: Any, queue: str, tasks: list[Task]) -> Any:
        raise TransientError("unavailable", queue=queue)

    source, dest = queues(dest_backend=Hooked(add=down))
    fill(source, 30)
    report = drain(source, dest, lease_seconds=0.2, **FAST)
    assert not report.ok and report.stopped == "error"
    assert "TransientError" in (report.error or "")
    assert report.written == report.deleted == 0 and report.released == 90
    assert source.stats().tasks == 30
    assert source.stats().leased == 0


def test_a_fatal_destination_error_stops_at_once_and_releases_the_batch() -> None:
    def denied(real: Any, queue: str, tasks: list[Task]) -> Any:
        raise PermissionDeniedError("no publish permission", queue=queue)

    backend = Hooked(add=denied)
    source, dest = queues(dest_backend=backend)
    fill(source, 30)
    report = drain(source, dest, **FAST)
    assert report.stopped == "error" and "PermissionDeniedError" in (report.error or "")
    assert backend.calls["add"] == 1
    assert source.stats().tasks == 30 and source.stats().leased == 0


def test_transient_lease_errors_are_backed_off_and_retried() -> None:
    errors = [3]

    def flaky(real: Any, *args: Any, **kwargs: Any) -> Any:
        if errors[0]:
            errors[0] -= 1
            raise TransientError("try later")
        return real(*args, **kwargs)

    source, dest = queues(HookedListing(lease=flaky))
    fill(source, 40)
    report = drain(source, dest, **FAST)
    assert report.ok and report.written == 40


def test_source_lease_calls_stay_under_the_rate_limit() -> None:
    times: list[float] = []

    def timed(real: Any, *args: Any, **kwargs: Any) -> Any:
        times.append(time.monotonic())
        return real(*args, **kwargs)

    source, dest = queues(HookedListing(lease=timed), name="rated")
    fill(source, 60)
    report = drain(source, dest, batch_size=10, lease_rate=10, quiet_period=0.05, max_wait=0)
    assert report.written == 60
    assert len(times) >= 7
    for i in range(len(times) - 10):
        assert times[i + 10] - times[i] >= 1.0 - 1e-3  # never 11 calls within one second


def test_follow_keeps_draining_until_stopped(tmp_path: Path) -> None:
    source, dest = queues()
    stop = threading.Event()
    reports: list[MigrationReport] = []

    def produce() -> None:
        for batch in range(5):
            source.add([Task(b"p", name=f"p{batch}-{i}") for i in range(100)])
            time.sleep(0.05)
        deadline = time.monotonic() + 10
        while dest.stats().tasks < 500 and time.monotonic() < deadline:
            time.sleep(0.02)
        stop.set()

    producer = threading.Thread(target=produce)
    producer.start()
    report = drain(source, dest, follow=True, stop=stop, progress=reports.append, **FAST)
    producer.join()
    assert report.ok and report.follow
    assert report.written == 500 and source.stats().tasks == 0
    assert report.stopped == "stop requested"
    assert reports and reports[-1] is report


def test_stop_during_the_destination_write_finishes_the_batch_and_stops() -> None:
    stop = threading.Event()

    def stop_midway(real: Any, queue: str, tasks: list[Task]) -> Any:
        stop.set()
        return real(queue, tasks)

    source, dest = queues(dest_backend=Hooked(add=stop_midway))
    fill(source, 2500)
    report = drain(source, dest, stop=stop, **FAST)
    assert report.stopped.startswith("interrupted") and report.interrupted
    # the batch being written when the stop came, and the one leased meanwhile, complete
    assert report.written == report.deleted and report.written in (1000, 2000)
    assert source.stats().tasks == 2500 - report.written and source.stats().leased == 0
    assert report.still_waiting == report.left_in_source == 2500 - report.written
    assert not report.ok  # interrupted: the source is not empty, run it again


def test_stop_while_the_destination_is_failing_releases_what_was_not_written() -> None:
    stop = threading.Event()

    def failing(real: Any, queue: str, tasks: list[Task]) -> Any:
        stop.set()
        raise TransientError("unavailable", queue=queue)

    source, dest = queues(dest_backend=Hooked(add=failing))
    fill(source, 300)
    report = drain(source, dest, stop=stop, write_threads=1, **FAST)
    assert report.released == 300 and report.written == 0
    assert source.stats().leased == 0 and source.stats().tasks == 300


def test_preflight_errors_come_before_anything_moves() -> None:
    def missing(real: Any, queue: str) -> Any:
        raise UnknownQueueError("no such topic", queue=queue)

    source_backend = HookedListing()
    source, dest = queues(source_backend, Hooked(stats=missing))
    fill(source, 5)
    with pytest.raises(UnknownQueueError, match=r"preflight on the destination.*nothing was moved"):
        drain(source, dest, **FAST)
    assert source_backend.calls["lease"] == 0


def test_a_crash_in_preflight_of_a_non_pullqueue_error_is_a_configuration_error() -> None:
    def no_credentials(real: Any, queue: str) -> Any:
        raise RuntimeError("could not find default credentials")

    source, dest = queues(Hooked(stats=no_credentials))
    with pytest.raises(ConfigurationError, match="credentials"):
        drain(source, dest, **FAST)


def test_the_same_queue_as_source_and_destination_is_refused() -> None:
    backend = MemoryBackend()
    with pytest.raises(ConfigurationError, match="same queue"):
        drain(Queue("q", backend), Queue("q", backend), **FAST)


def test_bad_options_are_refused() -> None:
    source, dest = queues()
    with pytest.raises(ConfigurationError, match="batch_size"):
        drain(source, dest, batch_size=1001)
    with pytest.raises(ConfigurationError, match="lease_seconds"):
        drain(source, dest, lease_seconds=0)


def test_report_json_has_every_count() -> None:
    source, dest = queues()
    fill(source, 5)
    report = drain(source, dest, **FAST)
    data = report.to_dict()
    for key in (
        "leased",
        "written",
        "deleted",
        "skipped_duplicates",
        "possible_duplicates",
        "still_waiting",
        "failed",
        "elapsed",
        "tasks_per_second",
        "ok",
    ):
        assert key in data
    assert data["written"] == 5 and data["ok"] is True
    assert '"written": 5' in report.to_json()


def test_a_retry_limit_moves_less_the_attempts_already_made() -> None:
    def with_limit(real: Any, *args: Any, **kwargs: Any) -> Any:
        tasks = real(*args, **kwargs)
        for task in tasks:
            task.retry_limit = 5
            task.retry_count += 2  # leased twice by workers before the migration
        return tasks

    source, dest = queues(HookedListing(lease=with_limit))
    fill(source, 3)
    drain(source, dest, **FAST)
    for _ in range(3):  # attempts left: 5 - 2 = 3
        leased = dest.lease(0.001, 10)
        assert len(leased) == 3
        time.sleep(0.01)
    assert dest.lease(60, 10) == []  # the limit is reached: the destination dropped them


def test_a_batch_whose_lease_ran_out_while_it_waited_is_leased_again_not_written() -> None:
    slow = [True]

    def slow_first_add(real: Any, queue: str, tasks: list[Task]) -> Any:
        if slow[0]:
            slow[0] = False
            time.sleep(0.8)  # longer than the lease of the batch queued behind this one
        return real(queue, tasks)

    source, dest = queues(dest_backend=Hooked(add=slow_first_add))
    fill(source, 1500)
    report = drain(source, dest, batch_size=500, lease_seconds=0.5, write_threads=1, **FAST)
    assert report.ok and report.written == 1500 and dest.stats().tasks == 1500
    assert report.leased >= 2000  # the second batch was leased again once its lease ran out
    assert report.skipped_duplicates == 0  # ... and written once, after that second lease
    assert source.stats().tasks == 0
