"""Large payloads on Pub/Sub: leasing by tag at 100 KB and ~900 KB, with the hand bounded in bytes.

A pull of 100 tasks of 100 KB is over gRPC's default 4 MiB receive limit, which the Google
client keeps on its emulator channel; an oversized answer must never stall a queue, and a worker
must not hold more than PULLQUEUE_PUBSUB_HOLD_BYTES of tasks it has not leased yet.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from pullqueue import Queue, Task
from pullqueue.adapters.pubsub.rpc import PubSubRpc
from tests.pubsub.conftest import MakeBackend

KB = 1000


def _add(queue: Queue, size: int, per_tag: int, tags: int) -> set[bytes]:
    payloads: set[bytes] = set()
    for i in range(per_tag):
        batch = []
        for t in range(tags):
            payload = f"{t}-{i}-".encode().ljust(size, b"x")
            payloads.add(payload)
            batch.append(Task(payload, tag=f"tag-{t}"))
        queue.add(batch)
    return payloads


def _drain_by_tag(queue: Queue, count: int, max_tasks: int, seconds: float) -> list[list[Task]]:
    batches: list[list[Task]] = []
    give_up = time.monotonic() + seconds
    while sum(map(len, batches)) < count and time.monotonic() < give_up:
        batch = queue.lease(60, max_tasks, group_by_tag=True)  # any error fails the test
        if batch:
            queue.delete(batch)
            batches.append(batch)
    return batches


def test_tasks_of_100_kb_are_leased_by_tag_in_whole_tags(make_backend: MakeBackend) -> None:
    # 100 tasks of a tag on one shard: a pull of them is about 10 MB.
    queue = Queue("big", make_backend())
    payloads = _add(queue, 100 * KB, per_tag=100, tags=3)
    batches = _drain_by_tag(queue, len(payloads), 1000, seconds=60)
    assert sorted(t.payload for b in batches for t in b) == sorted(payloads)
    assert all(len({t.tag for t in batch}) == 1 for batch in batches)
    assert len(batches) <= 6, [len(b) for b in batches]


def test_tasks_of_900_kb_are_leased_one_at_a_time_by_tag(make_backend: MakeBackend) -> None:
    queue = Queue("huge", make_backend())
    payloads = _add(queue, 900 * KB, per_tag=10, tags=3)
    batches = _drain_by_tag(queue, len(payloads), 1, seconds=60)
    assert sorted(t.payload for b in batches for t in b) == sorted(payloads)


def test_the_hand_holds_at_most_its_bytes(make_backend: MakeBackend) -> None:
    backend = make_backend(pubsub_hold_bytes=2 * 2**20)
    queue = Queue("bounded", backend)
    payloads = _add(queue, 100 * KB, per_tag=40, tags=2)  # 4 MB a tag
    leased: list[bytes] = []
    peak = 0
    give_up = time.monotonic() + 60
    while len(leased) < len(payloads) and time.monotonic() < give_up:
        batch = queue.lease(60, 1, group_by_tag=True)
        peak = max(peak, backend._hand("bounded").held_bytes())
        if batch:
            queue.delete(batch)
            leased += [t.payload for t in batch]
    assert sorted(leased) == sorted(payloads)
    assert 0 < peak <= 2 * 2**20


def test_an_answer_over_the_receive_limit_makes_pulls_smaller_instead_of_failing(
    make_backend: MakeBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # gRPC's default 4 MiB receive limit, as the Google client's emulator channel has it.
    monkeypatch.setattr(PubSubRpc.__init__, "__kwdefaults__", {"max_receive": 4 * 2**20})
    backend = make_backend(pubsub_ack_deadline=10)
    queue = Queue("limited", backend)
    payloads = _add(queue, 100 * KB, per_tag=100, tags=1)
    # The refused answer's messages come back after their 10 s ack deadline.
    batches = _drain_by_tag(queue, len(payloads), 1000, seconds=90)
    assert sorted(t.payload for b in batches for t in b) == sorted(payloads)
    assert max(backend.rpc._pull_caps.values()) <= 50


def _answers_at_once(backend: object) -> list[tuple[float, float, int]]:
    """Record every pull: (start, end, bytes of its answer), to sum answers in flight at once."""
    rpc = backend.rpc  # type: ignore[attr-defined]
    pull = rpc.pull
    spans: list[tuple[float, float, int]] = []
    lock = threading.Lock()

    def recorded(*args: Any, **kwargs: Any) -> list[Any]:
        start = time.monotonic()
        answer = pull(*args, **kwargs)
        size = sum(item.message.ByteSize() for item in answer)
        with lock:
            spans.append((start, time.monotonic(), size))
        return answer

    rpc.pull = recorded
    return spans


def _most_at_once(spans: list[tuple[float, float, int]]) -> int:
    """The largest sum of answer bytes of pulls running at the same moment."""
    return max(sum(size for start, end, size in spans if start <= at < end) for at, _, _ in spans)


@pytest.mark.parametrize("group_by_tag", [True, False], ids=["by-tag", "plain"])
def test_a_round_of_pulls_brings_at_most_its_bytes(
    make_backend: MakeBackend, group_by_tag: bool
) -> None:
    # 40 tasks of 400 KB (16 MB) on one shard; a round of pulls may bring 2 MiB.
    backend = make_backend(pubsub_pull_bytes=2 * 2**20)
    queue = Queue("rounds", backend)
    payloads = _add(queue, 400 * KB, per_tag=40, tags=1)
    spans = _answers_at_once(backend)
    leased: list[bytes] = []
    give_up = time.monotonic() + 60
    while len(leased) < len(payloads) and time.monotonic() < give_up:
        batch = queue.lease(60, 1000, group_by_tag=group_by_tag)
        if batch:
            queue.delete(batch)
            leased += [t.payload for t in batch]
    assert sorted(leased) == sorted(payloads)
    # A message's attributes and framing add a little to its payload.
    assert 0 < _most_at_once(spans) <= 2 * 2**20 + 10 * KB
