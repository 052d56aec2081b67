"""Claims asked for together: a look by oldest tag whose oldest candidates are shards that other
processes took since it saw their heads asks for those claims in one look, not one by one.

On the service each claim that fails costs a pull of the claims subscription and a glance, two
round trips in the hand's turn while the process's other threads wait for it.
"""

from __future__ import annotations

import time
from typing import Any

from pullqueue import Queue, Task
from pullqueue.adapters.pubsub.claims import Claim
from pullqueue.adapters.pubsub.layout import shard_of
from tests.pubsub.conftest import MakeBackend, tags_on_shard_of

FIRST = "first"


def _tags_on_other_shards(count: int) -> list[str]:
    """`count` tags, each on a shard of its own, none on FIRST's."""
    shards = {shard_of(FIRST)}
    tags: list[str] = []
    for i in range(10_000):
        tag = f"h-{i}"
        if shard_of(tag) not in shards:
            shards.add(shard_of(tag))
            tags.append(tag)
            if len(tags) == count:
                return tags
    raise AssertionError("not enough shards")


def test_claims_of_shards_taken_since_their_heads_were_seen_are_asked_for_together(
    make_backend: MakeBackend,
) -> None:
    others = _tags_on_other_shards(6)
    (last,) = tags_on_shard_of(FIRST, 1)
    worker = make_backend()
    queue = Queue("together", worker)
    queue.add([Task(b"f", tag=FIRST) for _ in range(3)])
    for tag in others:  # younger than FIRST's tasks, older than LAST's
        time.sleep(0.02)
        queue.add([Task(b"h", tag=tag)])
    time.sleep(0.02)
    queue.add([Task(b"l", tag=last) for _ in range(3)])
    time.sleep(0.3)

    # The first look sees every head, drains FIRST's shard (LAST's tasks stay in hand) and
    # gives the other heads back with their tokens, remembering them.
    leased = queue.lease(60, 10, group_by_tag=True)
    assert {t.tag for t in leased} == {FIRST} and len(leased) == 3
    queue.delete(leased)

    # Another process takes the claims of the shards whose heads the worker remembers.
    other = make_backend()
    topology = other.topology("together")
    for tag in others:
        outcome = other._claims.claim(
            "together", topology.claims, topology.claims_topic, shard_of(tag)
        )
        assert outcome is Claim.OWNED, tag

    claims_pulls = 0
    pull = worker.rpc.pull

    def counted(subscription: str, *args: Any, **kwargs: Any) -> Any:
        nonlocal claims_pulls
        if subscription == topology.claims:
            claims_pulls += 1
        return pull(subscription, *args, **kwargs)

    worker.rpc.pull = counted  # type: ignore[method-assign]
    # The oldest heads it remembers are the other process's now: it passes over them and
    # serves LAST from its hand, asking for those six claims in two looks (four, then two):
    # three pulls of the claims subscription here, where one claim after another made nine.
    leased = queue.lease(60, 10, group_by_tag=True)
    assert {t.tag for t in leased} == {last} and len(leased) == 3
    assert claims_pulls <= 4, claims_pulls
    queue.delete(leased)
