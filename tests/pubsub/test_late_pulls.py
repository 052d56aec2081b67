"""A pull a lease left running: what it brings is seen by the next lease, whatever its kind.

A plain lease pulls every subscription side by side and answers with the first that bring
tasks; the others' pulls go on and their tasks go to the hand. A lease by tag begun before such a
pull ended answered without its tasks (seen as a named-tag lease getting 2 of 3 waiting tasks on
a loaded machine, where the SDK's stub gave all 3).

Where empty pulls are held (Pub/Sub) such a pull is waited for only as long as a pull that brings
tasks takes (tests/pubsub/test_service.py holds the cost of a lease there).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from pullqueue import Queue, Task
from pullqueue.adapters.pubsub import PubSubBackend
from pullqueue.adapters.pubsub.layout import shard_of
from tests.pubsub.conftest import MakeBackend

pytestmark = pytest.mark.unchecked_names

SLOW = 0.6
"""Seconds the slow shard's pulls take while the plain lease runs."""


def _tags_on_other_shards(tag: str, count: int) -> list[str]:
    found = (f"o-{i}" for i in range(100_000) if shard_of(f"o-{i}") != shard_of(tag))
    return [next(found) for _ in range(count)]


def _slow_pulls_of(backend: PubSubBackend, subscription: str) -> threading.Event:
    """Pulls of `subscription` take SLOW seconds longer while the returned event is set."""
    rpc = backend.rpc
    pull_many = rpc.pull_many
    slow = threading.Event()

    def slowed(source: str, sizes: Any, **kwargs: Any) -> Any:
        late = slow.is_set() and source == subscription
        answer = pull_many(source, sizes, **kwargs)
        if late:
            time.sleep(SLOW)  # pulled: its tasks are out until this answer arrives
        return answer

    rpc.pull_many = slowed  # type: ignore[method-assign,assignment]
    return slow


@pytest.mark.parametrize("by", ["named", "oldest"])
def test_a_tag_lease_waits_for_the_pulls_a_plain_lease_left_running(
    make_backend: MakeBackend, by: str
) -> None:
    backend = make_backend()
    queue = Queue("late", backend)
    tag = "coolest-tag"
    # An empty lease first, as a worker's loop has had: the emulator answers an empty pull at
    # once, so a pull still running is known to be bringing tasks.
    assert queue.lease(60, 10) == []
    queue.add([Task(b"t", name=f"t{i}", tag=tag) for i in range(3)])
    others = _tags_on_other_shards(tag, 6)
    queue.add([Task(b"o", name=f"o{i}", tag=t) for i, t in enumerate(others)])
    topology = backend.topology("late")
    slow = _slow_pulls_of(backend, topology.shards[shard_of(tag)])
    slow.set()
    plain = queue.lease(60, 2)
    slow.clear()
    assert len(plain) == 2 and all(t.tag != tag for t in plain)  # answered without the slow pull
    # The tag's tasks are the oldest: a lease by oldest tag leases them too.
    if by == "named":
        batch = queue.lease(60, 10, tag=tag)
    else:
        batch = queue.lease(60, 10, group_by_tag=True)
    assert sorted(str(t.name) for t in batch) == ["t0", "t1", "t2"]
