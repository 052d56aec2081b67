"""The shard wire format: which topic a tagged task is published to, with the documented vectors.

Producers in other languages must compute the same shard, so the hash (CRC-32 of the UTF-8 tag,
mod the queue's shard count) and the topic and subscription names are asserted against the
vectors of docs/pubsub.md; the count a queue is provisioned with (its topic's label) is read by
every publisher and worker, and a process told another count is refused.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pydantic
import pytest
from click.testing import CliRunner

from pullqueue import Queue, Settings, Task
from pullqueue.adapters.pubsub import PubSubBackend
from pullqueue.adapters.pubsub.claims import ATTR_SHARD, Claim
from pullqueue.adapters.pubsub.layout import (
    LABEL_SHARDS,
    SHARDS,
    QueueLayout,
    check_shards,
    shard_of,
    shards_label,
)
from pullqueue.cli import cli
from pullqueue.errors import ConfigurationError
from tests.pubsub.conftest import MakeBackend, raw_pull
from tests.pubsub.test_tag_batching import assert_whole_tags, run_batched_workers

DOCS = Path(__file__).resolve().parents[2] / "docs" / "pubsub.md"

COUNTS = (16, 7, 32, 64, 256)
"""The shard counts of the vector table: the default, one that is not a power of two, larger."""
VECTORS = [
    # (tag, CRC-32 of its UTF-8 bytes, its shard for each of COUNTS)
    ("123456789", 0xCBF43926, (6, 5, 6, 38, 38)),
    ("user-42", 0x7D06B873, (3, 1, 19, 51, 115)),
    ("alpha", 0xD0E0396A, (10, 3, 10, 42, 106)),
    ("vip", 0x4B076C22, (2, 2, 2, 34, 34)),
    ("Ünïcödé", 0x41FF281B, (11, 6, 27, 27, 27)),
    ("日本", 0xC7B7CDCC, (12, 0, 12, 12, 204)),
    ("window-7", 0x29B99711, (1, 3, 17, 17, 17)),
]


def test_a_queue_without_a_count_has_sixteen_shards() -> None:
    assert SHARDS == 16
    assert QueueLayout("my-project", "emails").shards == 16
    assert shards_label(None, "emails") == 16


@pytest.mark.parametrize(("tag", "crc", "shards"), VECTORS)
def test_shard_vectors(tag: str, crc: int, shards: tuple[int, ...]) -> None:
    for count, shard in zip(COUNTS, shards, strict=True):
        assert crc % count == shard
        assert shard_of(tag, count) == shard
        assert QueueLayout("p", "emails", shards=count).topic_for(tag) == f"emails-shard-{shard}"
    assert shard_of(tag) == shards[0]


def test_the_docs_list_the_same_vectors() -> None:
    text = DOCS.read_text()
    header = "| tag | CRC-32 | " + " | ".join(f"mod {n}" for n in COUNTS) + " |"
    assert header in text
    rows = re.findall(r"^\| `([^`]+)` \| `0x([0-9A-F]{8})` \|((?: \d+ \|)+)$", text, re.M)
    assert [
        (tag, int(crc, 16), tuple(int(n) for n in shards.strip(" |").split(" | ")))
        for tag, crc, shards in rows
    ] == VECTORS


@pytest.mark.parametrize("bad", [0, -1, 257, 2.5, float("nan"), float("inf"), True, "16", None])
def test_a_layout_refuses_a_bad_shard_count(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="not a shard count"):
        QueueLayout("my-project", "emails", shards=bad)
    with pytest.raises(ConfigurationError, match="not a shard count"):
        check_shards(bad, "shards")


@pytest.mark.parametrize("bad", [0, -1, 257, 2.5, float("nan"), float("inf"), True, "nan", "x"])
def test_the_setting_refuses_a_bad_shard_count(bad: Any) -> None:
    with pytest.raises(pydantic.ValidationError, match="pubsub_shards"):
        Settings(pubsub_shards=bad)


@pytest.mark.parametrize("bad", ["0", "-1", "257", "nan", "inf", "true", "1.5", ""])
def test_the_cli_names_a_bad_shard_setting(bad: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PULLQUEUE_PUBSUB_SHARDS", bad)
    monkeypatch.setenv("PULLQUEUE_URL", "memory://")
    result = CliRunner().invoke(cli, ["stats", "jobs"])
    assert result.exit_code == 2, result.output
    assert "PULLQUEUE_PUBSUB_SHARDS" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("label", ["0", "300", "abc", "-3", "1e2", "١٦"])
def test_a_bad_shard_label_is_refused(label: str) -> None:
    with pytest.raises(ConfigurationError, match=LABEL_SHARDS):
        shards_label(label, "emails")


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


# --- a queue provisioned with another shard count, on the emulator ------------------------------


def test_a_queue_provisioned_with_n_shards_publishes_to_crc32_mod_n(
    make_backend: MakeBackend, raw: tuple[Any, Any]
) -> None:
    publisher, subscriber = raw
    backend = make_backend(pubsub_shards=32)
    queue = Queue("wide", backend)
    queue.add([Task(b"1", tag="user-42"), Task(b"2", tag="window-7"), Task(b"3", tag="vip")])
    topology = backend.topology("wide")
    assert publisher.get_topic(topic=topology.topic).labels[LABEL_SHARDS] == "32"
    assert len(topology.shards) == len(topology.shard_topics) == 32
    for k in range(32):  # every shard topic and subscription exists
        assert publisher.get_topic(topic=topology.shard_topics[k])
        assert subscriber.get_subscription(subscription=topology.shards[k])
    on_shard = {
        k: [m.message.data for m in raw_pull(subscriber, path)]
        for k, path in enumerate(topology.shards)
    }
    # user-42: 19 of 32 (3 of 16), window-7: 17 (1 of 16), vip: 2 (2 of 16).
    assert {k: v for k, v in on_shard.items() if v} == {19: [b"1"], 17: [b"2"], 2: [b"3"]}
    tokens = raw_pull(subscriber, topology.claims)
    shards = [
        t.message.attributes[ATTR_SHARD] for t in tokens if ATTR_SHARD in t.message.attributes
    ]
    assert sorted(map(int, shards)) == list(range(32))
    assert [
        dict(t.message.attributes) for t in tokens if ATTR_SHARD not in t.message.attributes
    ] == [{"census": "1"}]


def test_every_process_reads_the_count_from_the_queue_topic(make_backend: MakeBackend) -> None:
    make_backend(pubsub_shards=64).topology("told")
    # Neither told the count nor allowed to create anything: the label says it.
    reader = make_backend(auto_create=False)
    assert reader.topology("told").layout.shards == 64
    Queue("told", make_backend(pubsub_shards=64)).add([Task(b"a", tag="user-42")])
    leased = Queue("told", reader).lease(60, 10, tag="user-42")
    assert [t.payload for t in leased] == [b"a"]


def test_a_queue_without_the_label_reads_sixteen_and_is_never_rehashed(
    make_backend: MakeBackend, raw: tuple[Any, Any], project: str
) -> None:
    publisher, _ = raw
    # Provisioned before shard counts existed: a queue topic with no label.
    publisher.create_topic(name=f"projects/{project}/topics/older")
    old = make_backend()
    assert old.topology("older").layout.shards == 16
    Queue("older", old).add([Task(b"a", tag="user-42")])
    with pytest.raises(ConfigurationError, match="provisioned with 16 shards") as refused:
        make_backend(pubsub_shards=32).topology("older")
    assert "PULLQUEUE_PUBSUB_SHARDS=32" in str(refused.value)
    assert "no shard label" in str(refused.value)
    # Refused before anything was made: no 17th shard topic.
    topics = {
        t.name.rsplit("/", 1)[1] for t in publisher.list_topics(project=f"projects/{project}")
    }
    assert "older-shard-15" in topics and "older-shard-16" not in topics
    leased = Queue("older", make_backend(auto_create=False)).lease(60, 10, tag="user-42")
    assert [t.payload for t in leased] == [b"a"]


def test_a_process_told_another_count_is_refused(make_backend: MakeBackend) -> None:
    make_backend(pubsub_shards=32).topology("agreed")
    assert make_backend(pubsub_shards=32).topology("agreed").layout.shards == 32
    with pytest.raises(ConfigurationError, match="label pullqueue-shards=32"):
        make_backend(pubsub_shards=16, auto_create=False).topology("agreed")
    with pytest.raises(ConfigurationError, match="set it to 32"):
        Queue("agreed", make_backend(pubsub_shards=64)).add([Task(b"x", tag="a")])


def test_a_bad_label_on_the_queue_topic_is_refused(
    make_backend: MakeBackend, raw: tuple[Any, Any], project: str
) -> None:
    publisher, _ = raw
    publisher.create_topic(
        request={"name": f"projects/{project}/topics/labelled", "labels": {LABEL_SHARDS: "0"}}
    )
    with pytest.raises(ConfigurationError, match="topic label pullqueue-shards 0"):
        make_backend().topology("labelled")


def test_a_task_published_with_another_count_is_served_and_reported(
    make_backend: MakeBackend, raw: tuple[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    publisher, _ = raw
    backend = make_backend(pubsub_shards=32)
    topology = backend.topology("mixed-up")
    # A publisher that assumed 16 shards: user-42 goes to shard 3, where 32 shards say 19.
    publisher.publish(
        topic=topology.shard_topics[3],
        messages=[{"data": b"m", "attributes": {"tag": "user-42", "task_name": "m1"}}],
    )
    with caplog.at_level(logging.WARNING):
        leased = Queue("mixed-up", backend).lease(60, 10, group_by_tag=True)
    assert [t.payload for t in leased] == [b"m"]
    assert "shard_mismatch" in caplog.text
    assert "'user-42' published to shard 3 of 32" in caplog.text


def test_more_processes_than_sixteen_each_hold_a_token_of_a_wider_queue(
    make_backend: MakeBackend,
) -> None:
    # Each backend holds its tokens as a worker process does (own clients, own claims).
    backends = [make_backend(pubsub_shards=24) for _ in range(20)]
    topology = backends[0].topology("fleet")
    claim = (topology.claims, topology.claims_topic)
    won = [b._claims.claim("fleet", *claim, k) for k, b in enumerate(backends)]
    assert won == [Claim.OWNED] * 20
    assert backends[0]._claims.claim("fleet", *claim, 20) is Claim.OWNED
    assert backends[1]._claims.claim("fleet", *claim, 0) is Claim.TAKEN


def test_worker_processes_on_a_queue_of_32_shards_lease_whole_tags(
    make_backend: MakeBackend, project: str, tmp_path: Path
) -> None:
    # Real worker processes that are told nothing of the count (the label says 32).
    tags, per_tag = 100, 10
    _, batches, _ = run_batched_workers(
        make_backend, project, tmp_path, processes=4, tags=tags, per_tag=per_tag, seed=3, shards=32
    )
    # Every tag whole: a process drains a shard only while it holds its token.
    assert_whole_tags(batches, tags=tags, per_tag=per_tag, share=0.95, spare=4)
    # The queue the workers opened is the 32-shard one, not one they made with 16.
    assert PubSubBackend(project, settings=Settings()).topology("batched").layout.shards == 32


def test_stats_read_the_backlog_of_every_shard_of_a_wide_queue(make_backend: MakeBackend) -> None:
    from pullqueue import inspection

    backend = make_backend(pubsub_shards=32)
    backend.topology("wide-stats")
    asked: list[list[str]] = []

    class Reader:
        def __init__(self, project: str) -> None:
            pass

        def read(self, queue: str, subscriptions: list[Any]) -> None:
            asked.append([s.subscription_id for s in subscriptions if s.role == "shard"])

    inspection.read_backlog(backend, "wide-stats", Reader)  # type: ignore[arg-type]
    assert asked == [[f"wide-stats-shard-{k}" for k in range(32)]]
