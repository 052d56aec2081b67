"""A shard's claimant serves whole tags even when other processes held some of its tasks.

Processes probe the head of every shard; the claimant of a shard drains it while other processes
may hold heads of it, which they give back when they find the shard claimed. For a while after
winning a claim the claimant pulls the shard again when it serves one of its tags, so a task
given back meanwhile joins its tag's lease instead of being leased on its own later.
"""

from __future__ import annotations

from pullqueue import Queue, Task
from pullqueue.adapters.pubsub.layout import shard_of
from tests.pubsub.conftest import MakeBackend


def _two_tags_on_one_shard() -> tuple[str, str]:
    found = [f"t-{i}" for i in range(100_000) if shard_of(f"t-{i}") == shard_of("t-0")]
    return found[0], found[1]


def test_a_task_back_on_a_shard_just_claimed_joins_its_tags_lease(
    make_backend: MakeBackend,
) -> None:
    queue = Queue("rejoin", make_backend())
    first, second = _two_tags_on_one_shard()
    queue.add([Task(b"a", tag=first) for _ in range(3)])
    queue.add([Task(b"b", tag=second) for _ in range(3)])
    # The shard is drained into the hand (its claim won) and the first tag leased.
    assert [t.tag for t in queue.lease(60, 10, group_by_tag=True)] == [first] * 3
    # A task of the second tag reaches the shard now, as a head another process probed and
    # gave back would: the next lease of its tag has it too (before, it was found empty a
    # moment ago and left out, and the task went out alone in a later lease).
    queue.add([Task(b"c", tag=second)])
    batch = queue.lease(60, 10, group_by_tag=True)
    assert sorted(t.payload for t in batch) == [b"b", b"b", b"b", b"c"]
