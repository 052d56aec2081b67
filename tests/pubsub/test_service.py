"""Round trips and calls of each operation on a Pub/Sub that answers like the service: the
emulator behind tests/support/realpubsub.py (30 ms round trips, partial pulls, filters, held
empty pulls, the 600 s cap), counting the calls and the rounds of calls one after another.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from pullqueue import Queue, Settings, Task
from pullqueue.adapters.pubsub import PubSubBackend
from tests.support.realpubsub import Knobs, RealisticPubSub, parse_filter

RTT = 0.03


@pytest.fixture
def layer(emulator: str) -> Iterator[RealisticPubSub]:
    with RealisticPubSub(emulator, Knobs.service(RTT), seed=7) as made:
        yield made


@pytest.fixture
def backend(layer: RealisticPubSub) -> Iterator[PubSubBackend]:
    with layer.as_emulator():
        made = PubSubBackend(f"svc-{uuid.uuid4().hex[:12]}", settings=Settings(), auto_create=True)
    yield made
    made.close()


def tagged(n: int, tags: int) -> list[Task]:
    return [Task(f"{i}".encode(), tag=f"tag-{i % tags}") for i in range(n)]


def test_the_layer_applies_filters_partial_pulls_holds_and_the_cap(
    layer: RealisticPubSub,
) -> None:
    predicate = parse_filter(
        'NOT attributes:tag OR (attributes.tag != "a" AND attributes.tag != "b")'
    )
    assert predicate({}) and predicate({"tag": "c"}) and not predicate({"tag": "a"})
    assert parse_filter('hasPrefix(attributes.tag, "x-")')({"tag": "x-1"})
    from google.api_core import exceptions as gexc
    from google.auth.credentials import AnonymousCredentials
    from google.pubsub_v1 import PublisherClient, SubscriberClient

    with layer.as_emulator():
        publisher = PublisherClient(credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
        subscriber = SubscriberClient(credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
    project = f"projects/lay-{uuid.uuid4().hex[:8]}"
    try:
        topic = publisher.create_topic(name=f"{project}/topics/layer-topic").name
        sub = subscriber.create_subscription(
            request={
                "name": f"{project}/subscriptions/layer-a",
                "topic": topic,
                "filter": 'attributes.tag = "a"',
            }
        ).name
        with pytest.raises(gexc.InvalidArgument):
            subscriber.create_subscription(
                request={
                    "name": f"{project}/subscriptions/layer-b",
                    "topic": topic,
                    "ack_deadline_seconds": 601,
                }
            )
        publisher.publish(
            topic=topic,
            messages=[{"data": b"x", "attributes": {"tag": "ab"[i % 2]}} for i in range(40)],
        )
        sizes: list[int] = []
        while sum(sizes) < 20:
            answer = subscriber.pull(request={"subscription": sub, "max_messages": 20}, timeout=2)
            got = answer.received_messages
            assert {m.message.attributes["tag"] for m in got} == {"a"}
            sizes.append(len(got))
            ids = [m.ack_id for m in got]
            subscriber.acknowledge(request={"subscription": sub, "ack_ids": ids})
            with pytest.raises(gexc.InvalidArgument):
                subscriber.modify_ack_deadline(
                    request={"subscription": sub, "ack_ids": ids, "ack_deadline_seconds": 601}
                )
        # Partial pulls (a share of the 20 asked for; the layer's seed is fixed), and the "b"
        # copies never came.
        assert sum(sizes) == 20 and len(sizes) > 1, sizes
        began = time.monotonic()
        with pytest.raises(gexc.DeadlineExceeded):
            subscriber.pull(
                request={"subscription": sub, "max_messages": 10}, timeout=0.5, retry=None
            )
        assert time.monotonic() - began >= 0.45  # held to the deadline
    finally:
        publisher.transport.close()  # type: ignore[no-untyped-call]
        subscriber.transport.close()  # type: ignore[no-untyped-call]


def test_a_delete_over_many_subscriptions_is_one_round(
    layer: RealisticPubSub, backend: PubSubBackend
) -> None:
    queue = Queue("spread", backend)
    queue.add(tagged(100, 50))
    queue.add(tagged(100, 50))
    leased: list[Task] = []
    while len(leased) < 200:
        leased += queue.lease(60, 100)
    with layer.counting() as calls:
        queue.delete(leased)
    assert calls.by_method()["Acknowledge"] >= 4, calls.by_method()
    # (a pull the lease left running may end meanwhile)
    assert calls.rounds("Acknowledge") == 1, calls.by_method()


def test_an_add_over_many_tags_is_one_round(layer: RealisticPubSub, backend: PubSubBackend) -> None:
    queue = Queue("adds", backend)
    queue.stats()
    with layer.counting() as calls:
        queue.add(tagged(100, 50))
    assert calls.by_method()["Publish"] >= 4
    assert calls.rounds() <= 2, calls.by_method()


def test_modify_lease_is_one_round(layer: RealisticPubSub, backend: PubSubBackend) -> None:
    queue = Queue("modify", backend)
    queue.add(Task(b"x"))
    (task,) = queue.lease(60, 10)
    with layer.counting() as calls:
        queue.modify_lease(task, 120)
    assert calls.by_method() == {"ModifyAckDeadline": 1}


def test_a_plain_lease_does_not_wait_for_an_empty_subscriptions_held_pull(
    layer: RealisticPubSub, backend: PubSubBackend
) -> None:
    """Every task tagged: the worker subscription is empty and its pull is held to its wait."""
    queue = Queue("held", backend)
    for _ in range(4):
        queue.add(tagged(100, 10))
    queue.delete(queue.lease(60, 100))  # the first lease: every subscription's size learnt
    times = []
    for _ in range(3):
        began = time.monotonic()
        leased = queue.lease(60, 100)
        times.append(time.monotonic() - began)
        assert leased
        queue.delete(leased)
    # A pull wait is a second (the empty subscriptions' pulls are held that long): a lease
    # with tasks to give answers in a few round trips (0.7 s leaves room for a loaded
    # machine).
    assert sorted(times)[1] < 0.7, times


def empty_lease_within_bounds(
    layer: RealisticPubSub, backend: PubSubBackend, **kwargs: bool
) -> None:
    queue = Queue("empty", backend)
    queue.stats()
    wait = backend.settings.pubsub_pull_wait
    queue.lease(60, 100, **kwargs)
    with layer.counting() as calls:
        began = time.monotonic()
        assert queue.lease(60, 100, **kwargs) == []
        took = time.monotonic() - began
    assert calls.count <= 20, calls.by_method()
    assert took <= wait + 2 * RTT + 0.25, took


def test_an_empty_lease_is_bounded(layer: RealisticPubSub, backend: PubSubBackend) -> None:
    empty_lease_within_bounds(layer, backend)


def test_an_empty_lease_by_a_named_tag_is_one_pull_wait(
    layer: RealisticPubSub, backend: PubSubBackend
) -> None:
    """The tag's shard and the worker subscription are pulled side by side, not in turn."""
    queue = Queue("named-empty", backend)
    queue.add(tagged(20, 5))
    queue.delete(queue.lease(60, 100))
    queue.lease(60, 100, tag="absent", group_by_tag=True)
    began = time.monotonic()
    assert queue.lease(60, 100, tag="absent", group_by_tag=True) == []
    took = time.monotonic() - began
    assert took <= backend.settings.pubsub_pull_wait + 2 * RTT + 0.25, took


