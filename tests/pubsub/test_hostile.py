"""Messages from a foreign publisher with hostile attributes: leasing goes on, nothing crashes.

Published raw with Google's client to the queue topic, as a service in another language or a
careless script would. Each hostile message is served with the bad attribute ignored, or set
aside on the dead-letter topic; every log line names its message id and carries no control
character; the ordinary tasks around it are served as usual.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from google.pubsub_v1 import PublisherClient, SubscriberClient
from google.pubsub_v1.types import pubsub as pubsub_types

from pullqueue import Queue, Task
from pullqueue.adapters.pubsub import PubSubBackend
from pullqueue.adapters.pubsub.wire import ATTR_SET_ASIDE, PubsubMessagePb, decode
from pullqueue.compat import taskqueue
from tests.pubsub.conftest import MakeBackend, raw_pull

pytestmark = pytest.mark.unchecked_names  # names are labels here; no registry

HOSTILE: dict[str, dict[str, str]] = {
    "retry_limit superscript two": {"retry_limit": "\u00b2"},
    "retry_limit of 5000 digits": {"retry_limit": "9" * 5000},
    "retry_limit negative": {"retry_limit": "-1"},
    "eta garbage": {"eta": "garbage"},
    "task_name with ESC and a newline": {"task_name": "job\x1b[31m\nevent=forged level=error"},
    "task_name of 600 characters": {"task_name": "n" * 600},
}
"""Served: the bad attribute is ignored (the name replaced by pubsub-MESSAGE_ID)."""

SET_ASIDE = {
    "tag of 600 bytes": {"tag": "t" * 600},
    "tag of 501 bytes": {"tag": "\u00e9" * 250 + "x"},
}
"""Not served: moved to the dead-letter topic with the reason."""

ReceivedMessagePb = pubsub_types.ReceivedMessage.pb()

Lease = Callable[[PubSubBackend, str], list[tuple[str, str | None, bytes]]]


def lease_with_queue(backend: PubSubBackend, name: str) -> list[tuple[str, str | None, bytes]]:
    queue = Queue(name, backend)
    tasks = queue.lease(60, 100)
    queue.delete(tasks)
    return [(t.name or "", t.tag, t.payload) for t in tasks]


def lease_with_compat(backend: PubSubBackend, name: str) -> list[tuple[str, str | None, bytes]]:
    queue = taskqueue.Queue(name, backend=backend)
    tasks = queue.lease_tasks(60, 100)
    queue.delete_tasks(tasks)
    return [(t.name, t.tag, t.payload) for t in tasks]


def lease_with_compat_by_tag(
    backend: PubSubBackend, name: str
) -> list[tuple[str, str | None, bytes]]:
    queue = taskqueue.Queue(name, backend=backend)
    tasks = queue.lease_tasks_by_tag(60, 100)
    queue.delete_tasks(tasks)
    return [(t.name, t.tag, t.payload) for t in tasks]


LEASES: dict[str, Lease] = {
    "Queue.lease": lease_with_queue,
    "compat lease_tasks": lease_with_compat,
    "compat lease_tasks_by_tag": lease_with_compat_by_tag,
}


def publish(publisher: PublisherClient, topic: str, data: bytes, attributes: dict[str, str]) -> str:
    response = publisher.publish(topic=topic, messages=[{"data": data, "attributes": attributes}])
    return str(response.message_ids[0])


def log_text(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(record.getMessage() for record in caplog.records)


def assert_no_control_characters(text: str) -> None:
    lines = text.split("\n")
    assert not [line for line in lines if any(ord(c) < 32 or ord(c) == 127 for c in line)]


@pytest.mark.parametrize("how", list(LEASES))
@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_attribute_is_ignored_and_the_task_served(
    case: str,
    how: str,
    make_backend: MakeBackend,
    raw: tuple[PublisherClient, SubscriberClient],
    caplog: pytest.LogCaptureFixture,
) -> None:
    backend = make_backend()
    queue = Queue("hostile", backend)
    queue.add([Task(b"before", name="before")])
    message_id = publish(raw[0], backend.topology("hostile").topic, b"foreign", HOSTILE[case])
    queue.add([Task(b"after", name="after")])

    with caplog.at_level(logging.WARNING, logger="pullqueue"):
        served = LEASES[how](backend, "hostile")

    assert sorted(payload for _, _, payload in served) == [b"after", b"before", b"foreign"]
    (foreign,) = [name for name, _, payload in served if payload == b"foreign"]
    if "task_name" in HOSTILE[case]:
        assert foreign == f"pubsub-{message_id}"
    else:
        assert foreign == HOSTILE[case].get("task_name", f"pubsub-{message_id}")
    logged = log_text(caplog)
    assert "event=foreign_attribute_ignored" in logged
    assert f"message_id={message_id} " in logged
    assert_no_control_characters(logged)
    # Deleted: nothing comes back, and a retry_limit ignored did not expire the task unserved.
    assert Queue("hostile", backend).lease(60, 100) == []


@pytest.mark.parametrize("how", list(LEASES))
@pytest.mark.parametrize("case", list(SET_ASIDE))
def test_an_unservable_message_is_set_aside_on_the_dead_letter_topic(
    case: str,
    how: str,
    make_backend: MakeBackend,
    raw: tuple[PublisherClient, SubscriberClient],
    caplog: pytest.LogCaptureFixture,
) -> None:
    backend = make_backend()
    queue = Queue("hostile", backend)
    queue.add([Task(b"before", name="before")])
    topology = backend.topology("hostile")
    message_id = publish(raw[0], topology.topic, b"foreign", SET_ASIDE[case])
    queue.add([Task(b"after", name="after")])

    with caplog.at_level(logging.WARNING, logger="pullqueue"):
        served = LEASES[how](backend, "hostile")
        served += LEASES[how](backend, "hostile")

    assert sorted(payload for _, _, payload in served) == [b"after", b"before"]
    logged = log_text(caplog)
    assert f"event=set_aside queue=hostile message_id={message_id} " in logged
    assert_no_control_characters(logged)
    dead = backend.rpc.subscription_path(topology.layout.dead_letter_subscription_id)
    (moved,) = raw_pull(raw[1], dead)
    assert moved.message.data == b"foreign"
    assert moved.message.attributes["tag"] == SET_ASIDE[case]["tag"]
    assert "limit" in moved.message.attributes[ATTR_SET_ASIDE]
    assert Queue("hostile", backend).lease(60, 100) == []


def received(attributes: dict[str, str]) -> Any:
    message = PubsubMessagePb(data=b"x", attributes=attributes, message_id="77")
    return ReceivedMessagePb(ack_id="ack", message=message, delivery_attempt=1)


@pytest.mark.parametrize(
    ("text", "limit"), [("0", 0), ("7", 7), ("2147483647", 2147483647), ("2147483648", None)]
)
def test_a_whole_number_retry_limit_is_read_and_only_that(text: str, limit: int | None) -> None:
    delivery = decode("sub", received({"retry_limit": text}), 0.0)
    assert delivery.retry_limit == limit
    assert bool(delivery.ignored) is (limit is None)


def test_valid_foreign_names_and_tags_are_kept() -> None:
    name = "a-valid_name-" + "9" * 487
    delivery = decode("sub", received({"task_name": name, "tag": "\u00e9" * 250}), 0.0)
    assert (delivery.name, delivery.tag) == (name, "\u00e9" * 250)
    assert (delivery.ignored, delivery.set_aside) == ((), None)
    trailing = decode("sub", received({"task_name": "job-1\n"}), 0.0)
    assert trailing.name == "pubsub-77"
