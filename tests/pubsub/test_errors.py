"""Failures on Pub/Sub as a worker sees them: typed, naming queue and resource, saying what next.

An unreachable server is a TransientError (back off), a missing topic or subscription is a
NotProvisionedError pointing at the Terraform module, a subscription that contradicts the
layout is a ConfigurationError, and nothing is swallowed.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from google.api_core import exceptions as gexc

from pullqueue import (
    ConfigurationError,
    DeadlineExceededError,
    InternalError,
    NotProvisionedError,
    PermissionDeniedError,
    Queue,
    Settings,
    Task,
    TransientError,
    UnknownQueueError,
    connect,
)
from pullqueue.adapters.pubsub import PubSubBackend
from pullqueue.adapters.pubsub.errors import translate
from tests.pubsub.conftest import MakeBackend
from tests.support.emulators import free_port

pytestmark = pytest.mark.unchecked_names  # names are labels here; no registry


def test_an_unreachable_server_is_a_transient_error(
    monkeypatch: pytest.MonkeyPatch, project: str
) -> None:
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", f"127.0.0.1:{free_port()}")
    backend = PubSubBackend(project, settings=Settings(pubsub_rpc_timeout=1.0), auto_create=True)
    try:
        queue = Queue("down", backend)
        start = time.monotonic()
        with pytest.raises(TransientError) as raised:
            queue.add(Task(b"x"))
        assert time.monotonic() - start < 5
        assert raised.value.queue == "down" and "back off and retry" in str(raised.value)
        with pytest.raises(TransientError):
            queue.lease(60, 10, deadline=1)
    finally:
        backend.close()


def test_a_server_that_goes_away_mid_lease_is_a_transient_error(
    make_backend: MakeBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = make_backend(pubsub_rpc_timeout=1.0)
    queue = Queue("flaky", backend)
    queue.add(Task(b"x", name="survivor"))
    # Point the same backend's clients at a dead port, as if the server had died.
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", f"127.0.0.1:{free_port()}")
    healthy = backend.rpc
    backend.rpc = type(healthy)(backend.project, 1.0)
    try:
        with pytest.raises(TransientError) as raised:
            queue.lease(60, 10, deadline=1)
        assert "/subscriptions/flaky-" in str(raised.value)  # names the subscription
    finally:
        backend.rpc.close()
        backend.rpc = healthy
    monkeypatch.undo()
    (task,) = queue.lease(60, 10)
    assert task.name == "survivor"


def test_an_unprovisioned_queue_points_at_terraform(make_backend: MakeBackend) -> None:
    queue = Queue("absent", make_backend(auto_create=False))
    with pytest.raises(NotProvisionedError) as raised:
        queue.add(Task(b"x"))
    message = str(raised.value)
    assert isinstance(raised.value, UnknownQueueError)
    # The queue topic is read first (its shard-count label), so it is what is named missing.
    assert "topics/absent does not exist" in message
    assert "terraform/modules/pullqueue" in message and "pullqueue plan" in message
    assert "PULLQUEUE_AUTO_CREATE" in message
    with pytest.raises(NotProvisionedError):
        queue.lease(60, 10)


def test_a_missing_subscription_points_at_terraform(
    make_backend: MakeBackend, raw: tuple[object, object], project: str
) -> None:
    publisher, _ = raw
    # The queue topic exists (no shard label: 16 shards), its subscriptions do not.
    publisher.create_topic(name=f"projects/{project}/topics/halfway")  # type: ignore[attr-defined]
    with pytest.raises(NotProvisionedError) as raised:
        Queue("halfway", make_backend(auto_create=False)).add(Task(b"x"))
    message = str(raised.value)
    assert "halfway-workers" in message and "does not exist" in message
    assert "terraform/modules/pullqueue" in message and "PULLQUEUE_AUTO_CREATE" in message


def test_a_missing_topic_points_at_terraform(
    make_backend: MakeBackend, raw: tuple[object, object]
) -> None:
    publisher, _ = raw
    backend = make_backend()
    queue = Queue("orphan", backend)
    queue.add(Task(b"x"))
    publisher.delete_topic(request={"topic": backend.topology("orphan").topic})  # type: ignore[attr-defined]
    with pytest.raises(NotProvisionedError) as raised:
        queue.add(Task(b"y"))
    assert "topic projects/" in str(raised.value) and "/topics/orphan " in str(raised.value)


def test_declared_tags_that_contradict_the_subscriptions_are_refused(
    make_backend: MakeBackend,
) -> None:
    Queue("tagged", make_backend(pubsub_declared_tags={"tagged": ["a"]})).add(Task(b"x"))
    changed = make_backend(auto_create=False, pubsub_declared_tags={"tagged": ["a", "b"]})
    with pytest.raises(ConfigurationError) as raised:
        Queue("tagged", changed).lease(60, 10)
    message = str(raised.value)
    assert "tagged-workers" in message and "filter" in message
    assert "declared: a, b" in message and "terraform/modules/pullqueue" in message


def test_a_subscription_without_exactly_once_delivery_is_refused(
    make_backend: MakeBackend, project: str, raw: tuple[object, object]
) -> None:
    publisher, subscriber = raw
    topic = f"projects/{project}/topics/loose"
    publisher.create_topic(request={"name": topic})  # type: ignore[attr-defined]
    subscriber.create_subscription(  # type: ignore[attr-defined]
        request={"name": f"projects/{project}/subscriptions/loose-workers", "topic": topic}
    )
    with pytest.raises(ConfigurationError) as raised:
        Queue("loose", make_backend(auto_create=False)).add(Task(b"x"))
    assert "exactly-once delivery is off" in str(raised.value)
    assert "dead-letter policy" in str(raised.value)


def test_queue_names_pubsub_cannot_use_need_a_prefix(make_backend: MakeBackend) -> None:
    with pytest.raises(ConfigurationError) as raised:
        Queue("q1", make_backend()).add(Task(b"x"))
    assert "PULLQUEUE_PUBSUB_PREFIX" in str(raised.value)
    prefixed = Queue("q1", make_backend(pubsub_prefix="pq-"))
    prefixed.add(Task(b"x", name="ok"))
    assert [t.name for t in prefixed.lease(60, 10)] == ["ok"]


def test_bad_urls_and_settings_are_configuration_errors() -> None:
    with pytest.raises(ConfigurationError):
        connect("pubsub://")
    with pytest.raises(ConfigurationError):
        connect("pubsub://project/extra/path")
    with pytest.raises(ConfigurationError) as raised:
        PubSubBackend("p", settings=Settings(pubsub_keeper_period=30, pubsub_lease_window=60))
    assert "PULLQUEUE_PUBSUB_LEASE_WINDOW" in str(raised.value)


@pytest.mark.parametrize(
    ("google_error", "expected"),
    [
        (gexc.ServiceUnavailable("down"), TransientError),
        (gexc.DeadlineExceeded("slow"), DeadlineExceededError),
        (gexc.ResourceExhausted("quota"), TransientError),
        (gexc.PermissionDenied("no"), PermissionDeniedError),
        (gexc.Unauthenticated("who"), PermissionDeniedError),
        (gexc.NotFound("gone"), NotProvisionedError),
        (gexc.InvalidArgument("bad"), InternalError),
    ],
)
def test_status_codes_map_to_typed_errors(
    google_error: Exception, expected: type[Exception]
) -> None:
    error = translate(google_error, queue="jobs", resource="projects/p/subscriptions/jobs-workers")
    assert type(error) is expected
    assert error.queue == "jobs" and "projects/p/subscriptions/jobs-workers" in str(error)


def test_missing_credentials_say_how_to_provide_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("PUBSUB_EMULATOR_HOST", raising=False)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))  # no gcloud login to fall back on
    monkeypatch.setenv("NO_GCE_CHECK", "True")  # not on GCP: no metadata server
    with pytest.raises(ConfigurationError, match="application-default login"):
        connect("pubsub://some-project")
