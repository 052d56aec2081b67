"""Google's own unit tests of the taskqueue API, run on the SDK and on pullqueue.compat.taskqueue.

`taskqueue_port.py` (upstream's bodies) is loaded once per implementation; its TestCase classes
are collected here as `<Class>_sdk` and `<Class>_pullqueue`. A test that meets a documented
difference runs as an expected failure on pullqueue (strict: it fails if it starts to pass).
"""

from __future__ import annotations

import importlib.util
import types
import unittest
from pathlib import Path

from tests.upstream.harness import IMPLEMENTATIONS

PORT = Path(__file__).with_name("taskqueue_port.py")

# (class, test) -> the documented difference (docs/migration-guide.md) it meets on pullqueue.
DIFFERENCES = {
    ("TaskTest", "testMaxTaskSize"): (
        "push tasks are not served: Task(payload) without method is a pull task, whose limit"
        " is 1 MiB, not the 100 KiB push limit"
    ),
    ("QueueAddTest", "testTransactionalAddOutsideOfTransaction"): (
        "push tasks are not served: Task(method='GET') raises InvalidQueueModeError"
    ),
}


def _load(implementation: str) -> types.ModuleType:
    name = f"tests.upstream.taskqueue_port_{implementation}"
    spec = importlib.util.spec_from_file_location(name, PORT)
    assert spec is not None and spec.loader is not None
    port = importlib.util.module_from_spec(spec)
    port.IMPLEMENTATION = implementation  # type: ignore[attr-defined]
    spec.loader.exec_module(port)
    return port


def _collect() -> dict[str, type[unittest.TestCase]]:
    found: dict[str, type[unittest.TestCase]] = {}
    for implementation in IMPLEMENTATIONS:
        port = _load(implementation)
        for name, value in vars(port).items():
            if not (isinstance(value, type) and issubclass(value, unittest.TestCase)):
                continue
            if value.__module__ != port.__name__:
                continue
            if implementation == "pullqueue":
                for (cls, test), _reason in DIFFERENCES.items():
                    if name == cls:
                        setattr(value, test, unittest.expectedFailure(getattr(value, test)))
            if any(attr.startswith("test") for attr in dir(value)):
                found[f"{name}_{implementation}"] = value
    return found


globals().update(_collect())
