"""Watches: pulls left running on subscriptions found empty, through the realistic layer (30 ms
round trips, partial pulls, filters, empty pulls held).

A lease by oldest tag fills its tag up from the tag's subscriptions; where empty pulls are held,
one found empty a moment ago was glanced at (a pull with `return_immediately`): a round trip in
the hand's turn of every lease, 37 of a 40 ms lease from a stocked hand, the worker subscription
being empty whenever every task is tagged. A pull left running on it (a watch) now brings what
comes there to the hand at once, and the leases leave the subscription to it. These tests hold
that, that what a watch brings is leased by its tag, and that closing waits for the watches and
gives back what they hold.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from pullqueue import Queue
from pullqueue.adapters.pubsub import PubSubBackend
from tests.pubsub.conftest import (
    add_in_order,
    backend_behind,
    backend_on,
    service_layer,
    tags_on_shard_of,
)
from tests.support.realpubsub import RealisticPubSub

RTT = 0.03


@pytest.fixture
def layer(emulator: str) -> Iterator[RealisticPubSub]:
    yield from service_layer(emulator, RTT)


@pytest.fixture
def backend(layer: RealisticPubSub) -> Iterator[PubSubBackend]:
    yield from backend_behind(layer, "watch")


def _pulls_within(calls: Any, began: float, ended: float) -> int:
    """Pulls begun and answered within [began, ended]: made in the lease call, waited for."""
    return sum(1 for c in calls.of("Pull") if c.start >= began and c.end <= ended)


def test_leases_from_a_stocked_hand_make_no_pull_in_their_turn(
    layer: RealisticPubSub, backend: PubSubBackend
) -> None:
    """Before: every lease after the one that drained the shard glanced at the worker
    subscription and the shard (two pulls begun and answered inside each lease, [2, 2, 2, 2]).
    Now a glance leaves a watch running, and the leases after it glance no more while it runs."""
    queue = Queue("stocked", backend)
    tags = tags_on_shard_of("stocked-0", 6)
    add_in_order(queue, tags, 5)
    first = queue.lease(60, 100, group_by_tag=True)  # drains the shard: every tag in hand
    assert [t.tag for t in first] == [tags[0]] * 5
    queue.delete(first)
    # The first look's probes of empty subscriptions end at the pull wait (waited for, or left
    # running): then the process knows the server holds empty pulls (until then a fill-up pulls
    # as before). Waited for no longer: EMPTY_BEHIND (2 s) after they found their subscriptions
    # empty, a lease glances at them again by design, and a fixed sleep of 1.5 s after a lease
    # whose tail was slow crossed it (CI and here: [11, 0, 0, 0], the glances and a claims pull).
    known = time.monotonic() + 3
    while backend.rpc.holds_empty_pulls is not True and time.monotonic() < known:
        time.sleep(0.02)
    assert backend.rpc.holds_empty_pulls is True
    made = []
    for tag in tags[1:5]:
        with layer.counting() as calls:
            began = time.monotonic()
            leased = queue.lease(60, 100, group_by_tag=True)
            ended = time.monotonic()
        assert [t.tag for t in leased] == [tag] * 5
        queue.delete(leased)
        made.append(_pulls_within(calls, began, ended))
    # A glance starts a watch; one more when a watch ended between leases (a loaded CI run:
    # [1, 0, 0, 1]). Before: [2, 2, 2, 2].
    assert sum(made) <= 2 and made.count(0) >= 2, made


def test_a_task_a_watch_brings_is_leased_with_its_tag(
    layer: RealisticPubSub, backend: PubSubBackend, raw: tuple[Any, Any]
) -> None:
    """A task a publisher that knows only the queue topic adds while the worker subscription is
    watched goes to the hand and is leased with the rest of its tag, not left behind."""
    publisher, _ = raw
    queue = Queue("brought", backend)
    tags = tags_on_shard_of("brought-0", 4)
    add_in_order(queue, tags, 3)
    leased = queue.lease(60, 100, group_by_tag=True)
    assert [t.tag for t in leased] == [tags[0]] * 3
    queue.delete(leased)
    publisher.publish(
        topic=backend.topology("brought").topic,
        messages=[{"data": b"f", "attributes": {"tag": tags[2]}}],
    )
    time.sleep(0.5)
    second = queue.lease(60, 100, group_by_tag=True)
    assert [t.tag for t in second] == [tags[1]] * 3
    queue.delete(second)
    third = queue.lease(60, 100, group_by_tag=True)
    assert sorted(t.payload for t in third) == [b"f", b"w", b"w", b"w"]
    queue.delete(third)
    fourth = queue.lease(60, 100, group_by_tag=True)
    assert [t.tag for t in fourth] == [tags[3]] * 3
    queue.delete(fourth)
    assert queue.lease(60, 100, group_by_tag=True) == []


def test_closing_waits_for_the_watches_and_gives_back_what_they_hold(
    layer: RealisticPubSub, raw: tuple[Any, Any]
) -> None:
    """No watch is left running after close, and a task one brought just before is leased by
    the next process at once (given back), not after its ack deadline."""
    publisher, _ = raw
    backend = backend_on(layer, f"watch-close-{time.monotonic_ns()}")
    queue = Queue("closing", backend)
    tags = tags_on_shard_of("closing-0", 3)
    try:
        add_in_order(queue, tags, 2)
        queue.delete(queue.lease(60, 100, group_by_tag=True))
        queue.delete(queue.lease(60, 100, group_by_tag=True))  # the worker subscription watched
        publisher.publish(
            topic=backend.topology("closing").topic,
            messages=[{"data": b"late", "attributes": {"tag": "elsewhere-1"}}],
        )
        time.sleep(0.3)
    finally:
        began = time.monotonic()
        backend.close()
        closed_in = time.monotonic() - began
    # A watch is held at most the pull wait (1 s) and its grace.
    assert closed_in < 2.5, closed_in
    assert not backend._pulls._in_flight
    other = backend_on(layer, backend.project)
    try:
        again = Queue("closing", other)
        found: list[bytes] = []
        until = time.monotonic() + 5.0
        while len(found) < 3 and time.monotonic() < until:
            found += [t.payload for t in again.lease(60, 100)]
        assert sorted(found) == [b"late", b"w", b"w"]
    finally:
        other.close()
