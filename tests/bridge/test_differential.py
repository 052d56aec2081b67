"""Differential: the SDK on Google's taskqueue stub against the same SDK through the bridge.

The seeded random call sequences of tests/test_differential.py (adds with names, tags, ETAs and
faults; leases, leases by tag, lease changes, deletes, purges, statistics, bad arguments, clock
ticks) run on both sides; here the second side is Google's unmodified SDK posting to a bridge
over memory:// on the same fake clock. Results and exception classes must agree call by call.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from google.appengine.api import apiproxy_stub_map
from google.appengine.runtime import default_api_stub

from pullqueue.adapters.delegating import DelegatingBackend
from pullqueue.adapters.memory import MemoryBackend
from tests.bridge.support import TICKET, running_bridge, use_ticket_in_this_thread
from tests.conformance.harness import FakeClock
from tests.legacy_stub import legacy_taskqueue
from tests.test_differential import QUEUES, Differential, Side

SEEDS = range(6)
OPS_PER_SEED = 300


class _Counting(DelegatingBackend):
    """Counts the backend calls the bridge makes."""

    def __init__(self, inner: MemoryBackend) -> None:
        super().__init__(inner)
        self.calls: Counter[str] = Counter()

    def add(self, *args: Any, **kwargs: Any) -> Any:
        self.calls["add"] += 1
        return self.inner.add(*args, **kwargs)

    def lease(self, *args: Any, **kwargs: Any) -> Any:
        self.calls["lease"] += 1
        return self.inner.lease(*args, **kwargs)


class _ThroughBridge:
    """A Queue of the SDK whose calls go to the bridge's API proxy map (the other side's calls
    go to the testbed's)."""

    def __init__(self, queue: Any, proxy: Any) -> None:
        self._queue = queue
        self._proxy = proxy

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._queue, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            saved = apiproxy_stub_map.apiproxy
            apiproxy_stub_map.apiproxy = self._proxy
            try:
                return attribute(*args, **kwargs)
            finally:
                apiproxy_stub_map.apiproxy = saved

        return call


@contextmanager
def _bridge_proxy(port: int) -> Iterator[Any]:
    saved = {k: os.environ.get(k) for k in ("API_HOST", "API_PORT", "HTTP_X_APPENGINE_API_TICKET")}
    os.environ.update(API_HOST="127.0.0.1", API_PORT=str(port), HTTP_X_APPENGINE_API_TICKET=TICKET)
    stub = default_api_stub.DefaultApiStub()
    proxy = apiproxy_stub_map.APIProxyStubMap()
    proxy.RegisterStub("taskqueue", stub)
    use_ticket_in_this_thread()
    try:
        yield proxy
    finally:
        stub.thread_pool.shutdown(wait=False)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _run(
    seed: int, ops: int, tmp_path: Path, step: Callable[[Differential], None] | None = None
) -> None:
    clock = FakeClock(1_700_000_000.0 + seed * 1000.123457)
    backend = _Counting(
        MemoryBackend(clock=clock, retry_limits={q: n for q, n in QUEUES.items() if n is not None})
    )
    with (
        running_bridge(backend) as server,
        legacy_taskqueue(clock, tmp_path, QUEUES) as sdk,
        _bridge_proxy(server.port) as proxy,
    ):
        legacy = Side(sdk, {q: sdk.Queue(q) for q in QUEUES})
        ours = Side(sdk, {q: _ThroughBridge(sdk.Queue(q), proxy) for q in QUEUES})
        run = Differential(seed, clock, legacy, ours)
        for _ in range(ops):
            run.step()
    backend.close()
    # The second side did reach the bridge (and the stub's side did not).
    assert backend.calls["add"] and backend.calls["lease"]
    assert run.coverage["lease_tasks_by_tag:ok"] and run.coverage["delete_tasks:ok"]


@pytest.mark.parametrize("seed", SEEDS)
def test_random_calls_through_the_bridge_agree_with_the_sdk_stub(seed: int, tmp_path: Path) -> None:
    _run(seed, OPS_PER_SEED, tmp_path)
