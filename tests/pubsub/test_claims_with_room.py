"""A lease by oldest tag claims no shard it has no room to drain.

A hand too small for the next shard serves what is whole in it first; asking for that shard's
claim then only to leave it cost a pull of the claims subscription in lease after lease (two
round trips on the service: the claim, then its token given back), in the hand's turn.
"""

from __future__ import annotations

import time
from typing import Any

from pullqueue import Queue, Task
from pullqueue.adapters.pubsub.layout import shard_of
from tests.pubsub.conftest import MakeBackend, tags_on_shard_of

FIRST = "first"


def _tag_on_another_shard() -> str:
    return next(f"y-{i}" for i in range(1000) if shard_of(f"y-{i}") != shard_of(FIRST))


def test_a_shard_the_hand_has_no_room_for_is_not_claimed(make_backend: MakeBackend) -> None:
    mid, last = tags_on_shard_of(FIRST, 2)
    other = _tag_on_another_shard()
    worker = make_backend(pubsub_hold_max=30)
    queue = Queue("roomy", worker)
    queue.add([Task(b"f", tag=FIRST) for _ in range(3)])
    time.sleep(0.02)
    queue.add([Task(b"o", tag=other) for _ in range(25)])
    time.sleep(0.02)
    queue.add([Task(b"m", tag=mid) for _ in range(20)])
    time.sleep(0.02)
    queue.add([Task(b"l", tag=last) for _ in range(3)])
    time.sleep(0.3)

    # FIRST's shard (26 tasks) is drained; the other shard's head goes back with its token.
    leased = queue.lease(60, 30, group_by_tag=True)
    assert {t.tag for t in leased} == {FIRST} and len(leased) == 3
    queue.delete(leased)

    claimed: list[int] = []
    claim = worker._claims.claim

    def noted(queue_id: str, subscription: str, topic: str, shard: int, **kwargs: Any) -> Any:
        claimed.append(shard)
        return claim(queue_id, subscription, topic, shard, **kwargs)

    worker._claims.claim = noted  # type: ignore[method-assign]
    # The other tag's head is the oldest the worker knows, but 23 tasks in a hand of 30 leave
    # no room for a shard of that size: MID is served from the hand, the other shard left alone.
    leased = queue.lease(60, 30, group_by_tag=True)
    assert {t.tag for t in leased} == {mid} and len(leased) == 20
    assert shard_of(other) not in claimed, claimed
    queue.delete(leased)
    # With room again, the other shard is claimed and drained whole: its tag is the oldest.
    leased = queue.lease(60, 30, group_by_tag=True)
    assert {t.tag for t in leased} == {other} and len(leased) == 25
    assert shard_of(other) in claimed
    queue.delete(leased)
    leased = queue.lease(60, 30, group_by_tag=True)
    assert {t.tag for t in leased} == {last} and len(leased) == 3
    queue.delete(leased)
