"""drain() between real adapters: the App Engine SDK stub into the Pub/Sub emulator, and Cloud
Tasks (the REST fake over the SDK stub) into memory, future ETAs and legacy limits included."""

from __future__ import annotations

import datetime as dt
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials
from google.pubsub_v1 import SubscriberClient

from pullqueue import Queue, Settings, Task
from pullqueue.adapters.memory import MemoryBackend
from pullqueue.adapters.pubsub import PubSubBackend
from pullqueue.adapters.pubsub.layout import SHARDS
from pullqueue.adapters.pubsub.wire import parse_eta
from pullqueue.dedupe import MemoryNameRegistry
from pullqueue.errors import ConfigurationError, NotProvisionedError, UnknownQueueError
from pullqueue.migrate import drain
from pullqueue.migrate.report import iso
from tests.support.appengine_testbed import appengine_testbed
from tests.support.cloudtasks_fake import cloudtasks_service
from tests.support.emulators import shared_emulator_host

FAST: dict[str, Any] = {"quiet_period": 0.2, "max_wait": 0.5}


@pytest.fixture(scope="module")
def emulator() -> str:
    return shared_emulator_host("pubsub")


@pytest.fixture
def project(emulator: str) -> str:
    return f"pq-mig-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def subscriber(emulator: str) -> Iterator[SubscriberClient]:
    client = SubscriberClient(credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
    yield client
    client.transport.close()  # type: ignore[no-untyped-call]


def pull_all(subscriber: SubscriberClient, path: str) -> dict[str, Any]:
    """Every message on a subscription by task_name (acked), failing on a duplicate name."""
    found: dict[str, Any] = {}
    empty = 0
    while empty < 3:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            response = subscriber.pull(
                request={"subscription": path, "max_messages": 1000, "return_immediately": True},
                timeout=10,
            )
        if not response.received_messages:
            empty += 1
            continue
        empty = 0
        for received in response.received_messages:
            name = received.message.attributes["task_name"]
            assert name not in found, f"{name} arrived twice"
            found[name] = received.message
        subscriber.acknowledge(
            request={
                "subscription": path,
                "ack_ids": [r.ack_id for r in response.received_messages],
            }
        )
    return found


def test_sdk_stub_to_pubsub_moves_every_task_and_reports_the_future_one_waiting(
    tmp_path: Path, project: str, subscriber: SubscriberClient
) -> None:
    with appengine_testbed(["legacy"]) as bed:
        seeded = {}
        for i in range(600):
            tag = f"user{i % 3}" if i % 2 else None
            name = bed.seed("legacy", f"p{i}".encode(), name=f"t{i}" if i % 4 else None, tag=tag)
            seeded[name] = (f"p{i}".encode(), tag)
        later = bed.clock() + 3600
        bed.seed("legacy", b"later", name="later", eta=later)
        bed.clock.advance(1)
        dest_backend = PubSubBackend(
            project, settings=Settings(), auto_create=True, names=MemoryNameRegistry()
        )
        try:
            report = drain(
                Queue("legacy", bed.backend()),
                Queue("legacy", dest_backend),
                journal=tmp_path / "journal",
                **FAST,
            )
        finally:
            dest_backend.close()
        left = bed.tasks("legacy")

    assert report.ok, report.render()
    assert (report.leased, report.written, report.deleted) == (600, 600, 600)
    assert report.still_waiting == 1 and report.waiting[0].oldest_eta == iso(later)
    assert [(t.name, t.retry_count) for t in left] == [("later", 0)]  # untouched
    # Untagged tasks arrive on the worker subscription, tagged ones on their tag's shard.
    arrived = pull_all(subscriber, f"projects/{project}/subscriptions/legacy-workers")
    for k in range(SHARDS):
        on_shard = pull_all(subscriber, f"projects/{project}/subscriptions/legacy-shard-{k}")
        assert all(message.attributes["tag"] for message in on_shard.values())
        arrived.update(on_shard)
    assert set(arrived) == set(seeded)  # unnamed tasks keep the names the legacy queue gave them
    for name, (payload, tag) in seeded.items():
        assert arrived[name].data == payload
        assert arrived[name].attributes.get("tag") == tag


def test_dry_run_on_the_sdk_stub_reads_statistics_and_leases_nothing(project: str) -> None:
    with appengine_testbed(["legacy"]) as bed:
        for i in range(30):
            bed.seed("legacy", b"x", name=f"t{i}")
        bed.clock.advance(1)
        dest_backend = PubSubBackend(
            project, settings=Settings(), auto_create=True, names=MemoryNameRegistry()
        )
        try:
            report = drain(
                Queue("legacy", bed.backend()), Queue("legacy", dest_backend), dry_run=True
            )
        finally:
            dest_backend.close()
        left = bed.tasks("legacy")
    assert report.dry is not None and not report.dry.listed and report.dry.tasks == 30
    assert len(left) == 30 and all(task.retry_count == 0 for task in left)


def test_an_unprovisioned_destination_fails_before_anything_moves(project: str) -> None:
    with appengine_testbed(["legacy"]) as bed:
        bed.seed("legacy", b"x", name="t1")
        bed.clock.advance(1)
        dest_backend = PubSubBackend(
            project, settings=Settings(), auto_create=False, names=MemoryNameRegistry()
        )
        try:
            with pytest.raises(NotProvisionedError, match="preflight on the destination"):
                drain(Queue("legacy", bed.backend()), Queue("legacy", dest_backend), **FAST)
        finally:
            dest_backend.close()
        assert [(t.name, t.retry_count) for t in bed.tasks("legacy")] == [("t1", 0)]


def test_pubsub_without_a_name_registry_is_refused_before_anything_moves(project: str) -> None:
    with appengine_testbed(["legacy"]) as bed:
        for i in range(5):
            bed.seed("legacy", b"x", name=f"t{i}")
        bed.clock.advance(1)
        dest_backend = PubSubBackend(project, settings=Settings(), auto_create=True)
        try:
            with pytest.raises(ConfigurationError) as refused:
                drain(Queue("legacy", bed.backend()), Queue("legacy", dest_backend), **FAST)
            assert Queue("legacy", dest_backend).lease(60, 1000, deadline=2) == []
        finally:
            dest_backend.close()
        assert sorted((t.name, t.retry_count) for t in bed.tasks("legacy")) == [
            (f"t{i}", 0) for i in range(5)
        ]
    assert "PULLQUEUE_DEDUPE_URL" in str(refused.value)
    assert "PULLQUEUE_ACCEPT_DUPLICATE_NAMES=1" in str(refused.value)
    assert "nothing was moved" in str(refused.value)


def test_cloud_tasks_to_memory_moves_future_etas_from_the_listing(tmp_path: Path) -> None:
    with cloudtasks_service(queues=["pulls"]) as service:
        for i in range(250):
            service.seed("pulls", f"p{i}".encode(), name=f"t{i}", tag=f"g{i % 5}")
        etas = {f"f{i}": service.clock() + 600 + i for i in range(5)}
        for name, eta in etas.items():
            service.seed("pulls", b"future", name=name, eta=eta)
        service.clock.advance(1)  # type: ignore[attr-defined]
        dest_backend = MemoryBackend(clock=service.clock)
        source_backend = service.backend()
        try:
            report = drain(
                Queue("pulls", source_backend),
                Queue("pulls", dest_backend),
                journal=tmp_path / "journal",
                batch_size=20,
                **FAST,
            )
        finally:
            source_backend.close()
        left = service.tasks("pulls")
        refused = service.refused_leases
    assert report.ok, report.render()
    assert (report.leased, report.listed, report.written) == (250, 5, 255)
    assert left == []
    assert refused == 0  # 13 lease calls, never more than the legacy 10 per second
    moved = {task.name: task for task in dest_backend.list_tasks("pulls")}
    assert len(moved) == 255
    assert moved["t17"].payload == b"p17" and moved["t17"].tag == "g2"
    for name, eta in etas.items():
        assert moved[name].eta_posix == pytest.approx(eta)


def test_cloud_tasks_dry_run_lists_without_leasing() -> None:
    with cloudtasks_service(queues=["pulls"]) as service:
        for i in range(12):
            service.seed("pulls", b"x" * 10, name=f"t{i}", tag="a" if i % 2 else None)
        service.seed("pulls", b"later", name="later", countdown=3600)
        service.clock.advance(1)  # type: ignore[attr-defined]
        source_backend = service.backend()
        try:
            report = drain(
                Queue("pulls", source_backend), Queue("pulls", MemoryBackend()), dry_run=True
            )
        finally:
            source_backend.close()
        assert service.rpc_count("LeaseTasks") == 0
        assert all(task.retry_count == 0 for task in service.tasks("pulls"))
    assert report.dry is not None and report.dry.listed
    assert (report.dry.tasks, report.dry.available, report.dry.future_eta) == (13, 12, 1)
    assert report.dry.by_tag == {"(untagged)": 7, "a": 6}
    assert report.dry.payload_bytes == 12 * 10 + 5


def test_cloud_tasks_outages_are_retried_and_nothing_is_lost(tmp_path: Path) -> None:
    with cloudtasks_service(queues=["pulls"]) as service:
        for i in range(40):
            service.seed("pulls", b"x", name=f"t{i}")
        service.clock.advance(1)  # type: ignore[attr-defined]
        service.fail("LeaseTasks", 503, times=7)
        service.fail("AcknowledgeTask", 503, times=3)
        source_backend = service.backend()
        dest_backend = MemoryBackend(clock=service.clock)
        try:
            report = drain(
                Queue("pulls", source_backend),
                Queue("pulls", dest_backend),
                journal=tmp_path / "journal",
                **FAST,
            )
        finally:
            source_backend.close()
        left = service.tasks("pulls")
    assert report.ok, report.render()
    assert left == [] and len(list(dest_backend.list_tasks("pulls"))) == 40


def test_a_future_eta_reaches_pubsub_in_the_eta_attribute(
    project: str, subscriber: SubscriberClient
) -> None:
    source = Queue("later", MemoryBackend())
    eta = time.time() + 3600
    source.add(
        [
            Task(b"later", name="later", eta=dt.datetime.fromtimestamp(eta, tz=dt.timezone.utc)),
            Task(name="now"),
        ]
    )
    dest_backend = PubSubBackend(
        project, settings=Settings(), auto_create=True, names=MemoryNameRegistry()
    )
    try:
        report = drain(source, Queue("later", dest_backend), **FAST)
    finally:
        dest_backend.close()
    assert report.ok and (report.leased, report.listed) == (1, 1)
    arrived = pull_all(subscriber, f"projects/{project}/subscriptions/later-workers")
    assert set(arrived) == {"later", "now"}
    assert parse_eta(arrived["later"].attributes["eta"]) == pytest.approx(eta, abs=1e-3)
    assert "eta" not in arrived["now"].attributes  # due at once


def test_a_missing_legacy_queue_fails_the_preflight() -> None:
    with cloudtasks_service(queues=["pulls"]) as service:
        source_backend = service.backend()
        try:
            with pytest.raises(UnknownQueueError, match="preflight on the source"):
                drain(Queue("nosuch", source_backend), Queue("pulls", MemoryBackend()), **FAST)
        finally:
            source_backend.close()
        assert service.rpc_count("LeaseTasks") == 0