@pytest.mark.xfail(
    strict=True,
    reason="with partial pulls of the claims subscription some shard tokens stay out of sight,"
    " and the lease waits up to CLAIMANT_WAIT for another process it takes to hold them",
)
def test_an_empty_lease_by_oldest_tag_is_bounded(
    layer: RealisticPubSub, backend: PubSubBackend
) -> None:
    empty_lease_within_bounds(layer, backend, group_by_tag=True)


def test_the_first_lease_of_a_process_takes_few_rounds(
    layer: RealisticPubSub, backend: PubSubBackend
) -> None:
    queue = Queue("first", backend)
    queue.add(tagged(100, 20))
    with layer.as_emulator():
        fresh = PubSubBackend(backend.project, settings=Settings(), auto_create=True)
    try:
        with layer.counting() as calls:
            leased = Queue("first", fresh).lease(60, 10)
        assert leased
        # What it reads at start-up, side by side: the queue topic (its shard count), then
        # every subscription with the topics made sure of: 2 rounds on an idle machine. On a
        # loaded one a call of a round whose thread starts after another call of it answered
        # counts as a round more (4 seen in a full run at load 12-30); one after another, as
        # before, is 40 and more.
        assert calls.rounds("GetTopic", "GetSubscription") <= 5, calls.by_method()
        # The target is 5; with partial pulls the lease itself takes a few rounds more.
        assert calls.rounds() <= 8, (calls.rounds(), calls.by_method())
    finally:
        fresh.close()
