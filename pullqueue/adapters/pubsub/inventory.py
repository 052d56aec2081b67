"""Which pull queues a Pub/Sub project holds: those whose worker subscription pullqueue (or its
Terraform module) provisioned on the queue's topic.

Pub/Sub knows topics and subscriptions, not queues; the layout's naming rule (docs/pubsub.md)
makes `<prefix><queue>-workers` on topic `<prefix><queue>` the mark of a queue, so the console
lists exactly the queues a worker could lease from, and nothing else in the project.
"""

from __future__ import annotations

from pullqueue.adapters.pubsub.layout import WORKER_SUBSCRIPTION_FORMAT
from pullqueue.adapters.pubsub.rpc import PubSubRpc

_SUFFIX = WORKER_SUBSCRIPTION_FORMAT.removeprefix("{prefix}{queue}")


def provisioned_queues(rpc: PubSubRpc, prefix: str) -> list[str]:
    """The names of the queues provisioned in rpc's project under the resource-name `prefix`
    (PULLQUEUE_PUBSUB_PREFIX), sorted."""
    project = f"projects/{rpc.project}"

    def listing(timeout: float) -> list[tuple[str, str]]:
        pages = rpc.subscriber.list_subscriptions(request={"project": project}, timeout=timeout)
        return [(sub.name, sub.topic) for sub in pages]

    found: set[str] = set()
    for name, topic in rpc.call(listing, queue="*", resource=project):
        sub_id = name.rsplit("/", 1)[-1]
        if not sub_id.startswith(prefix) or not sub_id.endswith(_SUFFIX):
            continue
        queue = sub_id[len(prefix) : -len(_SUFFIX)]
        if queue and topic == rpc.topic_path(f"{prefix}{queue}"):
            found.add(queue)
    return sorted(found)
