"""The cloudtasks:// adapter in the conformance suite, through the real client over REST.

The queues live in the App Engine SDK's taskqueue stub behind a fake Cloud Tasks v2beta2 service
(tests/support/cloudtasks_fake.py) on a manual clock; lease calls are paced under the service's
real-time quota of 10 per queue per second, as in production.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from pullqueue import Queue
from tests.conformance.harness import BackendCase, Harness
from tests.support.cloudtasks_fake import CloudTasksModel, ManualClock, cloudtasks_service


@dataclass
class CloudTasksHarness(Harness):
    """A harness whose new queues are declared as pull queues on the fake service first."""

    service: CloudTasksModel | None = None

    def new_queue(self) -> Queue:
        queue = super().new_queue()
        assert self.service is not None
        self.service.create_queue(queue.name)
        return queue


@contextmanager
def _open() -> Iterator[Harness]:
    clock = ManualClock()
    with cloudtasks_service(clock=clock) as service:
        backend = service.backend()
        try:
            yield CloudTasksHarness(
                backend=backend,
                advance=clock.advance,
                short_lease=1.0,
                prefix="ct",
                service=service,
            )
        finally:
            backend.close()


CASE = BackendCase(
    name="cloudtasks",
    open=_open,
    differs={
        "full_mib_payload": "the service counts the request's overhead against the 1 MiB task"
        " size, so an exactly 1 MiB payload is refused (tests/cloudtasks)",
        "stats_exact": "GetQueue's stats are the service's estimates (QueueStats.approximate);"
        " tests/cloudtasks checks the counts the fake reports",
        "stats_leased": "Cloud Tasks does not report how many tasks are leased (leased is None)",
        "executed_last_minute": "the value is the service's executed_last_minute_count, which"
        " Google does not define for pull queues; tests/cloudtasks checks it is passed through",
        "retry_limit": "v2beta2 tasks carry no retry limit; the queue's retry_config.max_attempts"
        " (queue.yaml task_retry_limit) applies",
        "pause": "the legacy queue is paused in its own console; pullqueue refuses with"
        " PauseNotSupportedError (tests/conformance/test_pause.py, tests/cloudtasks/test_pause.py)",
    },
)
