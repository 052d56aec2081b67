"""Google's App Engine SDK taskqueue stub, in-process on a fake clock: the legacy oracle.

`legacy_taskqueue()` activates a testbed with the stub reading a queue.yaml of pull queues, and
points both the stub and the SDK client (which stamps ETAs with `time.time()`) at the same clock,
so `google.appengine.api.taskqueue` can be driven side by side with pullqueue.
"""

from __future__ import annotations

import time
import types
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def write_queue_yaml(root: Path, queues: Mapping[str, int | None]) -> None:
    """A queue.yaml declaring each queue in pull mode, with its task_retry_limit if not None."""
    lines = ["queue:"]
    for name, retry_limit in queues.items():
        lines += [f"- name: {name}", "  mode: pull"]
        if retry_limit is not None:
            lines += ["  retry_parameters:", f"    task_retry_limit: {retry_limit}"]
    (root / "queue.yaml").write_text("\n".join(lines) + "\n")


@contextmanager
def legacy_taskqueue(
    clock: Callable[[], float], root: Path, queues: Mapping[str, int | None]
) -> Iterator[Any]:
    """The SDK's `taskqueue` module, served by the stub on `clock`, for the queues given.

    `queues` maps pull-queue names to their task_retry_limit (None for no limit).
    """
    from google.appengine.api import taskqueue
    from google.appengine.api.taskqueue import taskqueue as client
    from google.appengine.ext import testbed

    write_queue_yaml(root, queues)
    bed = testbed.Testbed()
    bed.activate()
    saved_time = client.time
    try:
        bed.init_taskqueue_stub(root_path=str(root), gettime=clock)
        client.time = types.SimpleNamespace(time=clock, mktime=time.mktime)
        yield taskqueue
    finally:
        client.time = saved_time
        bed.deactivate()
