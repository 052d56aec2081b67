"""Rounds that do not wait on pulls the server holds empty, where it holds them (the realistic
layer at 30 ms round trips with `hold_empty`), and still wait on every pull where empty pulls are
answered at once (the emulator).

Pub/Sub holds an empty pull to its wait; the emulator answers it at once. A round of pulls side
by side that waits for every one waits for the held ones: the parts of a drain's pull (0.13-0.15
s of a 0.16-0.23 s drain), a process's first look by oldest tag (1.05 of its 1.1-1.3 s), a claim's
second pull of the claims subscription (0.25 s more a claim when the shard's token was held
elsewhere). These tests hold each of those to a round trip or two, and the first look to every
probe on a server that answers empty pulls at once, where a head it missed would choose the
wrong oldest tag.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from pullqueue import Queue, Task
from pullqueue.adapters.pubsub import PubSubBackend
from pullqueue.adapters.pubsub.claims import ATTR_SHARD, Claim
from pullqueue.adapters.pubsub.layout import shard_of
from tests.pubsub.conftest import backend_on, raw_pull
from tests.support.realpubsub import Knobs, RealisticPubSub

RTT = 0.03


@pytest.fixture
def held(emulator: str) -> Iterator[RealisticPubSub]:
    """Round trips and held empty pulls only: answers bring all they can (no random share)."""
    with RealisticPubSub(emulator, Knobs(rtt=RTT, hold_empty=True), seed=3) as made:
        yield made


def _backend(layer: RealisticPubSub, prefix: str) -> PubSubBackend:
    return backend_on(layer, f"{prefix}-{time.monotonic_ns()}")


def test_parts_held_empty_are_not_waited_for_and_bring_what_comes_later(
    held: RealisticPubSub,
) -> None:
    """Before: the round waited for the three empty parts' full wait (1 s here)."""
    backend = _backend(held, "parts")
    try:
        queue = Queue("parts", backend)
        queue.add([Task(b"p") for _ in range(50)])
        source = backend.topology("parts").workers
        backend.rpc.holds_empty_pulls = True  # as once a pull was seen held
        late: list[list[Any] | None] = []
        running: list[int] = []
        ended = threading.Event()

        def landed(items: list[Any] | None) -> None:
            late.append(items)
            if len(late) == sum(running):
                ended.set()

        began = time.monotonic()
        results, failure = backend.rpc.pull_many(
            source,
            [250, 250, 250, 250],
            queue="parts",
            wait=1.0,
            budget=5.0,
            settle=0.05,
            late=landed,
            pending_hook=running.append,
        )
        took = time.monotonic() - began
        assert failure is None
        assert sum(len(r) for r in results) == 50
        assert took < 0.5, took
        assert running and sum(running) == sum(1 for r in results if not r)
        # The parts left running end at their wait, having found nothing, and are reported.
        queue.add([Task(b"late")])
        assert ended.wait(5.0)
        brought = [item for items in late if items for item in items]
        assert [item.message.data for item in brought] == [b"late"]
        backend.rpc.modify(source, [item.ack_id for item in brought], 0, queue="parts")
    finally:
        backend.close()


def test_a_first_look_waits_for_a_slow_head_where_empty_pulls_are_answered_at_once(
    emulator: str,
) -> None:
    """The oldest tag's shard answers 0.6 s late (a loaded server); empty pulls are answered
    at once, as the emulator answers them: the first look waits for every probe and leases the
    oldest tag, not the younger one whose shard answered first."""
    # A shard numbered 2-9, so that no other shard's subscription name holds its name.
    oldest = next(f"slow-{i}" for i in range(1000) if 2 <= shard_of(f"slow-{i}") <= 9)
    younger = next(f"fast-{i}" for i in range(1000) if shard_of(f"fast-{i}") != shard_of(oldest))
    slow = f"shard-{shard_of(oldest)}"
    knobs = Knobs(slow_answers=0.6, slow_only=slow)
    with RealisticPubSub(emulator, knobs, seed=5) as layer:
        backend = _backend(layer, "slowhead")
        try:
            queue = Queue("slowhead", backend)
            queue.add([Task(b"o", tag=oldest) for _ in range(3)])
            time.sleep(0.05)
            queue.add([Task(b"y", tag=younger) for _ in range(3)])
            leased = queue.lease(60, 100, group_by_tag=True, deadline=20)
            assert [t.tag for t in leased] == [oldest] * 3
            queue.delete(leased)
        finally:
            backend.close()


def test_a_claim_of_a_shard_held_elsewhere_is_not_held_a_second_wait(
    held: RealisticPubSub, raw: tuple[Any, Any]
) -> None:
    """Before: the claim's second pull of the claims subscription (the free tokens were out to
    its first) was held CLAIM_WAIT (0.25 s): 0.32-0.35 s a claim, now two round trips and the
    give-back, none held. Counted as held pulls, not timed: under CI's load two round trips
    took over 0.5 s."""
    _, subscriber = raw
    backend = _backend(held, "claimed")
    try:
        topology = backend.topology("claimed")
        tokens = raw_pull(subscriber, topology.claims)
        mine = [t.ack_id for t in tokens if t.message.attributes.get(ATTR_SHARD) == "4"]
        others = [t.ack_id for t in tokens if t.ack_id not in mine]
        subscriber.modify_ack_deadline(
            subscription=topology.claims, ack_ids=others, ack_deadline_seconds=0
        )
        backend.rpc.holds_empty_pulls = True
        claim = (topology.claims, topology.claims_topic)
        with held.counting() as calls:
            for _ in range(3):
                assert backend._claims.claim("claimed", *claim, 4) is Claim.TAKEN
        assert calls.held() == 0, calls.by_method()
        subscriber.modify_ack_deadline(
            subscription=topology.claims, ack_ids=mine, ack_deadline_seconds=0
        )
    finally:
        backend.close()


