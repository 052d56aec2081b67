"""Tags on Pub/Sub: declared tags' filtered subscriptions, other tags' shards, held tasks.

The emulator delivers every message to every subscription whatever its filter, so these tests
also prove the adapter drops the copies a subscription's filter rejects, as real Pub/Sub does.
Tasks of undeclared tags go to their tag's shard topic; tests of the held buffer use tags that
share a shard (BETA and G are on ALPHA's), so leasing one pulls the others on the way.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import replace

import pytest

from pullqueue import Queue, Task
from pullqueue.adapters.pubsub import PubSubBackend
from pullqueue.adapters.pubsub.layout import ATTR_TAG, shard_of
from pullqueue.adapters.pubsub.wire import Delivery, fewest_sources
from tests.pubsub.conftest import MakeBackend, raw_pull, tags_on_shard_of

pytestmark = pytest.mark.unchecked_names  # names are labels here; no registry

ALPHA, BETA, G = "alpha", "beta-3", "g-28"
assert shard_of(ALPHA) == shard_of(BETA) == shard_of(G)


def _subscription_of(backend: PubSubBackend, queue: str, task: Task) -> str:
    lease = backend._book.find(queue, task)
    assert lease is not None
    return lease.delivery.subscription.rsplit("/", 1)[1]


def test_declared_tags_come_only_from_their_subscription(
    make_backend: MakeBackend, raw: tuple[object, object]
) -> None:
    _, subscriber = raw
    declared = {"filtered": ["vip", "bulk"]}
    backend = make_backend(pubsub_declared_tags=declared)
    queue = Queue("filtered", backend)
    tags = ["vip"] * 10 + ["bulk"] * 10 + ["other"] * 10 + [None] * 10
    queue.add([Task(f"{i}", name=f"t{i}", tag=tag) for i, tag in enumerate(tags)])
    topology = backend.topology("filtered")
    # The emulator ignores filters: the vip subscription holds a copy of every message published
    # to the queue topic (undeclared tags like "other" go to their shard's topic instead).
    copies = raw_pull(subscriber, topology.tags["vip"])  # type: ignore[arg-type]
    assert len(copies) == 30
    assert {m.message.attributes.get(ATTR_TAG) for m in copies} == {"vip", "bulk", None}
    subscriber.modify_ack_deadline(  # type: ignore[attr-defined]
        request={
            "subscription": topology.tags["vip"],
            "ack_ids": [m.ack_id for m in copies],
            "ack_deadline_seconds": 0,
        }
    )
    leased: list[Task] = []
    while batch := queue.lease(60, 7):
        leased += batch
    assert len(leased) == 40 and len({t.name for t in leased}) == 40
    for task in leased:
        expected = {
            "vip": "filtered-tag-vip",
            "bulk": "filtered-tag-bulk",
            "other": f"filtered-shard-{shard_of('other')}",
        }.get(task.tag or "", "filtered-workers")
        assert _subscription_of(backend, "filtered", task) == expected
    queue.delete(leased)
    # Every copy was either leased from its own subscription or dropped from the others.
    for path in topology.sources:
        assert raw_pull(subscriber, path) == []  # type: ignore[arg-type]


def test_lease_by_declared_and_undeclared_tag(make_backend: MakeBackend) -> None:
    backend = make_backend(pubsub_declared_tags={"bytag": ["vip"]})
    queue = Queue("bytag", backend)
    queue.add([Task(b"v", tag="vip") for _ in range(5)])
    queue.add([Task(b"u", tag="user-7") for _ in range(4)] + [Task(b"n") for _ in range(3)])
    vip = queue.lease(60, 100, tag="vip")
    assert len(vip) == 5 and {t.tag for t in vip} == {"vip"}
    assert {_subscription_of(backend, "bytag", t) for t in vip} == {"bytag-tag-vip"}
    users = queue.lease(60, 100, tag="user-7")
    assert len(users) == 4 and {t.tag for t in users} == {"user-7"}
    assert {_subscription_of(backend, "bytag", t) for t in users} == {"bytag-shard-1"}
    rest = queue.lease(60, 100)
    assert len(rest) == 3 and {t.tag for t in rest} == {None}


def test_dynamic_tags_lease_one_tag_per_batch_each_task_once(make_backend: MakeBackend) -> None:
    queue = Queue("dynamic", make_backend())
    expected: Counter[str | None] = Counter()
    for start in range(0, 600, 100):
        batch = [Task(f"{i}", tag=f"user-{i % 60}") for i in range(start, start + 100)]
        queue.add(batch)
        expected.update(t.tag for t in batch)
    queue.add([Task(b"plain") for _ in range(30)])
    expected[None] += 30
    seen: Counter[str] = Counter()
    per_tag: Counter[str | None] = Counter()
    batches = 0
    idle = 0
    while idle < 3:
        leased = queue.lease(60, 25, group_by_tag=True)
        if not leased:
            idle += 1
            continue
        batches += 1
        assert len({t.tag for t in leased}) == 1, "a batch mixes tags"
        seen.update(t.name for t in leased if t.name)
        per_tag.update(t.tag for t in leased)
        queue.delete(leased)
    assert per_tag == expected
    assert set(seen.values()) == {1}  # every task counted exactly once
    assert batches < 630 / 2  # grouping, not one task per batch


def test_tasks_pulled_for_another_tag_are_held_then_released(make_backend: MakeBackend) -> None:
    # The hold outlasts the other process's first lease (a second on a loaded emulator; with a
    # hold of 1 s the alphas were released before it ended, and it leased them).
    hold = 3.0
    holder = Queue("held", make_backend(pubsub_hold_seconds=hold))
    other = Queue("held", make_backend())
    holder.add([Task(b"a", tag=ALPHA) for _ in range(5)] + [Task(b"b", tag=BETA)])
    (beta,) = holder.lease(60, 10, tag=BETA)
    pulled = time.monotonic()
    assert beta.tag == BETA
    # The alpha tasks pulled on the way are held for this process, not handed to others ...
    assert other.lease(60, 10) == []
    # ... and served to its next lease without a new delivery.
    alphas = holder.lease(60, 2, tag=ALPHA)
    assert len(alphas) == 2 and all(t.retry_count == 1 for t in alphas)
    time.sleep(max(pulled + hold + 0.5 - time.monotonic(), 0.0))
    # The rest were released when their hold ran out; one delivery attempt each is spent.
    back = other.lease(60, 10)
    assert len(back) == 3 and {t.tag for t in back} == {ALPHA}
    assert all(t.retry_count == 2 for t in back)


def test_the_held_buffer_is_bounded(make_backend: MakeBackend) -> None:
    holder = Queue("bounded", make_backend(pubsub_hold_max=2, pubsub_hold_seconds=30))
    other = Queue("bounded", make_backend())
    holder.add([Task(b"a", tag=ALPHA) for _ in range(5)] + [Task(b"b", tag=BETA)])
    assert [t.tag for t in holder.lease(60, 10, tag=BETA)] == [BETA]
    # Two alphas are held (for 30 s); the others went straight back to the subscription.
    assert len(other.lease(60, 10)) == 3
    assert len(holder.lease(60, 10, tag=ALPHA)) == 2


def test_a_task_held_again_keeps_its_first_release_time(make_backend: MakeBackend) -> None:
    backend = make_backend(pubsub_hold_seconds=2.0, pubsub_hold_max=10)
    backend.topology("rehand")
    hand = backend._hand("rehand")
    pulled = 1000.0
    deliveries = [_delivery(f"b{i}", pulled) for i in range(3)]
    assert hand._put(deliveries, now=pulled + 0.1) == ([], [])
    # A lease call takes the hand at +1 s and holds it again: due at +2 s as before, not +3 s.
    taken = hand.take(None, 10)
    assert hand._put(taken, now=pulled + 1.0) == ([], [])
    assert hand._due(pulled + 1.9) == []
    assert [d.name for d in hand._due(pulled + 2.0)] == ["b0", "b1", "b2"]
    # Held again once its time is up, it is handed back as due; past the limit, as not fitting.
    assert hand._put(deliveries[:1], now=pulled + 2.5) == ([], deliveries[:1])
    small = make_backend(pubsub_hold_seconds=2.0, pubsub_hold_max=2)
    small.topology("rehand")
    assert small._hand("rehand")._put(deliveries, now=pulled + 0.5) == (deliveries[2:], [])


def _delivery(name: str, pulled_at: float) -> Delivery:
    return Delivery(
        subscription="projects/p/subscriptions/q-shard-0",
        ack_id=f"ack-{name}",
        message_id=f"m-{name}",
        name=name,
        payload=b"",
        tag=BETA,
        eta=None,
        published=pulled_at - 1,
        attempt=1,
        retry_limit=None,
        attributes={},
        pulled_at=pulled_at,
    )


def test_a_process_serving_its_hand_keeps_its_drained_shard_past_the_hold(
    make_backend: MakeBackend,
) -> None:
    # The holder drains ALPHA's shard (it holds the shard's claim) and serves one tag a lease,
    # slower than the hold time. The betas wait in its hand, their deadline extended, instead
    # of going back to Pub/Sub: no extra delivery, and no other process can lease them meanwhile
    # (the claim keeps others off the shard anyway). The hand is kept while leases by oldest tag
    # come within the hold time of each other: the holder's next lease starts 0.6 holds after
    # the last began, whatever the other process's lease took (a new process's first lease can
    # take a second on a loaded emulator, which left the holder's leases further apart than the
    # hold and its hand given back, as the rule says it is).
    hold = 2.0
    backend = make_backend(pubsub_hold_seconds=hold)
    holder = Queue("serving", backend)
    other = Queue("serving", make_backend())
    older = tags_on_shard_of(ALPHA, 6)
    for tag in older:
        holder.add(Task(b"o", name=f"o-{tag}", tag=tag))
        time.sleep(0.01)  # publish times in this order: the older tags are leased first
    holder.add([Task(b"b", name=f"b{i}", tag=BETA) for i in range(3)])
    start = time.monotonic()
    served = []
    for _ in older:
        began = time.monotonic()
        (task,) = holder.lease(60, 10, group_by_tag=True)
        served.append(task.tag)
        holder.delete([task])
        asked = time.monotonic()
        found = other.lease(60, 10)
        took = time.monotonic() - asked
        # The betas stay in the holder's hand.
        assert found == [], f"holder: {asked - began:.2f} s, other's lease: {took:.2f} s"
        time.sleep(max(hold * 0.6 - (time.monotonic() - began), 0.0))
    assert served == older
    assert time.monotonic() - start > 3 * hold
    betas = holder.lease(60, 10, group_by_tag=True)
    assert sorted(t.name for t in betas) == ["b0", "b1", "b2"]
    # Not one delivery was given back unleased (each would be billed again when redelivered).
    assert backend._book._skipped == {}


def test_a_process_that_stops_leasing_gives_its_hand_back(make_backend: MakeBackend) -> None:
    holder = Queue("rehold", make_backend(pubsub_hold_seconds=2.0))
    other = Queue("rehold", make_backend())
    holder.add([Task(b"a", name=f"a{i}", tag=ALPHA) for i in range(3)])
    holder.add([Task(b"b", name=f"b{i}", tag=BETA) for i in range(3)] + [Task(b"g", tag=G)])
    assert len(holder.lease(60, 10, tag=G)) == 1  # alphas and betas are now held
    # Grouping takes the hand, leases the oldest tag and holds the betas again ...
    assert {t.tag for t in holder.lease(60, 10, group_by_tag=True)} == {ALPHA}
    last_lease = time.monotonic()
    # ... and, the holder leasing no more, gives them back within twice the hold time of its
    # last lease (once extended while that lease was recent, then released).
    # The other process's empty leases take a pull wait each (more on a loaded host): tasks
    # given back at time T are found by the lease after the one running at T at the latest, so
    # the bound allows the last two leases' own time (CI: 8.8 s against a bound of 5 s).
    back: list[Task] = []
    took = [0.0, 0.0]
    while len(back) < 3 and time.monotonic() - last_lease < 20:
        began = time.monotonic()
        back += other.lease(60, 10)
        took.append(time.monotonic() - began)
        time.sleep(0.05)
    assert {t.tag for t in back} == {BETA} and len(back) == 3
    assert all(t.retry_count == 2 for t in back)
    found = time.monotonic() - last_lease
    assert 2.0 <= found < 2 * 2.0 + 1.0 + took[-1] + took[-2] + 0.1, (found, took[-4:])


def test_a_held_task_is_not_kept_once_its_deadline_is_nearly_over(
    make_backend: MakeBackend,
) -> None:
    # A process stalled past its hand's hold time gives the tasks back instead of extending a
    # deadline that may already have ended (Pub/Sub may have handed them to another process).
    backend = make_backend()
    topology = backend.topology("stalled")
    source = topology.shards[shard_of(BETA)]
    deadline = topology.ack_deadlines.get(source, topology.ack_deadline)
    now = time.time()
    on_time = _delivery("b0", now - deadline / 2)
    late = _delivery("b1", now - deadline * 0.8)
    hand = backend._hand("stalled")
    assert hand.extendable(replace(on_time, subscription=source), now)
    assert not hand.extendable(replace(late, subscription=source), now)


def test_a_hand_smaller_than_the_queue_serves_whole_shards_first(
    make_backend: MakeBackend,
) -> None:
    # 4,000 tasks over 200 tags (16 shards, about 250 tasks each) and a hand of 1,000: draining
    # a shard the hand has no room for fills it with parts of shards, and tags go out in parts.
    backend = make_backend(pubsub_hold_max=1000)
    queue = Queue("whole-first", backend)
    tasks = [Task(f"p{i}".encode(), tag=f"tag-{i % 200}") for i in range(4000)]
    random.Random(5).shuffle(tasks)
    for start in range(0, len(tasks), 100):
        queue.add(tasks[start : start + 100])
    leases: list[list[Task]] = []
    give_up = time.monotonic() + 120
    while sum(map(len, leases)) < len(tasks) and time.monotonic() < give_up:
        batch = queue.lease(60, 1000, group_by_tag=True)
        if batch:
            queue.delete(batch)
            leases.append(batch)
    assert sum(map(len, leases)) == len(tasks)
    assert sorted(len(batch) for batch in leases) == [20] * 200  # every tag in one lease


def _pulled_from(subscription: str, n: int) -> Delivery:
    return Delivery(
        subscription=subscription,
        ack_id=f"{subscription}-{n}",
        message_id=f"m-{subscription}-{n}",
        name=f"t-{subscription}-{n}",
        payload=b"",
        tag=None,
        eta=None,
        published=float(n),
        attempt=0,
        retry_limit=None,
        attributes={},
        pulled_at=0.0,
    )


def test_a_plain_lease_takes_tasks_of_as_few_subscriptions_as_it_can() -> None:
    """Its grant and its delete make a call per subscription of its tasks."""
    held = [_pulled_from(s, n) for n in range(6) for s in "abcd"][:-3]  # a: 6; b, c, d: 5 each
    held += [_pulled_from("e", n) for n in range(8)]
    taken = fewest_sources(held, 10)
    assert len(taken) == 10
    assert {d.subscription for d in taken} == {"e", "a"}, [d.ack_id for d in taken]
    assert fewest_sources(held, 100) == held
    assert fewest_sources(held, 0) == []
