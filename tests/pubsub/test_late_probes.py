"""Probes answered after their look, through the realistic layer (30 ms round trips, partial
pulls, filters, empty pulls held; seven of the sixteen shards answer pulls that bring tasks
0.2 s late).

Where empty pulls are held, a lease by oldest tag answers once some probes brought heads and
leaves the rest running; what those bring lands in the hand. Kept there, each such head kept its
shard's token with the first process to look: at 4 x 1 on 64 shards one process held 49-62 of
them and the other three found nothing to lease. These tests hold that the next look gives such
heads back (in the hand's turn) unless it drains their shards, so another process leases the
oldest tag of one, whole.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from pullqueue import Queue
from pullqueue.adapters.pubsub import PubSubBackend
from pullqueue.adapters.pubsub.layout import shard_of
from tests.pubsub.conftest import add_in_order, backend_as_on_the_service, backend_on, service_layer
from tests.support.realpubsub import RealisticPubSub, start_as_on_the_service

RTT = 0.03
SLOW = 0.2
"""Seconds late the slow shards' pulls that bring tasks answer (within a drain's grace)."""
SLOW_ONLY = "shard-1"
"""The slow shards: those whose subscription's name holds this (1 and 10-15 of 16)."""
PER_TAG = 5


def _tag_on(shard: int, prefix: str) -> str:
    return next(f"{prefix}{i}" for i in range(100_000) if shard_of(f"{prefix}{i}") == shard)


@pytest.fixture
def layer(emulator: str) -> Iterator[RealisticPubSub]:
    yield from service_layer(emulator, RTT)


@pytest.fixture
def backend(layer: RealisticPubSub) -> Iterator[PubSubBackend]:
    yield from backend_as_on_the_service(layer, "late")


def _held_by_source(backend: PubSubBackend, queue: str) -> dict[str, int]:
    """Tasks the backend's hand holds, by subscription."""
    held: Any = backend._hand(queue)
    counts: dict[str, int] = {}
    for delivery in held.take(None, 10_000):
        counts[delivery.subscription] = counts.get(delivery.subscription, 0) + 1
        held.hold([delivery])
    return counts


def test_a_head_a_probe_brought_after_its_look_is_given_back_by_the_next_look(
    layer: RealisticPubSub, backend: PubSubBackend
) -> None:
    queue = Queue("late", backend)
    # The oldest two tags on quick shards, then one tag on each slow shard, then quick ones.
    slow_shards = [1, 10, 11, 12, 13, 14, 15]
    quick_shards = [0, 2, 3, 4, 5, 6, 7, 8, 9]
    tags = (
        [_tag_on(quick_shards[0], "lq"), _tag_on(quick_shards[1], "lq")]
        + [_tag_on(shard, "ls") for shard in slow_shards]
        + [_tag_on(shard, "ly") for shard in quick_shards[2:]]
    )
    add_in_order(queue, tags, PER_TAG)
    topology = backend.topology("late")
    slow = {topology.shards[shard] for shard in slow_shards}
    assert all(SLOW_ONLY in s for s in slow)
    assert not any(SLOW_ONLY in topology.shards[shard] for shard in quick_shards)
    layer.knobs.slow_only = SLOW_ONLY
    layer.knobs.slow_answers = SLOW

    first = queue.lease(60, 100, group_by_tag=True)
    assert [t.tag for t in first] == [tags[0]] * PER_TAG
    queue.delete(first)
    # The slow shards' probes answer after the look: their heads land in the hand.
    give_up = time.monotonic() + 5
    while len(slow & set(_held_by_source(backend, "late"))) < 3 and time.monotonic() < give_up:
        time.sleep(0.05)
    assert len(slow & set(_held_by_source(backend, "late"))) >= 3

    second = queue.lease(60, 100, group_by_tag=True)
    assert [t.tag for t in second] == [tags[1]] * PER_TAG
    queue.delete(second)
    # That look drained the second tag's shard and the oldest heads' beside it (their tags
    # whole in hand), and gave the other heads back.
    held = _held_by_source(backend, "late")
    assert {s: n for s, n in held.items() if s in slow and n != PER_TAG} == {}
    backend._hand("late").settle_releases()

    # Another process (its probes answered in time) leases the oldest tag of a shard the
    # first holds nothing of, whole.
    layer.knobs.slow_answers = 0.0
    free = [t for t in tags[2:] if topology.shards[shard_of(t)] not in held]
    other = backend_on(layer, backend.project)
    try:
        start_as_on_the_service(other.rpc)
        theirs = Queue("late", other).lease(60, 100, group_by_tag=True)
        assert [t.tag for t in theirs] == [free[0]] * PER_TAG
    finally:
        other.close()
