"""Leases by a named tag through the realistic layer (10 ms round trips, partial pulls, filters,
empty pulls held), in the shape of a per-tag cron: one lease per tag, most of them empty.

On Pub/Sub an empty pull is held to its deadline, so a named lease that pulled its tag's shard
and the worker subscription the short wait each time took 150 ms and more, empty or not (the
legacy queue answered in one call). A subscription this process found empty a moment ago is
now glanced at (one round trip, `return_immediately`) or watched by a pull left running; these
tests hold that, and that a glance which misses (the service may answer such a pull with
nothing though messages wait) loses no task and leases none twice.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from pullqueue import Queue, Task
from pullqueue.adapters.pubsub import PubSubBackend
from pullqueue.adapters.pubsub.hand import EMPTY_BEHIND
from tests.pubsub.conftest import backend_behind, backend_on, tags_on_shard_of
from tests.support.realpubsub import Knobs, RealisticPubSub

RTT = 0.01
HELD = 0.12
"""Seconds a pull lasts at least when the layer held it empty (the short wait is 0.15 s at
least; an answer is a round trip, a glance too)."""
SETTLED = 0.8
"""Seconds after which a pull a lease left running has ended (a held one at its short wait and
grace, 0.5 s): the layer counts a call once it ends."""


@pytest.fixture
def layer(emulator: str) -> Iterator[RealisticPubSub]:
    with RealisticPubSub(emulator, Knobs.service(RTT), seed=11) as made:
        yield made


@pytest.fixture
def backend(layer: RealisticPubSub) -> Iterator[PubSubBackend]:
    yield from backend_behind(layer, "nl")


def test_empty_named_leases_on_a_shard_found_empty_hold_no_pull(
    layer: RealisticPubSub, backend: PubSubBackend
) -> None:
    """Before: each of these leases held its shard's pull and the worker subscription's the
    short wait (2 pulls of 0.15 s or more each, 150-165 ms a lease)."""
    queue = Queue("cron", backend)
    tags = tags_on_shard_of("cron-0", 5)
    assert queue.lease(60, 100, tag="cron-0", group_by_tag=True) == []  # finds the shard empty
    counted = []
    for tag in tags:
        began = time.monotonic()
        with layer.counting() as calls:
            assert queue.lease(60, 100, tag=tag, group_by_tag=True) == []
        counted.append((began, calls))
    time.sleep(SETTLED)
    held = [calls.lasting("Pull", HELD, since=began) for began, calls in counted]
    assert held == [0] * len(tags), [calls.by_method() for _, calls in counted]


def test_a_named_lease_that_brought_its_tasks_glances_for_the_rest(
    layer: RealisticPubSub, backend: PubSubBackend
) -> None:
    """A lease of a tag whose tasks an earlier lease of another tag of the shard brought to the
    hand: before, it pulled the shard again and was held its short wait to find it empty."""
    queue = Queue("cron", backend)
    tag, other = "cron-7", tags_on_shard_of("cron-7", 1)[0]
    queue.add([Task(b"x", tag=tag) for _ in range(3)])
    time.sleep(0.3)
    assert queue.lease(60, 100, tag=other, group_by_tag=True) == []  # brings cron-7's to the hand
    began = time.monotonic()
    with layer.counting() as calls:
        leased = queue.lease(60, 100, tag=tag, group_by_tag=True)
    assert len(leased) == 3
    time.sleep(SETTLED)
    assert calls.lasting("Pull", HELD, since=began) == 0, calls.by_method()
    queue.delete(leased)


def test_a_cron_pass_whose_glances_all_miss_loses_no_task(emulator: str) -> None:
    """Every glance answered empty though tasks wait (the service may): a named lease then
    answers part of its tag, and the rest comes to a later pass, once a held pull sees the
    shard again (EMPTY_BEHIND). Nothing is lost, nothing leased twice, nothing left."""
    knobs = Knobs(rtt=RTT, partial=True, filters=True, hold_empty=True, cap=True, blind_glances=1.0)
    with RealisticPubSub(emulator, knobs, seed=5) as layer:
        backend = backend_on(layer, f"nlb-{time.monotonic_ns()}")
        try:
            queue = Queue("cron", backend)
            users = [f"user-{i}" for i in range(40)]
            added = {u: 3 for u in users[::4]}
            queue.add([Task(b"u", tag=u) for u, n in added.items() for _ in range(n)])
            time.sleep(0.3)
            leased: dict[str, int] = {}
            seen: set[str] = set()
            for _ in range(4):
                for user in users:
                    tasks = queue.lease(60, 1000, tag=user, group_by_tag=True)
                    for task in tasks:
                        assert task.tag == user
                        assert task.name not in seen, f"{task.name} leased twice"
                        seen.add(task.name)
                    leased[user] = leased.get(user, 0) + len(tasks)
                    queue.delete(tasks)
                if {u: n for u, n in leased.items() if n} == added:
                    break
                time.sleep(EMPTY_BEHIND)
            assert {u: n for u, n in leased.items() if n} == added
            assert queue.lease(60, 1000) == []
        finally:
            backend.close()


def test_a_named_lease_of_many_tasks_pulls_them_in_one_pull_not_parts(
    layer: RealisticPubSub, backend: PubSubBackend
) -> None:
    """Where glances follow, a named lease's pull of its shard is one pull: split into parts
    side by side (as a subscription whose last answer was big is), a part that found nothing
    was held its wait (130-145 ms of a 170-190 ms lease of 100 tasks at 30 ms round trips)."""
    queue = Queue("many", backend)
    counted = []
    for _ in range(4):
        queue.add([Task(b"m", tag="many-7") for _ in range(100)])
        time.sleep(0.2)
        began = time.monotonic()
        with layer.counting() as calls:
            leased = queue.lease(60, 100, tag="many-7", group_by_tag=True)
        assert len(leased) == 100
        queue.delete(leased)
        counted.append((began, calls))
    time.sleep(SETTLED)
    # The first lease of the tag may hold a pull (nothing found empty yet).
    held = [calls.lasting("Pull", HELD, since=began) for began, calls in counted[1:]]
    assert held == [0] * len(held), held
