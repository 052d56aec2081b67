"""An App Engine testbed whose taskqueue stub serves the pull queues a test declares, on a clock.

The stub is Google's own legacy implementation (the oracle); the appengine:// adapter, the
conformance suite and migration tests drive it through the bundled API exactly as an app would,
and read back every task it holds.

    with appengine_testbed(["pulls"]) as bed:
        bed.seed("pulls", b"later", name="t1", countdown=3600)
        backend = bed.backend()              # pullqueue's appengine:// adapter on this testbed
        bed.clock.advance(3601)
        assert [t.name for t in bed.tasks("pulls")] == ["t1"]

The SDK client refuses ETAs more than 30 days past the real time, so keep the clock within that.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.appengine.api import apiproxy_stub_map, taskqueue
from google.appengine.api.taskqueue import taskqueue_service_bytes_pb2 as tq
from google.appengine.ext import testbed

from pullqueue.adapters.appengine import AppEngineBackend


class ManualClock:
    """A clock a test moves by hand; it starts at the current whole second."""

    def __init__(self, start: float | None = None) -> None:
        self.now = float(int(time.time())) if start is None else float(start)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock forward by seconds."""
        self.now += seconds


@dataclass(frozen=True)
class ModelTask:
    """A task as the legacy service holds it; once leased its ETA is the lease expiry."""

    name: str
    payload: bytes
    tag: str | None
    eta: float
    retry_count: int


@dataclass(frozen=True)
class QueueSpec:
    """One queue.yaml entry: a pull queue (or a push queue, to test mode errors)."""

    mode: str = "pull"
    retry_limit: int | None = None


class QueueYaml:
    """The queue.yaml the stub reads; rewritten (with a fresh mtime) whenever a queue is added."""

    def __init__(self, root: Path) -> None:
        self.path = root / "queue.yaml"
        self.queues: dict[str, QueueSpec] = {}
        self._version = 0
        self.write()

    def declare(self, name: str, spec: QueueSpec) -> None:
        self.queues[name] = spec
        self.write()

    def write(self) -> None:
        lines = ["queue:"] if self.queues else ["queue: []"]
        for name, spec in sorted(self.queues.items()):
            lines.append(f"- name: {name}")
            lines.append("  mode: pull" if spec.mode == "pull" else "  rate: 5/s")
            if spec.retry_limit is not None:
                lines += ["  retry_parameters:", f"    task_retry_limit: {spec.retry_limit}"]
        self.path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        self._version += 1
        os.utime(self.path, (self._version, self._version))


def stored_tasks(rpc: Callable[[str, Any, Any], None], queue: str) -> list[ModelTask]:
    """Every task the stub holds in queue, oldest ETA first, read with its QueryTasks RPC."""
    found: list[ModelTask] = []
    start = b""
    while True:
        request = tq.TaskQueueQueryTasksRequest(
            queue_name=queue.encode(), start_task_name=start, max_rows=1001
        )
        response = tq.TaskQueueQueryTasksResponse()
        rpc("QueryTasks", request, response)
        page = list(response.task)
        found.extend(
            ModelTask(
                name=stored.task_name.decode(),
                payload=bytes(stored.body),
                tag=stored.tag.decode() if stored.HasField("tag") else None,
                eta=stored.eta_usec / 1_000_000,
                retry_count=stored.retry_count,
            )
            for stored in page[:1000]
        )
        if len(page) <= 1000:
            return sorted(found, key=lambda task: (task.eta, task.name))
        start = page[1000].task_name


@dataclass
class AppEngineTestbed:
    """An active testbed with a taskqueue stub on `clock`, and helpers to seed and inspect it."""

    testbed: testbed.Testbed
    clock: ManualClock
    queue_yaml: QueueYaml

    def backend(self) -> AppEngineBackend:
        """pullqueue's appengine:// adapter, on this testbed's clock."""
        return AppEngineBackend(clock=self.clock)

    def declare_queue(
        self, name: str, *, mode: str = "pull", retry_limit: int | None = None
    ) -> None:
        """Add a queue to queue.yaml; the stub picks it up on its next call."""
        self.queue_yaml.declare(name, QueueSpec(mode, retry_limit))

    def seed(
        self,
        queue: str,
        payload: bytes = b"",
        *,
        name: str | None = None,
        tag: str | None = None,
        eta: float | dt.datetime | None = None,
        countdown: float | None = None,
    ) -> str:
        """Add a task with the legacy taskqueue API, as a legacy producer would; return its name."""
        if isinstance(eta, dt.datetime):
            eta = eta.timestamp()
        if eta is None:
            eta = self.clock() + (countdown or 0.0)
        when = dt.datetime.fromtimestamp(eta, tz=dt.timezone.utc)
        task = taskqueue.Task(payload=payload, method="PULL", name=name, tag=tag, eta=when)
        added = taskqueue.Queue(queue).add(task)
        return str(added.name)

    def tasks(self, queue: str) -> list[ModelTask]:
        """Every task the stub holds in queue, leased or not, oldest ETA first."""
        return stored_tasks(
            lambda call, request, response: apiproxy_stub_map.MakeSyncCall(
                "taskqueue", call, request, response
            ),
            queue,
        )


def _report_chosen_names(stub: Any) -> None:
    """Make the stub answer the names it chose for unnamed tasks in a bulk add, as it means to.

    The stub matches results to requests by `id()` of protobuf element wrappers, which the upb
    protobuf runtime creates afresh on each access, so past the first task the chosen names never
    reach the response (the production service returns them). This fills them in afterwards.
    """
    bulk_add = stub._Dynamic_BulkAdd

    def with_chosen_names(request: Any, response: Any, request_id: Any = None) -> None:
        unnamed = [not add.task_name for add in request.add_request]
        bulk_add(request, response, request_id)
        results = zip(request.add_request, response.taskresult, unnamed, strict=False)
        for add, result, chosen in results:
            ok = result.result == tq.TaskQueueServiceError.OK
            if chosen and ok and not result.HasField("chosen_task_name"):
                result.chosen_task_name = add.task_name

    stub._Dynamic_BulkAdd = with_chosen_names


@contextmanager
def appengine_testbed(
    pull_queues: Sequence[str] = (), *, clock: ManualClock | None = None
) -> Iterator[AppEngineTestbed]:
    """Activate a testbed whose taskqueue stub serves `pull_queues`; deactivate it on exit."""
    with tempfile.TemporaryDirectory(prefix="appengine-testbed-") as root:
        queue_yaml = QueueYaml(Path(root))
        for name in pull_queues:
            queue_yaml.declare(name, QueueSpec())
        clock = clock or ManualClock()
        bed = testbed.Testbed()
        bed.activate()
        try:
            bed.init_taskqueue_stub(root_path=root, gettime=clock)
            _report_chosen_names(bed.get_stub("taskqueue"))
            yield AppEngineTestbed(bed, clock, queue_yaml)
        finally:
            bed.deactivate()
