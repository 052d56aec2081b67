"""Workers that stop at their first empty lease, in several real processes: nothing left behind.

The legacy docs tell a worker to stop calling once a lease returns []. On Pub/Sub each process
holds a hand of tasks and the shard claims keep other processes off it, so a process must answer
[] only when nothing it could lease is left: never after giving back tasks it could have served,
never while holding tasks of its own. A task a stopped process gives back at exit counts as left.
"""

from __future__ import annotations

import json
import os
import random
import sys
import textwrap
from pathlib import Path

import pytest

from pullqueue import Queue, Task
from tests.pubsub.conftest import MakeBackend
from tests.support.processes import run_together

REPO = Path(__file__).resolve().parents[2]

_WORKER = textwrap.dedent(
    """
    import json, sys, threading, time
    from pathlib import Path
    from pullqueue import Settings
    from pullqueue.adapters.pubsub import PubSubBackend
    from pullqueue.compat import taskqueue

    project, out, index, threads = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    backend = PubSubBackend(project, settings=Settings(), auto_create=True)
    queue = taskqueue.Queue("first-empty", backend)
    backend.topology("first-empty")
    (out / f"ready-{index}").write_text("")
    while not (out / "go").exists():
        time.sleep(0.01)
    batches, lock, errors = [], threading.Lock(), []

    def work():
        try:
            while batch := queue.lease_tasks_by_tag(60, 1000):
                queue.delete_tasks(batch)
                with lock:
                    batches.append([[t.payload.decode(), t.tag] for t in batch])
        except BaseException as exc:
            errors.append(repr(exc))

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    backend.close()
    (out / f"out-{index}.json").write_text(json.dumps({"batches": batches, "errors": errors}))
    """
)


def tagged_pairs(count: int, tags: int, *, seed: int) -> list[tuple[str, str]]:
    """(payload, tag) of `count` tasks over `tags` tags, shuffled."""
    pairs = [(f"p{i}", f"tag-{i % tags}") for i in range(count)]
    random.Random(seed).shuffle(pairs)
    return pairs


def add_pairs(queue: Queue, pairs: list[tuple[str, str]]) -> None:
    """The tasks of `pairs`, added 100 a call."""
    for start in range(0, len(pairs), 100):
        queue.add([Task(p.encode(), tag=tag) for p, tag in pairs[start : start + 100]])


def worker_commands(project: str, out: Path, processes: int, threads: int) -> list[list[str]]:
    """The commands of `processes` workers of `threads` threads each (see _WORKER)."""
    return [
        [sys.executable, "-c", _WORKER, project, str(out), str(n), str(threads)]
        for n in range(processes)
    ]


def reported_batches(out: Path, processes: int) -> list[list[list[str]]]:
    """Every batch the workers leased ([payload, tag] pairs), once none reported an error."""
    reports = [json.loads((out / f"out-{n}.json").read_text()) for n in range(processes)]
    assert [e for report in reports for e in report["errors"]] == []
    return [batch for report in reports for batch in report["batches"]]


@pytest.mark.parametrize(
    ("processes", "threads", "tags", "count"),
    [(4, 1, 50, 2000), (2, 4, 200, 2000), (6, 1, 1000, 3000)],
    ids=["4x1-50-tags", "2x4-200-tags", "6x1-1000-tags"],
)
def test_processes_that_stop_at_their_first_empty_lease_leave_nothing_behind(
    make_backend: MakeBackend,
    project: str,
    tmp_path: Path,
    processes: int,
    threads: int,
    tags: int,
    count: int,
) -> None:
    pairs = tagged_pairs(count, tags, seed=11)
    add_pairs(Queue("first-empty", make_backend()), pairs)
    # Started together, as workers that are already running when tasks arrive.
    run_together(
        worker_commands(project, tmp_path, processes, threads),
        tmp_path,
        cwd=REPO,
        env=os.environ,
        timeout=300,
    )
    batches = reported_batches(tmp_path, processes)
    leased = [payload for batch in batches for payload, _ in batch]
    left = sorted({p for p, _ in pairs} - set(leased))
    assert left == [], f"{len(left)} left behind"
    assert len(leased) == len(set(leased))  # none twice
    assert all(len({tag for _, tag in batch}) == 1 for batch in batches)  # no mixed batch
