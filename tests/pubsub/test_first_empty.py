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
import uuid
from pathlib import Path

import pytest

from pullqueue import Queue, Task
from tests.pubsub.conftest import MakeBackend, backend_on
from tests.support.processes import run_together
from tests.support.realpubsub import Knobs, RealisticPubSub

REPO = Path(__file__).resolve().parents[2]

_WORKER = textwrap.dedent(
    """
    import json, sys, threading, time
    from pathlib import Path
    from pullqueue import Settings
    from pullqueue.adapters.pubsub import PubSubBackend
    from pullqueue.compat import taskqueue

    project, out, index, threads = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    plain = sys.argv[5:] == ["plain"]
    backend = PubSubBackend(project, settings=Settings(), auto_create=True)
    queue = taskqueue.Queue("first-empty", backend)
    backend.topology("first-empty")
    (out / f"ready-{index}").write_text("")
    while not (out / "go").exists():
        time.sleep(0.01)
    batches, lock, errors = [], threading.Lock(), []

    def work():
        try:
            lease = (
                (lambda: queue.lease_tasks(60, 100))
                if plain
                else (lambda: queue.lease_tasks_by_tag(60, 1000))
            )
            while batch := lease():
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


def worker_commands(
    project: str, out: Path, processes: int, threads: int, *, plain: bool = False
) -> list[list[str]]:
    """The commands of `processes` workers of `threads` threads each (see _WORKER), leasing by
    oldest tag, or with `plain` lease_tasks(60, 100)."""
    return [
        [sys.executable, "-c", _WORKER, project, str(out), str(n), str(threads)]
        + (["plain"] if plain else [])
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


def test_plain_leases_through_the_service_layer_that_stop_at_their_first_empty_one_leave_nothing(
    emulator: str, tmp_path: Path
) -> None:
    """Plain `lease_tasks(60, 100)` in 2 processes x 2 threads through a layer answering like the
    service at 30 ms (partial pulls, held empty pulls, filters): each thread stops at its first
    empty lease. A plain lease's later rounds glance (a glance may find nothing while tasks
    wait), so an answer of [] must still rest on a patient pull of every subscription: nothing
    is left behind, nothing is leased twice. Tagged and untagged tasks, on every shard and the
    worker subscription."""
    processes, threads = 2, 2
    pairs = tagged_pairs(1200, 60, seed=13)
    untagged = [f"u{i}" for i in range(300)]
    with RealisticPubSub(emulator, Knobs.service(0.03), seed=17) as layer:
        project = f"plain-empty-{uuid.uuid4().hex[:12]}"
        producer = backend_on(layer, project)
        try:
            queue = Queue("first-empty", producer)
            add_pairs(queue, pairs)
            for start in range(0, len(untagged), 100):
                queue.add([Task(p.encode()) for p in untagged[start : start + 100]])
            run_together(
                worker_commands(project, tmp_path, processes, threads, plain=True),
                tmp_path,
                cwd=REPO,
                env={**os.environ, "PUBSUB_EMULATOR_HOST": layer.address},
                timeout=300,
            )
        finally:
            producer.close()
    leased = [payload for batch in reported_batches(tmp_path, processes) for payload, _ in batch]
    left = sorted(({p for p, _ in pairs} | set(untagged)) - set(leased))
    assert left == [], f"{len(left)} of {len(pairs) + len(untagged)} left behind"
    assert len(leased) == len(set(leased))  # none twice
