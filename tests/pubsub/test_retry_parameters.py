"""queue.yaml's retry_parameters reach the Pub/Sub worker: plan -> subscription labels -> delay.

`pullqueue plan` writes min/max backoff and max doublings as labels of the queue's resources, the
Terraform module puts them on the subscriptions, and the adapter reads them back (or a Pub/Sub
retry policy when there are none) as the queue's RetryParameters; the worker spaces retries by
them. The subscriptions are made here as the module makes them, on the emulator.
"""

from __future__ import annotations

from typing import Any

import pytest
from google.pubsub_v1 import PublisherClient, SubscriberClient

from pullqueue.adapters.pubsub.layout import SHARDS, worker_filter
from pullqueue.plan import QueueYamlError, build_plan, read_queue_yaml
from pullqueue.retry import RetryParameters, queue_retry_parameters
from tests.pubsub.conftest import MakeBackend

QUEUE_YAML = """
queue:
- name: resize
  mode: pull
  retry_parameters:
    task_retry_limit: 50
    min_backoff_seconds: 2.5
    max_backoff_seconds: 120
    max_doublings: 3
"""


def _provision(raw: tuple[Any, Any], project: str, queue: str, **extra: Any) -> None:
    """The queue's topics and worker subscription, as the Terraform module creates them."""
    publisher: PublisherClient = raw[0]
    subscriber: SubscriberClient = raw[1]
    topic = publisher.topic_path(project, queue)
    dead_letter = publisher.topic_path(project, f"{queue}-dead-letter")
    for name in (topic, dead_letter):
        publisher.create_topic(request={"name": name})
    subscriber.create_subscription(
        request={
            "name": subscriber.subscription_path(project, f"{queue}-workers"),
            "topic": topic,
            "filter": worker_filter([]),
            "enable_exactly_once_delivery": True,
            "dead_letter_policy": {"dead_letter_topic": dead_letter, "max_delivery_attempts": 50},
            **extra,
        }
    )
    # The shard topics and subscriptions, and the claims subscription.
    for k in range(SHARDS):
        shard_topic = publisher.topic_path(project, f"{queue}-shard-{k}")
        publisher.create_topic(request={"name": shard_topic})
        subscriber.create_subscription(
            request={
                "name": subscriber.subscription_path(project, f"{queue}-shard-{k}"),
                "topic": shard_topic,
                "enable_exactly_once_delivery": True,
                "dead_letter_policy": {
                    "dead_letter_topic": dead_letter,
                    "max_delivery_attempts": 50,
                },
                **extra,
            }
        )
    claims = publisher.topic_path(project, f"{queue}-claims")
    publisher.create_topic(request={"name": claims})
    subscriber.create_subscription(
        request={
            "name": subscriber.subscription_path(project, f"{queue}-claims"),
            "topic": claims,
            "enable_exactly_once_delivery": True,
        }
    )


def test_plan_labels_come_back_as_the_queue_retry_parameters(
    make_backend: MakeBackend, raw: tuple[Any, Any], project: str
) -> None:
    plan = build_plan(read_queue_yaml(QUEUE_YAML), project="my-project")
    labels = plan.variables["queues"]["resize"]["labels"]
    assert labels == {
        "pullqueue-min-backoff-ms": "2500",
        "pullqueue-max-backoff-ms": "120000",
        "pullqueue-max-doublings": "3",
    }
    _provision(raw, project, "resize", labels=labels)
    backend = make_backend(auto_create=False)
    expected = RetryParameters(2.5, 120, 3)
    assert backend.retry_parameters("resize") == expected
    assert queue_retry_parameters(backend, "resize") == expected


def test_a_pubsub_retry_policy_is_used_when_there_are_no_labels(
    make_backend: MakeBackend, raw: tuple[Any, Any], project: str
) -> None:
    policy = {"minimum_backoff": {"seconds": 5}, "maximum_backoff": {"seconds": 300}}
    _provision(raw, project, "thumbs", retry_policy=policy)
    backend = make_backend(auto_create=False)
    assert backend.retry_parameters("thumbs") == RetryParameters(5, 300)


def test_an_auto_created_queue_uses_the_defaults(make_backend: MakeBackend) -> None:
    backend = make_backend()
    assert backend.retry_parameters("fresh") is None
    assert queue_retry_parameters(backend, "fresh") == RetryParameters()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("min_backoff_seconds", ".nan"),
        ("max_backoff_seconds", "-1"),
        ("max_doublings", "1.5"),
        ("min_backoff_seconds", "soon"),
        ("max_backoff_seconds", "700000"),
    ],
)
def test_plan_refuses_bad_retry_parameters_naming_the_line(field: str, value: str) -> None:
    text = f"queue:\n- name: resize\n  mode: pull\n  retry_parameters:\n    {field}: {value}\n"
    with pytest.raises(QueueYamlError, match=r"line \d+: queue 'resize'") as raised:
        build_plan(read_queue_yaml(text), project="my-project")
    assert field in str(raised.value)


def test_plan_defaults_the_missing_retry_fields_around_the_given_ones() -> None:
    text = "queue:\n- name: slow\n  mode: pull\n  retry_parameters:\n    min_backoff_seconds: 900\n"
    plan = build_plan(read_queue_yaml(text), project="my-project")
    assert plan.variables["queues"]["slow"]["labels"] == {"pullqueue-min-backoff-ms": "900000"}
    assert RetryParameters.given(min_backoff_seconds=900) == RetryParameters(900, 900, 16)
