"""Bulk actions cut short: a failure between batches leaves the batches done done, the rest of
the tag untouched and every other tag whole, and running the action again finishes it with the
exact count of what was left (memory://, and Pub/Sub on the emulator, where a batch pulled and
never acknowledged comes back)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence

import pytest

from pullqueue import Queue, Settings, Task
from pullqueue.adapters.memory import MemoryBackend
from pullqueue.adapters.pubsub import PubSubBackend
from pullqueue.console import operations
from pullqueue.errors import TransientError
from tests.console.test_pubsub import leasable
from tests.support.emulators import shared_emulator_host


class FailingDeletes(MemoryBackend):
    """memory:// whose delete fails from its `fail_at`-th call on, as a lost connection would."""

    def __init__(self, fail_at: int) -> None:
        super().__init__()
        self.fail_at = fail_at
        self.calls = 0

    def delete(self, queue: str, tasks: Sequence[Task]) -> list[bool]:
        self.calls += 1
        if self.calls >= self.fail_at:
            raise TransientError("connection lost", queue=queue)
        return super().delete(queue, tasks)


def fill(backend: MemoryBackend) -> None:
    queue = Queue("q", backend)
    for start in range(0, 1300, 100):
        queue.add([Task(b"x", name=f"a{i}", tag="a") for i in range(start, start + 100)])
    queue.add([Task(b"x", name=f"b{i}", tag="b") for i in range(50)])


def test_an_interrupted_delete_of_a_tag_leaves_whole_batches_and_a_rerun_finishes() -> None:
    backend = FailingDeletes(fail_at=2)
    fill(backend)
    with pytest.raises(TransientError):
        operations.delete_tag(backend, "q", {"tag": "a"})
    left = {t.name for t in backend.list_tasks("q")}
    assert len([n for n in left if n and n.startswith("a")]) == 1300 - operations.BATCH
    assert {f"b{i}" for i in range(50)} <= left
    backend.fail_at = 10**9
    said = operations.delete_tag(backend, "q", {"tag": "a"})
    assert said.startswith(f"deleted {1300 - operations.BATCH:,} tasks with tag 'a'")
    assert {t.name for t in backend.list_tasks("q")} == {f"b{i}" for i in range(50)}


def test_an_interrupted_delete_of_a_tag_on_pubsub_loses_nothing() -> None:
    shared_emulator_host("pubsub")
    project = f"pq-bulk-{uuid.uuid4().hex[:8]}"
    settings = Settings(pubsub_ack_deadline=10)
    producer = PubSubBackend(project, settings=settings, auto_create=True)
    operator = PubSubBackend(project, settings=settings)
    try:
        queue = Queue("bulkq", producer)
        for start in range(0, 2400, 100):
            queue.add([Task(b"x", tag="a" if i % 2 else "b") for i in range(start, start + 100)])
        acks = 0
        real_ack = operator.rpc.ack

        def ack_then_fail(*args: object, **kwargs: object) -> set[str]:
            nonlocal acks
            acks += 1
            if acks > 1:
                raise TransientError("connection lost", queue="bulkq")
            return real_ack(*args, **kwargs)  # type: ignore[arg-type]

        operator.rpc.ack = ack_then_fail  # type: ignore[method-assign]
        with pytest.raises(TransientError):
            operations.delete_tag(operator, "bulkq", {"tag": "a"})
        operator.rpc.ack = real_ack  # type: ignore[method-assign]
        time.sleep(11)  # the batch pulled and never acknowledged comes back after its deadline
        said = operations.delete_tag(operator, "bulkq", {"tag": "a"})
        assert said.startswith(f"deleted {1200 - operations.BATCH:,} tasks with tag 'a'")
        assert len(leasable(producer, "bulkq")) == 1200  # every b task, none lost
    finally:
        producer.close()
        operator.close()
