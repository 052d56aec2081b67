"""Thread safety of the memory backend: 8 workers lease and delete 20,000 tasks while 2 add them.

Every task must be deleted exactly once: never handed to two workers while a lease is current,
never lost, whatever the interleaving of adds, leases by tag, releases and deletes.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from collections import Counter

from pullqueue import Queue, Task
from pullqueue.adapters.memory import MemoryBackend

TASKS = 20_000
PRODUCERS = 2
WORKERS = 8
TAGS = ["a", "b", "c", None]


def test_each_task_is_processed_exactly_once() -> None:
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often, so unsafe code would be caught
    try:
        _run_workers()
    finally:
        sys.setswitchinterval(switch)


def _run_workers() -> None:
    queue = Queue("busy", MemoryBackend())
    added: list[str] = []
    deleted: Counter[str] = Counter()
    record = threading.Lock()
    producers_done = threading.Event()
    errors: list[BaseException] = []

    def produce(index: int) -> None:
        rng = random.Random(index)
        for start in range(0, TASKS // PRODUCERS, 100):
            batch = [
                Task(f"{index}-{start + i}".encode(), tag=rng.choice(TAGS)) for i in range(100)
            ]
            queue.add(batch)
            with record:
                added.extend(t.name for t in batch if t.name)

    give_up = time.monotonic() + 60

    def work(index: int) -> None:
        rng = random.Random(100 + index)
        try:
            while time.monotonic() < give_up:
                how = rng.random()
                if how < 0.4:
                    leased = queue.lease(60, rng.randint(1, 50))
                elif how < 0.8:
                    leased = queue.lease(60, rng.randint(1, 50), group_by_tag=True)
                else:
                    leased = queue.lease(60, rng.randint(1, 50), tag=rng.choice(TAGS[:3]))
                if not leased:
                    if producers_done.is_set() and queue.stats().tasks == 0:
                        return
                    time.sleep(0.0005)
                    continue
                if rng.random() < 0.05:
                    queue.modify_lease(leased[0], 0)  # give one back: someone else does it
                    leased = leased[1:]
                for task in queue.delete(leased):
                    assert task.was_deleted, f"{task.name} was leased but already gone"
                    with record:
                        deleted[task.name or ""] += 1
        except BaseException as exc:
            errors.append(exc)

    producers = [threading.Thread(target=produce, args=(i,), daemon=True) for i in range(PRODUCERS)]
    workers = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(WORKERS)]
    for thread in producers + workers:
        thread.start()
    for thread in producers:
        thread.join(timeout=60)
    producers_done.set()
    for thread in workers:
        thread.join(timeout=max(0.0, give_up - time.monotonic()) + 1)
    assert not errors, errors[0]
    assert not any(thread.is_alive() for thread in producers + workers)
    assert time.monotonic() < give_up, "the workers did not drain the queue within 60 s"
    assert len(added) == len(set(added)) == TASKS
    twice = [name for name, count in deleted.items() if count > 1]
    assert not twice, f"deleted more than once: {twice[:5]}"
    assert set(deleted) == set(added)
    assert queue.stats().tasks == 0
