"""The ported legacy clients of tests/clients, in their SDK form and unchanged, through the bridge.

Each scenario runs the `_sdk.py` client on Google's taskqueue stub, then the same file with the
SDK's HTTP API stub posting to a bridge over memory:// and over the Pub/Sub emulator: the calls
the client makes, their outcomes, its logs and its outputs must be the same. Then many threads
run the pull-counter client at once through one bridge: every visit is counted exactly once.
"""

from __future__ import annotations

import logging
import threading
import time
import types
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest
from google.appengine.api import taskqueue as sdk_taskqueue
from google.appengine.api.taskqueue import taskqueue as sdk_client

from pullqueue.adapters.base import Backend
from pullqueue.adapters.memory import MemoryBackend
from tests.bridge.conftest import make_backend
from tests.bridge.support import running_bridge, sdk_through_bridge, use_ticket_in_this_thread
from tests.clients import frameworks, harness
from tests.clients.scenarios import SCENARIOS
from tests.clients.test_clients import QUICK, _observe
from tests.support.appengine_testbed import ManualClock


@contextmanager
def _clock_for_the_sdk(clock: Callable[[], float]) -> Iterator[None]:
    saved = sdk_client.time
    sdk_client.time = types.SimpleNamespace(time=clock, mktime=time.mktime)
    try:
        yield
    finally:
        sdk_client.time = saved


@contextmanager
def bridge_client_run(
    client: str, kind: str, *, fail_first_lease: bool = False
) -> Iterator[harness.Run]:
    """harness.client_run for the `_sdk.py` client with taskqueue served by a bridge over kind."""
    with ExitStack() as stack:
        stack.enter_context(frameworks.installed())
        inner: Backend
        if kind == "pubsub":
            inner = make_backend("pubsub")
            now, advance = time.time, harness._short_wait
        else:
            clock = ManualClock()
            inner = MemoryBackend(clock=clock)
            now, advance = clock, clock.advance
            stack.enter_context(_clock_for_the_sdk(clock))
        stack.callback(inner.close)
        stack.enter_context(harness._datastore())
        backend = harness._FailFirstLease(inner) if fail_first_lease else inner
        server = stack.enter_context(running_bridge(backend))
        stack.enter_context(sdk_through_bridge(server.port, fresh=False))
        run = harness.Run(
            f"bridge-{kind}", harness._import(client, "sdk"), sdk_taskqueue, now, advance
        )
        stack.enter_context(harness._recording(sdk_taskqueue.Queue, run))
        handler = harness._LogRecorder(run)
        root = logging.getLogger()
        saved_level = root.level
        root.addHandler(handler)
        root.setLevel(logging.DEBUG)
        stack.callback(root.setLevel, saved_level)
        stack.callback(root.removeHandler, handler)
        yield run


def _observe_through_bridge(scenario: str, kind: str, fail_first_lease: bool) -> dict[str, Any]:
    client, drive = SCENARIOS[scenario]
    with bridge_client_run(client, kind, fail_first_lease=fail_first_lease) as run:
        outputs = drive(run)
    return {"outputs": outputs, **run.observed()}


@pytest.fixture(autouse=True)
def _named_adds_on_pubsub(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PULLQUEUE_DEDUPE_URL", "memory://")


@pytest.mark.parametrize("kind", ["memory", "pubsub"])
@pytest.mark.parametrize("fail_first_lease", [False, True], ids=["as-is", "slow-lease"])
@pytest.mark.parametrize("scenario", QUICK)
def test_the_sdk_client_sees_through_the_bridge_what_it_sees_on_the_stub(
    scenario: str, fail_first_lease: bool, kind: str
) -> None:
    legacy = _observe(scenario, "sdk", fail_first_lease)
    assert _observe_through_bridge(scenario, kind, fail_first_lease) == legacy


@pytest.mark.parametrize("kind", ["memory", "pubsub"])
def test_pull_counter_from_many_threads_counts_every_visit_once(kind: str) -> None:
    keys = [f"key{i}" for i in range(20)]
    posted = Counter(keys[(i * 7) % 20] for i in range(8 * 40))
    errors: list[BaseException] = []

    def in_thread(work: Callable[[], Any]) -> threading.Thread:
        def run_it() -> None:
            use_ticket_in_this_thread()
            try:
                work()
            except BaseException as exc:
                errors.append(exc)

        return threading.Thread(target=run_it)

    with bridge_client_run("pull_counter", kind) as run:
        client = run.module

        def post(thread: int) -> None:
            for i in range(thread * 40, thread * 40 + 40):
                client.CounterHandler(frameworks.Request({"key": keys[(i * 7) % 20]})).post()

        producers = [in_thread(lambda t=t: post(t)) for t in range(8)]
        for thread in producers:
            thread.start()
        for thread in producers:
            thread.join(120)
        assert not errors
        run.advance(1)
        # The worker is endless; it stops after two empty leases in a row. On Pub/Sub a lease
        # can come back empty while tasks are still on their way, so the worker is started
        # again (as its instance would be) until the queue is drained: a task lost would never
        # be counted, a task handed out twice would be counted twice.
        counts: dict[str, int] = {}
        for _ in range(10):
            client.time = harness.ClientTime(run, max_sleeps=200)
            workers = [
                in_thread(
                    lambda: harness.until_stopped(client.CounterWorker(frameworks.Request()).get)
                )
                for _ in range(4)
            ]
            for thread in workers:
                thread.start()
            for thread in workers:
                thread.join(300)
            assert not errors
            counts = {c.key.id(): c.count for c in client.Counter.query()}
            if sum(counts.values()) >= sum(posted.values()):
                break
            time.sleep(1)
        batches = [c.outcome[1] for c in run.leases() if c.outcome[0] == "ok" and c.outcome[1][0]]
        left = run.taskqueue.Queue("pullq").lease_tasks(60, 1000)
    assert all(len(tags) == 1 for _, tags in batches)
    leased: Counter[str] = Counter()
    for size, [tag] in batches:
        leased[tag] += size
    assert leased == posted
    assert left == []
    if kind == "memory":
        # One batch per tag here. On Pub/Sub a tag can come in two batches that two threads
        # count at once, and the client's ndb transactions on the testbed's datastore stub do
        # not serialize across threads: the leases above are the exact count there.
        assert counts == dict(posted)
