"""A loaded emulator: empty pulls answered at once, answers that bring tasks slow to come.

On the emulator a pull that finds nothing answers at once, so a lease waits for the pulls of a
drained shard only a short while (0.15-0.25 s) and sends them with no more deadline than that.
On a loaded machine an answer bringing tasks came later: the client dropped it at its deadline
and its tasks were out until their ack deadline (60 s). CI lost 64 tasks of one shard that way
(four worker processes leasing by tag, every other task leased, 20 s without a task).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator

import pytest

from pullqueue import Queue, Task
from pullqueue.adapters.pubsub import PubSubBackend
from tests.pubsub.conftest import backend_behind
from tests.support.realpubsub import Knobs, RealisticPubSub

SLOW = 0.7
"""Seconds a pull that brings messages takes to answer: more than a short wait and its grace
(0.25 + 0.35 s), less than a lease's deadline."""

TASKS, TAGS = 30, 3


@pytest.fixture
def layer(emulator: str) -> Iterator[RealisticPubSub]:
    with RealisticPubSub(emulator, Knobs(), seed=3) as made:
        yield made


@pytest.fixture
def backend(layer: RealisticPubSub) -> Iterator[PubSubBackend]:
    yield from backend_behind(layer, "loaded")


@pytest.mark.parametrize("by", ["plain", "oldest", "named"])
def test_answers_slower_than_a_short_wait_hide_no_task(
    layer: RealisticPubSub, backend: PubSubBackend, by: str
) -> None:
    queue = Queue("loaded", backend)
    # An empty lease first, as a worker's loop has had: empty pulls are answered at once here.
    assert queue.lease(60, 10, group_by_tag=by != "plain") == []
    assert backend.rpc.holds_empty_pulls is False
    queue.add([Task(str(i).encode(), tag=f"tag-{i % TAGS}") for i in range(TASKS)])
    layer.knobs.slow_answers = SLOW
    leased: list[Task] = []
    per_tag = TASKS // TAGS
    began = time.monotonic()
    try:
        # Each lease is a few slow answers (4-7 s in all, 20 s and more under CI's load); a
        # task hidden for its ack deadline would come after 60 s.
        while len(leased) < TASKS and time.monotonic() - began < 45:
            if by == "plain":
                batch = queue.lease(60, 7)
            elif by == "oldest":
                batch = queue.lease(60, 100, group_by_tag=True)
            else:
                counts = Counter(t.tag for t in leased)
                wanted = next(f"tag-{k}" for k in range(TAGS) if counts[f"tag-{k}"] < per_tag)
                batch = queue.lease(60, 100, tag=wanted)
            leased += batch
            queue.delete(batch)
    finally:
        layer.knobs.slow_answers = 0.0
    took = time.monotonic() - began
    assert sorted(int(t.payload) for t in leased) == list(range(TASKS)), (
        f"{len(leased)} of {TASKS} in {took:.1f} s"
    )
