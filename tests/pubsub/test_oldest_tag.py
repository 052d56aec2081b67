"""`lease_tasks_by_tag(tag=None)` in one process on Pub/Sub, against Google's SDK stub.

The oldest available task's tag decides, whichever shard it is on: deferred tasks do not make a
lease come back empty, the oldest task is not chosen among the first `max_tasks` only, and a
directory-window worker gets each window whole and in order. Each scenario runs through the SDK
(the oracle, on its stub) and through `pullqueue.compat.taskqueue` on the emulator.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pullqueue.adapters.pubsub.layout import shard_of
from pullqueue.compat import taskqueue as compat
from tests.legacy_stub import legacy_taskqueue
from tests.pubsub.conftest import MakeBackend

Scenario = Callable[[Any, Any], list[Any]]
"""scenario(taskqueue module, queue) -> what the worker observed."""


def observed_on_both(
    scenario: Scenario, make_backend: MakeBackend, tmp_path: Path
) -> tuple[list[Any], list[Any]]:
    """What the scenario observes on the SDK stub and on Pub/Sub through the compat module."""
    with legacy_taskqueue(time.time, tmp_path, {"oldest": None}) as sdk:
        legacy = scenario(sdk, sdk.Queue("oldest"))
    ours = scenario(compat, compat.Queue("oldest", make_backend()))
    return legacy, ours


def deferred_first(taskqueue: Any, queue: Any) -> list[Any]:
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
    queue.add(
        [taskqueue.Task(payload="l", tag="later", eta=later, method="PULL") for _ in range(20)]
    )
    queue.add([taskqueue.Task(payload="n", tag="now", method="PULL") for _ in range(5)])
    return [[t.tag for t in queue.lease_tasks_by_tag(60, 1)] for _ in range(3)]


def test_deferred_tasks_do_not_make_a_lease_empty(
    make_backend: MakeBackend, tmp_path: Path
) -> None:
    assert shard_of("later") != shard_of("now")
    legacy, ours = observed_on_both(deferred_first, make_backend, tmp_path)
    assert legacy == [["now"], ["now"], ["now"]]
    assert ours == legacy


def oldest_beyond_max_tasks(new: str, old: str) -> Scenario:
    def scenario(taskqueue: Any, queue: Any) -> list[Any]:
        tasks = [taskqueue.Task(payload="n", tag=new, method="PULL") for _ in range(49)]
        an_hour_ago = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1)
        tasks.append(taskqueue.Task(payload="o", tag=old, eta=an_hour_ago, method="PULL"))
        queue.add(tasks)
        return [t.tag for t in queue.lease_tasks_by_tag(60, 5)]

    return scenario


@pytest.mark.parametrize(
    ("new", "old", "same_shard"), [("new", "old", True), ("new", "oldest", False)]
)
def test_the_oldest_task_decides_not_the_first_max_tasks(
    new: str, old: str, same_shard: bool, make_backend: MakeBackend, tmp_path: Path
) -> None:
    assert (shard_of(new) == shard_of(old)) is same_shard
    legacy, ours = observed_on_both(oldest_beyond_max_tasks(new, old), make_backend, tmp_path)
    assert legacy == [old]
    assert ours == legacy


WINDOWS = [3, 1200, 40, 7, 2500, 150, 1, 600]


def directory_windows(taskqueue: Any, queue: Any) -> list[Any]:
    """One tag per window, added window by window; the worker leases by oldest tag, then that
    tag until it runs dry. Observes (tag, tasks) per window as it came out."""
    for number, size in enumerate(WINDOWS):
        tasks = [
            taskqueue.Task(payload=f"{number}-{i}", tag=f"window-{number}", method="PULL")
            for i in range(size)
        ]
        for start in range(0, size, 100):
            queue.add(tasks[start : start + 100])
    windows: list[Any] = []
    while first := queue.lease_tasks_by_tag(60, 1000):
        tag = first[0].tag
        got = list(first)
        while more := queue.lease_tasks_by_tag(60, 1000, tag=tag):
            got += more
        assert {t.tag for t in got} == {tag}
        queue.delete_tasks(got)
        windows.append((tag, len(got)))
    return windows


def test_a_directory_window_worker_gets_each_window_whole_and_in_order(
    make_backend: MakeBackend, tmp_path: Path
) -> None:
    legacy, ours = observed_on_both(directory_windows, make_backend, tmp_path)
    assert legacy == [(f"window-{n}", size) for n, size in enumerate(WINDOWS)]
    assert ours == legacy
