"""A Pub/Sub queue's pause: a marker topic `<queue topic>.paused`, whose existence pauses it.

Every worker process looks for the marker at most once per PULLQUEUE_PUBSUB_PAUSE_CHECK seconds
per queue (one topics.get), and only while it leases, so a pause reaches them all within that
period plus one lease call and an idle process costs nothing (docs/pubsub.md, "Pausing a queue").
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from google.api_core import exceptions as gexc

from pullqueue.adapters.pubsub.rpc import PubSubRpc
from pullqueue.errors import Error, PermissionDeniedError
from pullqueue.task import Task

log = logging.getLogger(__name__)

PAUSED_TOPIC_FORMAT = "{topic}.paused"
"""The marker topic of a paused queue (wire format), next to its queue topic: it exists while the
queue is paused. A '.' can never be in a queue name, so no queue's topic is another's marker."""
LABEL_PAUSED = "pullqueue-paused"
"""Label of the marker topic: the pause's time, whole POSIX seconds in decimal."""


LOOK_BUDGET = 2.0
"""Seconds a look for the marker may take, retries included: a lease waits for it, so an
unreachable Pub/Sub costs the lease this much before its own calls fail as they would have."""


def marker_topic(queue_topic: str) -> str:
    """The path of the marker topic of the queue whose topic is `queue_topic` (a path)."""
    return PAUSED_TOPIC_FORMAT.format(topic=queue_topic)


@dataclass
class _Known:
    since: float | None
    read_at: float


def paused_label(labels: dict[str, str] | None) -> float | None:
    """When a marker topic (its labels; None: no marker) says its queue was paused: None when
    running; 0.0 for a marker without a readable time (a hand-made marker still pauses)."""
    if labels is None:
        return None
    text = labels.get(LABEL_PAUSED, "")
    return float(text) if text.isascii() and text.isdigit() and len(text) <= 12 else 0.0


class PauseMarks:
    """Each queue's pause as its marker topic says, looked for again once `ttl` seconds old.
    `topic_of(queue)` is the path of the queue's topic."""

    def __init__(
        self,
        rpc: PubSubRpc,
        topic_of: Callable[[str], str],
        ttl: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rpc = rpc
        self.topic_of = topic_of
        self.ttl = ttl
        self.clock = clock
        self.reads = 0
        """topics.get calls made to look for markers (tests and benchmarks/pause_cost.py)."""
        self._known: dict[str, _Known] = {}
        self._lock = threading.Lock()
        self._reading: set[str] = set()

    def paused_since(self, queue: str, *, fresh: bool = False) -> float | None:
        """The queue's pause (POSIX seconds) or None, from a copy at most `ttl` old. One thread
        reads the label when the copy is stale; the others use the stale copy meanwhile."""
        known = self._known.get(queue)
        now = self.clock()
        if not fresh and known is not None and now - known.read_at < self.ttl:
            return known.since
        with self._lock:
            if queue in self._reading and known is not None and not fresh:
                return known.since
            self._reading.add(queue)
        try:
            return self._read(queue, known)
        finally:
            with self._lock:
                self._reading.discard(queue)

    def _read(self, queue: str, known: _Known | None) -> float | None:
        topic = marker_topic(self.topic_of(queue))
        try:
            labels = self._labels(topic, queue)
        except Error as exc:
            # A lease must not fail because the label could not be read: keep the last copy
            # (running if none) and try again after another ttl.
            since = known.since if known is not None else None
            log.warning(
                "cannot look for the pause marker topic %s (%s); treating queue %r as %s"
                " until the next look",
                topic,
                exc,
                queue,
                "paused" if since is not None else "running",
            )
            self._known[queue] = _Known(since, self.clock())
            return since
        since = paused_label(labels)
        self._known[queue] = _Known(since, self.clock())
        return since

    def _labels(self, topic: str, queue: str) -> dict[str, str] | None:
        """The marker topic's labels, None when there is no marker."""

        def get(timeout: float) -> dict[str, str] | None:
            try:
                found = self.rpc.publisher.get_topic(
                    request={"topic": topic}, retry=None, timeout=timeout
                )
            except gexc.NotFound:
                return None
            return dict(found.labels)

        self.reads += 1
        try:
            return self.rpc.call(get, queue=queue, resource=topic, budget=LOOK_BUDGET)
        except PermissionDeniedError as exc:
            raise PermissionDeniedError(
                f"cannot look for Pub/Sub topic {topic} to see whether the queue is paused:"
                " grant roles/pubsub.viewer on the project's topics",
                queue=queue,
            ) from exc

    def set(self, queue: str, paused: bool, now: float) -> None:
        """Create (pause) or delete (resume) the marker topic; this process sees the change at
        once, others within `ttl`. Creating an existing marker or deleting a missing one changes
        nothing, so two operators at once agree."""
        topic = marker_topic(self.topic_of(queue))

        def change(timeout: float) -> None:
            if paused:
                with contextlib.suppress(gexc.AlreadyExists):
                    self.rpc.publisher.create_topic(
                        request={"name": topic, "labels": {LABEL_PAUSED: str(int(now))}},
                        retry=None,
                        timeout=timeout,
                    )
            else:
                with contextlib.suppress(gexc.NotFound):
                    self.rpc.publisher.delete_topic(
                        request={"topic": topic}, retry=None, timeout=timeout
                    )

        try:
            self.rpc.call(change, queue=queue, resource=topic)
        except PermissionDeniedError as exc:
            raise PermissionDeniedError(
                f"cannot {'create' if paused else 'delete'} Pub/Sub topic {topic}: pausing and"
                " resuming a queue needs pubsub.topics.create and pubsub.topics.delete"
                " (roles/pubsub.editor)",
                queue=queue,
            ) from exc
        self.paused_since(queue, fresh=True)


def paused_lease(deadline: float, pull_wait: float) -> list[Task]:
    """What a lease of a paused queue answers: [] after the wait an empty subscription's pull
    takes (at most the deadline), so a worker that does not back off costs no busy loop."""
    time.sleep(max(min(pull_wait, deadline), 0.0))
    return []
