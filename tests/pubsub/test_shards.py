"""The shard wire format: which topic a tagged task is published to, with the documented vectors.

Producers in other languages must compute the same shard, so the hash (CRC-32 of the UTF-8 tag,
mod 16) and the topic and subscription names are asserted against the vectors of docs/pubsub.md.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pullqueue import Queue, Task
from pullqueue.adapters.pubsub.layout import SHARDS, QueueLayout, shard_of
from tests.pubsub.conftest import MakeBackend, raw_pull

DOCS = Path(__file__).resolve().parents[2] / "docs" / "pubsub.md"

VECTORS = [
    # (tag, CRC-32 of its UTF-8 bytes, shard)
    ("123456789", 0xCBF43926, 6),
    ("user-42", 0x7D06B873, 3),
    ("alpha", 0xD0E0396A, 10),
    ("vip", 0x4B076C22, 2),
    ("Ünïcödé", 0x41FF281B, 11),
    ("日本", 0xC7B7CDCC, 12),
    ("window-7", 0x29B99711, 1),
]


def test_there_are_sixteen_shards() -> None:
    assert SHARDS == 16


@pytest.mark.parametrize(("tag", "crc", "shard"), VECTORS)
def test_shard_vectors(tag: str, crc: int, shard: int) -> None:
    assert crc % SHARDS == shard
    assert shard_of(tag) == shard


def test_the_docs_list_the_same_vectors() -> None:
    rows = re.findall(r"^\| `([^`]+)` \| `0x([0-9A-F]{8})` \| (\d+) \|$", DOCS.read_text(), re.M)
    assert [(tag, int(crc, 16), int(shard)) for tag, crc, shard in rows] == VECTORS


def test_shard_names() -> None:
    layout = QueueLayout("my-project", "emails", "pq-", ("vip",))
    assert layout.shard_topic_id(0) == "pq-emails-shard-0"
    assert layout.shard_subscription_id(15) == "pq-emails-shard-15"
    assert layout.topic_for("user-42") == "pq-emails-shard-3"
    # Untagged tasks and declared tags stay on the queue topic.
    assert layout.topic_for(None) == "pq-emails"
    assert layout.topic_for("vip") == "pq-emails"


def test_tagged_tasks_are_published_to_their_shard_topic(
    make_backend: MakeBackend, raw: tuple[object, object]
) -> None:
    _, subscriber = raw
    backend = make_backend()
    queue = Queue("routed", backend)
    queue.add([Task(b"1", tag="user-42"), Task(b"2", tag="alpha"), Task(b"3")])
    topology = backend.topology("routed")
    on_shard = {
        k: [m.message.data for m in raw_pull(subscriber, path)]  # type: ignore[arg-type]
        for k, path in enumerate(topology.shards)
    }
    assert {k: v for k, v in on_shard.items() if v} == {3: [b"1"], 10: [b"2"]}
    assert [m.message.data for m in raw_pull(subscriber, topology.workers)] == [b"3"]  # type: ignore[arg-type]


def test_a_foreign_tagged_task_on_the_queue_topic_is_still_leased_by_its_tag(
    make_backend: MakeBackend, raw: tuple[object, object]
) -> None:
    publisher, _ = raw
    backend = make_backend()
    queue = Queue("foreign", backend)
    topology = backend.topology("foreign")
    # A publisher that knows only the queue topic and the documented attributes.
    publisher.publish(  # type: ignore[attr-defined]
        topic=topology.topic, messages=[{"data": b"f", "attributes": {"tag": "user-42"}}]
    )
    queue.add([Task(b"p", tag="user-42")])
    leased = queue.lease(60, 10, tag="user-42")
    assert sorted(t.payload for t in leased) == [b"f", b"p"]
