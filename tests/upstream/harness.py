"""What the ported SDK tests run on: the SDK on its testbed stub, or pullqueue on memory://.

`taskqueue_port.py` keeps upstream's test bodies; this module gives them the module under test,
a TestCase that runs each test in a fresh queue of its implementation, and the few stand-ins for
upstream's mocks (README.md in this folder lists each one).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import types
import unittest
import unittest.mock
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

IMPLEMENTATIONS = ("sdk", "pullqueue")

# Queues the ported tests name; on the SDK's stub each is a pull queue in queue.yaml.
_QUEUES = ("default", "backlog", "jobs", "meepa", "Aqueue")


def module(implementation: str) -> types.ModuleType:
    """The taskqueue module under test: the SDK's own, or pullqueue's drop-in."""
    if implementation == "sdk":
        from google.appengine.api.taskqueue import taskqueue as sdk

        return sdk
    from pullqueue.compat import taskqueue as compat

    return compat


@contextlib.contextmanager
def _sdk_queues() -> Iterator[None]:
    from google.appengine.ext import testbed

    with tempfile.TemporaryDirectory(prefix="upstream-sdk-") as root:
        lines = ["queue:"] + [f"- name: {name}\n  mode: pull" for name in _QUEUES]
        (Path(root) / "queue.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
        bed = testbed.Testbed()
        bed.activate()
        try:
            bed.init_datastore_v3_stub()
            bed.init_memcache_stub()
            bed.init_taskqueue_stub(root_path=root)
            yield
        finally:
            bed.deactivate()


@contextlib.contextmanager
def _pullqueue_queues() -> Iterator[None]:
    from pullqueue.registry import reset_default_backends

    saved = os.environ.get("PULLQUEUE_URL")
    os.environ["PULLQUEUE_URL"] = "memory://"
    reset_default_backends()
    try:
        yield
    finally:
        reset_default_backends()
        if saved is None:
            del os.environ["PULLQUEUE_URL"]
        else:
            os.environ["PULLQUEUE_URL"] = saved


def absltest(implementation: str) -> types.SimpleNamespace:
    """Stands in for absl.testing.absltest: a TestCase running each test on fresh queues."""
    queues = _sdk_queues if implementation == "sdk" else _pullqueue_queues

    class TestCase(unittest.TestCase):
        def run(self, result: Any = None) -> Any:
            with queues():
                return super().run(result)

        def assertLen(self, container: Any, expected_len: int) -> None:
            self.assertEqual(len(container), expected_len)

    return types.SimpleNamespace(TestCase=TestCase)


class NoMox:
    """Stands in for mox.Mox where a ported test only replays and verifies its expectations:
    the RPC a mock expected is the SDK's wire encoding, which these tests do not check."""

    def ReplayAll(self) -> None:
        """Nothing recorded, nothing to replay."""

    def VerifyAll(self) -> None:
        """Nothing recorded, nothing to verify."""

    def ResetAll(self) -> None:
        """Nothing recorded."""

    def UnsetStubs(self) -> None:
        """Nothing stubbed."""

    @staticmethod
    def Mox() -> NoMox:
        """`mox.Mox()` as upstream's setUp calls it."""
        return NoMox()


def freeze_clock(implementation: str, now: Callable[[], float]) -> Callable[[], None]:
    """Make `time.time` read `now()`, as an app's own test stubs it (both modules take a Task's
    ETA from `time.time()`); returns the undo."""
    patcher = unittest.mock.patch("time.time", now)
    patcher.start()

    def restore() -> None:
        patcher.stop()

    return restore


def _empty_queues(implementation: str) -> None:
    """Empty every queue and forget its names: an arrangement starts from nothing (a test may
    run twice in one setUp, once per context mode of the SDK's `both_context_modes`)."""
    if implementation == "sdk":
        from google.appengine.api import apiproxy_stub_map

        stub = apiproxy_stub_map.apiproxy.GetStub("taskqueue")
        for name in _QUEUES:
            stub.FlushQueue(name)
    else:
        from pullqueue.registry import reset_default_backends

        reset_default_backends()


def arrange_delete(
    implementation: str, request: Any, populate_response: Callable[..., None]
) -> None:
    """Put in the queue what a Delete answering `populate_response` implies, so a real Delete
    answers the same: OK, a task of that name; TOMBSTONED_TASK, one added and deleted before;
    UNKNOWN_TASK, none."""
    from google.appengine.api.taskqueue import taskqueue_service_bytes_pb2 as pb

    _empty_queues(implementation)
    response = pb.TaskQueueDeleteResponse()
    populate_response("taskqueue", "Delete", request, response)
    tq = module(implementation)
    queue = tq.Queue(request.queue_name.decode())
    codes = pb.TaskQueueServiceError
    for name, result in zip(request.task_name, response.result, strict=True):
        if result == codes.UNKNOWN_TASK:
            continue
        queue.add(tq.Task(payload=b"", method="PULL", name=name.decode()))
        if result == codes.TOMBSTONED_TASK:
            queue.delete_tasks_by_name(name.decode())
        elif result != codes.OK:
            raise AssertionError(f"no arrangement for result {result}")


def set_lease_fields(task: Any, *, queue_name: str, eta_posix: float) -> None:
    """Set a task's queue and ETA as upstream does through the SDK's private fields."""
    if hasattr(task, "_Task__eta_posix"):
        task._Task__queue_name = queue_name
        task._Task__eta_posix = eta_posix
    else:
        task.queue_name = queue_name
        task.eta_posix = eta_posix


def arrange_add(implementation: str, request: Any, populate_response: Callable[..., None]) -> None:
    """Put in the queues what a BulkAdd answering `populate_response` implies, so a real BulkAdd
    answers the same: OK (with no canned chosen name), nothing; TASK_ALREADY_EXISTS, a task of
    that name; TOMBSTONED_TASK, one added and deleted before."""
    from google.appengine.api.taskqueue import taskqueue_service_bytes_pb2 as pb

    _empty_queues(implementation)
    response = pb.TaskQueueBulkAddResponse()
    populate_response("taskqueue", "BulkAdd", request, response)
    tq = module(implementation)
    codes = pb.TaskQueueServiceError
    for add, result in zip(request.add_request, response.taskresult, strict=True):
        if result.result == codes.OK and not result.HasField("chosen_task_name"):
            continue
        queue, name = tq.Queue(add.queue_name.decode()), add.task_name.decode()
        if result.result not in (codes.TASK_ALREADY_EXISTS, codes.TOMBSTONED_TASK) or not name:
            raise AssertionError(f"no arrangement for {result}")
        queue.add(tq.Task(payload=b"", method="PULL", name=name))
        if result.result == codes.TOMBSTONED_TASK:
            queue.delete_tasks_by_name(name)
