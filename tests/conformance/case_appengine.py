"""The appengine:// adapter in the conformance suite, on the testbed's taskqueue stub.

The stub is Google's own implementation of the legacy queue, driven through the bundled
`google.appengine.api.taskqueue` API exactly as an app inside App Engine would, on a manual clock.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from pullqueue import Queue
from tests.conformance.harness import BackendCase, Harness
from tests.support.appengine_testbed import AppEngineTestbed, appengine_testbed


@dataclass
class AppEngineHarness(Harness):
    """A harness whose new queues are declared in the testbed's queue.yaml first."""

    bed: AppEngineTestbed | None = None

    def new_queue(self) -> Queue:
        queue = super().new_queue()
        assert self.bed is not None
        self.bed.declare_queue(queue.name)
        return queue


@contextmanager
def _open() -> Iterator[Harness]:
    with appengine_testbed() as bed:
        yield AppEngineHarness(
            backend=bed.backend(),
            advance=bed.clock.advance,
            short_lease=1.0,
            prefix="ae",
            bed=bed,
        )


CASE = BackendCase(
    name="appengine",
    open=_open,
    differs={
        "full_mib_payload": "the SDK and service count method, headers and request overhead"
        " against the 1 MiB task size, so an exactly 1 MiB payload is refused (tests/appengine)",
        "stats_exact": "fetch_statistics counts are the service's estimates in production"
        " (QueueStats.approximate); tests/appengine checks the counts the stub reports",
        "stats_leased": "fetch_statistics does not report how many tasks are leased",
        "executed_last_minute": "the testbed stub answers a random number; production reports"
        " the service's own count",
        "retry_limit": "the bundled API sends no retry options with pull tasks; the queue's"
        " task_retry_limit in queue.yaml applies (tested in tests/appengine)",
        "pause": "the legacy queue is paused in its own console; pullqueue refuses with"
        " PauseNotSupportedError (tests/conformance/test_pause.py)",
    },
)