def test_a_plain_lease_takes_what_a_pull_its_round_left_running_brings(
    held: RealisticPubSub,
) -> None:
    """A plain lease's round gives up on a pull after a short wait (held empty, on Pub/Sub);
    one that was bringing the subscription's tasks (its answer slow: a loaded host, or a part
    of a split pull held empty beside parts that brought messages) is waited for, and the
    subscription pulled again, before the lease answers short of what waits. Before: the lease
    answered with what that pull brought alone (CI: a lease of 1,000 of 1,099 waiting got 88,
    a lease of 99 got 29)."""
    backend = _backend(held, "leftrunning")
    try:
        queue = Queue("leftrunning", backend)
        for _ in range(3):
            queue.add([Task(b"w") for _ in range(100)])
        backend.rpc.holds_empty_pulls = True  # as once a pull was seen held
        queue.delete(queue.lease(60, 1))  # a first lease pulls every subscription once
        topology = backend.topology("leftrunning")
        workers = topology.workers
        # Tasks in hand (as a pull left running by an earlier lease brings them): the lease
        # has tasks to answer with, so its round does not wait for a slow pull.
        end = time.monotonic() + 5
        in_hand = backend._pulls._pull("leftrunning", topology, workers, 5, end, patient=True)
        assert in_hand is not None and len(in_hand) == 5
        backend._hand("leftrunning").hold(in_hand)
        pull_many = backend.rpc.pull_many
        slowed: list[str] = []

        def slow(source: str, sizes: Any, **kwargs: Any) -> Any:
            answer = pull_many(source, sizes, **kwargs)
            if source == workers and not slowed:
                slowed.append(source)
                time.sleep(0.3)  # pulled: its tasks are out until this answer arrives
            return answer

        backend.rpc.pull_many = slow  # type: ignore[method-assign,assignment]
        leased = queue.lease(60, 150)
        assert slowed
        assert len(leased) == 150, len(leased)
        queue.delete(leased)
    finally:
        backend.close()


def test_a_plain_lease_glances_at_the_subscriptions_its_first_round_drained(
    held: RealisticPubSub,
) -> None:
    """A plain lease's later rounds pull again the subscriptions that brought tasks, for more;
    drained by the first round, each such pull was held empty to its deadline (the wait and the
    grace, 0.5 s), and the lease waited for them (0.6-0.9 s of leases answering in 0.1-0.3 s at
    30 ms round trips; a lease of 5 tasks of 1,000 asked, 0.6 s at 10 ms). They are glances now
    (one round trip, not held): none is held, and a task added after is the next lease's."""
    backend = _backend(held, "drained")
    try:
        queue = Queue("drained", backend)
        tags = [f"d-{i}" for i in range(100_000)]
        chosen: list[str] = []
        for tag in tags:  # three tags of three different shards
            if shard_of(tag) not in {shard_of(t) for t in chosen}:
                chosen.append(tag)
            if len(chosen) == 3:
                break
        queue.add([Task(b"x", tag=tag) for tag in chosen for _ in range(21)])
        backend.rpc.holds_empty_pulls = True  # as once a pull was seen held
        queue.delete(queue.lease(60, 1))  # the first lease: every subscription's size learnt
        topology = backend.topology("drained")
        sources = {topology.shards[shard_of(tag)] for tag in chosen}
        with held.counting() as calls:
            began = time.monotonic()
            leased = queue.lease(60, 100)
            took = time.monotonic() - began
            pulls = len(calls.of("Pull"))
            holds = calls.held()
        assert len(leased) == 62, len(leased)
        assert {t.tag for t in leased} == set(chosen)
        # The first round: the three busy shards and one other in turn (held empty, left
        # running into the hand); then a glance at each busy shard.
        assert pulls <= 8, pulls
        assert holds <= 1, f"{holds} pulls held empty: the drained shards were pulled again held"
        assert took < 0.45, f"the lease took {took:.2f} s"
        with backend._pulls._flight_lock:
            assert not set(backend._pulls._in_flight) & sources
        queue.delete(leased)
        # Nothing is lost meanwhile: a task added now is the next lease's.
        queue.add([Task(b"late", tag=chosen[0])])
        deadline = time.monotonic() + 10
        late: list[Any] = []
        while not late and time.monotonic() < deadline:
            late = queue.lease(60, 100)
        assert [t.payload for t in late] == [b"late"]
        queue.delete(late)
    finally:
        backend.close()


def test_on_pub_sub_itself_empty_pulls_are_taken_as_held_from_the_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pub/Sub holds an empty pull; before any pull found nothing the adapter took that as
    unknown, and a process's first looks waited for every pull of their round (a first lease by
    oldest tag the whole pull wait, 1.05 of its 1.1-1.3 s). Off an emulator host it starts as
    held; on one (the emulator answers at once, a layer in front of it may hold) as unknown."""
    from google.auth.credentials import AnonymousCredentials

    from pullqueue.adapters.pubsub.rpc import PubSubRpc

    monkeypatch.delenv("PUBSUB_EMULATOR_HOST", raising=False)
    monkeypatch.setattr(
        "google.auth.default", lambda *a, **k: (AnonymousCredentials(), "service-project")
    )
    service = PubSubRpc("service-project", 10.0)
    try:
        assert not service.emulated and service.holds_empty_pulls is True
    finally:
        service.close()
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", "127.0.0.1:1")
    emulator = PubSubRpc("emulated-project", 10.0)
    try:
        assert emulator.emulated and emulator.holds_empty_pulls is None
    finally:
        emulator.close()
