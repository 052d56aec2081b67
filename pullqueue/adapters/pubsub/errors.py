"""Pub/Sub RPC failures as pullqueue's typed errors, and exactly-once per-ack-id outcomes.

Workers back off on TransientError and stop on configuration or permission errors, so every
status code is mapped once, here, with the queue, the resource and what to do next.
"""

from __future__ import annotations

from collections.abc import Mapping

from google.api_core import exceptions as gexc

from pullqueue.errors import (
    DeadlineExceededError,
    Error,
    InternalError,
    NotProvisionedError,
    PermissionDeniedError,
    TransientError,
)
from pullqueue.links import TERRAFORM_MODULE

TRANSIENT_ERRORS: tuple[type[Exception], ...] = (
    gexc.ServiceUnavailable,
    gexc.DeadlineExceeded,
    gexc.Cancelled,
    gexc.TooManyRequests,
    gexc.Aborted,
    gexc.InternalServerError,
    gexc.Unknown,
    gexc.RetryError,
)
"""UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED, RESOURCE_EXHAUSTED (429), ABORTED, INTERNAL,
UNKNOWN and an exhausted retry: the failures Google's own client retries (its publish retries
CANCELLED too), so a worker backs off and retries."""

EXACTLY_ONCE_REASON = "EXACTLY_ONCE_ACKID_FAILURE"
TRANSIENT_ACK_PREFIX = "TRANSIENT_"

PROVISION_HINT = (
    f"provision the queue with the Terraform module {TERRAFORM_MODULE}"
    " (`pullqueue plan queue.yaml --project PROJECT` prints its variables), or set"
    " PULLQUEUE_AUTO_CREATE=1 to create it (development and tests)"
)


def _kind(resource: str | None) -> str:
    if resource and "/subscriptions/" in resource:
        return "subscription"
    if resource and "/topics/" in resource:
        return "topic"
    return "resource"


def translate(
    exc: Exception, *, queue: str, resource: str | None = None, task: str | None = None
) -> Error:
    """The pullqueue error for a failed Pub/Sub call on `resource` (a topic or subscription)."""
    where = f" on {resource}" if resource else ""
    if isinstance(exc, gexc.NotFound):
        return NotProvisionedError(
            f"Pub/Sub {_kind(resource)} {resource} does not exist: {PROVISION_HINT}",
            queue=queue,
            task=task,
        )
    if isinstance(exc, gexc.PermissionDenied | gexc.Unauthenticated):
        return PermissionDeniedError(
            f"Pub/Sub refused the call{where} ({exc.message}): grant the service account"
            " roles/pubsub.publisher on the topic (producers) or roles/pubsub.subscriber on the"
            f" subscriptions (workers), as the Terraform module {TERRAFORM_MODULE} does",
            queue=queue,
            task=task,
        )
    if isinstance(exc, gexc.DeadlineExceeded):
        return DeadlineExceededError(
            f"Pub/Sub did not answer in time{where} ({exc}); back off and retry",
            queue=queue,
            task=task,
        )
    if isinstance(exc, TRANSIENT_ERRORS):
        return TransientError(
            f"Pub/Sub is unavailable or overloaded{where} ({type(exc).__name__}: {exc});"
            " back off and retry",
            queue=queue,
            task=task,
        )
    return InternalError(
        f"Pub/Sub call failed{where} ({type(exc).__name__}: {exc}); this is not expected to"
        " pass on retry: check the queue's Pub/Sub configuration",
        queue=queue,
        task=task,
    )


def exactly_once_failures(exc: gexc.GoogleAPICallError) -> Mapping[str, str] | None:
    """ack id -> failure reason when exc reports per-id exactly-once outcomes, else None.

    With exactly-once delivery an acknowledge or modifyAckDeadline answers INVALID_ARGUMENT
    with an ErrorInfo whose metadata lists only the ack ids that failed; the others succeeded.
    """
    if exc.reason != EXACTLY_ONCE_REASON:
        return None
    return dict(exc.metadata or {})
