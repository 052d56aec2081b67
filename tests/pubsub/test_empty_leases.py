"""Empty leases by oldest tag on Pub/Sub: how often an idle worker hears [], and what it costs.

While another process serves the shards it holds, a worker of an idle process finds nothing it
may lease. An empty answer then comes no sooner than the pull wait, threads of one process
waiting for the hand share one look, and a process that gave tasks back to another process's
claimed shard keeps looking (and asking for that claim) for a few seconds before it answers [].
"""

from __future__ import annotations

import threading
import time

from pullqueue import Queue, Task
from tests.pubsub.conftest import MakeBackend, tags_on_shard_of

TAG = "alpha"


def test_an_idle_process_hears_one_empty_lease_per_pull_wait(make_backend: MakeBackend) -> None:
    # The holder drains a shard into its hand (its claim keeps others off it); the idle process
    # finds every subscription empty. Its pulls come back at once on the emulator: before the
    # wait, a worker looping on lease heard [] about 20 times a second.
    holder = Queue("idle", make_backend())
    idle = Queue("idle", make_backend(pubsub_pull_wait=1.0))
    tags = tags_on_shard_of(TAG, 5)
    holder.add([Task(b"x", tag=tag) for tag in tags for _ in range(4)])
    assert len(holder.lease(60, 10, group_by_tag=True)) == 4  # the rest is in its hand
    empty = 0
    start = time.monotonic()
    while time.monotonic() - start < 3.0:
        assert idle.lease(60, 10, group_by_tag=True) == []
        empty += 1
    assert empty <= 4, empty


def test_threads_waiting_for_the_hand_share_one_empty_look(make_backend: MakeBackend) -> None:
    # Eight threads of one process lease from an empty queue with a 3 s deadline: one at a time
    # serves the hand, and each look costs a pull wait (1 s). Those that waited answer [] from
    # the look that ended their wait, instead of one pull wait each up to their deadline.
    queue = Queue("idle-threads", make_backend(pubsub_pull_wait=1.0))
    assert queue.lease(60, 10, group_by_tag=True) == []  # resources and claims set up
    answers: list[object] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def lease() -> None:
        start.wait()
        began = time.monotonic()
        try:
            outcome: object = queue.lease(60, 10, group_by_tag=True, deadline=3.0)
        except Exception as exc:  # reported by the assertion below
            outcome = exc
        with lock:
            answers.append((outcome, time.monotonic() - began))

    threads = [threading.Thread(target=lease) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert [outcome for outcome, _ in answers] == [[]] * 8  # type: ignore[misc]
    # One pull wait for all (0.9 s here); before, each thread added its own, the last ones
    # answering at their deadline (2.9 s).
    assert max(seconds for _, seconds in answers) < 2.0  # type: ignore[misc]


def test_a_process_waits_for_tasks_another_process_holds_and_gets_them_when_it_stops(
    make_backend: MakeBackend,
) -> None:
    # The holder drained a shard and holds its claim; a task added since is the other process's
    # oldest head, of a shard it may not drain: it gives it back to the holder. Instead of []
    # at once it keeps asking for the claim, and when the holder stops (giving back its lease,
    # its hand and then its claims) it drains the shard in the same lease call and leases the
    # oldest tag, the one the holder had leased.
    holder_backend = make_backend()
    holder = Queue("claimant", holder_backend)
    other = Queue("claimant", make_backend(pubsub_pull_wait=0.5))
    first, second, later = tags_on_shard_of(TAG, 3)
    holder.add([Task(b"a", tag=first)])
    time.sleep(0.01)
    holder.add([Task(b"b", tag=second) for _ in range(3)])
    assert [t.tag for t in holder.lease(60, 10, group_by_tag=True)] == [first]
    holder.add([Task(b"c", tag=later)])  # on the holder's shard, not in its hand
    stopper = threading.Timer(1.5, holder_backend.close)
    stopper.start()
    try:
        began = time.monotonic()
        batch = other.lease(60, 10, group_by_tag=True)
        took = time.monotonic() - began
    finally:
        stopper.join()
    assert [t.tag for t in batch] == [first], (batch, took)
    assert 1.5 <= took < 5.0
