"""Runs a ported legacy client on the SDK stub, memory:// and Pub/Sub, recording what it sees.

Each run imports a fresh copy of the client module (the `_sdk` file on the SDK, the `_pullqueue`
file on pullqueue), with the framework stand-ins installed and an App Engine testbed for the
datastore it writes its results to. Recorded for comparison: every taskqueue call the client
makes (method, its lease arguments, and the outcome: batch size and tags, was_deleted, or the
exception class), and the log records it writes (level and message, or the class of a logged
exception). The client's module-level `time` is replaced by ClientTime where a scenario needs
it (the runs' only adaptation besides calling handlers directly): sleeping moves the fake clock
of the SDK and memory runs, and ends an endless worker loop once the queue has answered two
empty leases in a row.
"""

from __future__ import annotations

import importlib.util
import itertools
import logging
import os
import sys
import tempfile
import threading
import time
import types
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.appengine.api import apiproxy_stub_map
from google.appengine.api import taskqueue as sdk_taskqueue
from google.appengine.api.taskqueue import taskqueue as sdk_client
from google.appengine.ext import ndb, testbed
from google.appengine.runtime import apiproxy_errors as sdk_apiproxy_errors

from pullqueue import Settings
from pullqueue.adapters.base import Backend
from pullqueue.adapters.delegating import DelegatingBackend
from pullqueue.adapters.memory import MemoryBackend
from pullqueue.compat import taskqueue as compat_taskqueue
from pullqueue.dedupe.memory import MemoryNameRegistry
from pullqueue.errors import DeadlineExceededError
from pullqueue.registry import register, reset_default_backends
from pullqueue.task import Task as CoreTask
from tests.clients import frameworks
from tests.support.appengine_testbed import ManualClock, QueueSpec, QueueYaml

PORTED = Path(__file__).parent / "ported"
CLIENTS = ("pull_counter", "visit_counter", "subscription_worker", "titan_dirs")
QUEUES = ("pullq", "tbans-update-subscriptions", "titan-dirs")
RECORDED = (
    "add",
    "lease_tasks",
    "lease_tasks_by_tag",
    "modify_task_lease",
    "delete_tasks",
    "delete_tasks_by_name",
    "fetch_statistics",
)
_runs = itertools.count(1)


class StopClient(BaseException):
    """Ends a client's endless worker loop (not an Exception: the client must not catch it)."""


@dataclass
class Call:
    """One taskqueue call as the client made it, and what it got back."""

    method: str
    args: tuple[Any, ...]
    outcome: tuple[str, Any]
    began: float = 0.0
    ended: float = 0.0
    """time.monotonic() at the call and at its answer (not compared across backends)."""


@dataclass
class Run:
    """One client on one backend: its module, its clock, and what it was seen doing."""

    backend: str
    module: types.ModuleType
    taskqueue: Any
    now: Callable[[], float]
    move: Callable[[float], None]
    advanced: float = 0.0
    """Seconds the scenario has advanced the run: the same on every backend."""
    calls: list[Call] = field(default_factory=list)
    logs: list[tuple[str, str]] = field(default_factory=list)
    checking: float = 0.0
    """Seconds the scenario spent checking what the client left (not the client's time)."""
    legacy_calls: int = 0
    """Calls of the queue API the client and the scenario made (a `Task.add` is one; the
    library's own inner calls are not counted): each is a round trip to the legacy service."""

    def advance(self, seconds: float) -> None:
        """Let seconds pass (on the fake clock; on real time, a short wait)."""
        self.advanced += seconds
        self.move(seconds)

    def leases(self) -> list[Call]:
        return [c for c in self.calls if c.method.startswith("lease_tasks")]

    def observed(self) -> dict[str, Any]:
        """The calls and logs compared across backends."""
        return {"calls": [(c.method, c.args, c.outcome) for c in self.calls], "logs": self.logs}


def _args(method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """The arguments that matter for the comparison."""
    if method in ("lease_tasks", "lease_tasks_by_tag"):
        names = ["lease_seconds", "max_tasks", "tag", "deadline"]
        if method == "lease_tasks":
            names.remove("tag")
        given = dict(zip(names, args, strict=False)) | kwargs
        tag = given.get("tag")
        return (
            given.get("lease_seconds"),
            given.get("max_tasks"),
            tag.decode() if isinstance(tag, bytes) else tag,
            given.get("deadline", 10),
        )
    if method == "modify_task_lease":
        seconds = args[1] if len(args) > 1 else kwargs.get("lease_seconds")
        return (getattr(args[0], "name", None) is not None, seconds)
    if method in ("add", "delete_tasks"):
        tasks = args[0] if args else kwargs.get("task")
        return (len(tasks) if isinstance(tasks, list) else 1,)
    return ()


def _tag(task: Any) -> Any:
    return task.tag.decode() if isinstance(task.tag, bytes) else task.tag


def _outcome(method: str, result: Any) -> Any:
    if method.startswith("lease_tasks"):
        return (len(result), sorted({str(_tag(t)) for t in result}))
    if method in ("delete_tasks", "delete_tasks_by_name"):
        items = result if isinstance(result, list) else [result]
        deleted = sum(bool(t.was_deleted) for t in items)
        return {"was_deleted": deleted, "not": len(items) - deleted}
    if method == "fetch_statistics":
        return result.tasks
    return None


@contextmanager
def _recording(queue_class: type, run: Run) -> Iterator[None]:
    """Wrap the Queue class's methods so every call is recorded (restored afterwards)."""
    saved = {name: queue_class.__dict__[name] for name in RECORDED if name in queue_class.__dict__}

    depth = threading.local()

    def wrap(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def recorded(self: Any, *args: Any, **kwargs: Any) -> Any:
            inside = getattr(depth, "n", 0)
            run.legacy_calls += inside == 0
            depth.n = inside + 1
            try:
                if not sys._getframe(1).f_code.co_filename.startswith(str(PORTED)):
                    return original(self, *args, **kwargs)  # the scenario's, or inner calls
                return _recorded(name, original, self, args, kwargs)
            finally:
                depth.n -= 1

        return recorded

    def _recorded(
        name: str, original: Callable[..., Any], self: Any, args: Any, kwargs: Any
    ) -> Any:
        entry = Call(name, _args(name, args, kwargs), ("pending", None), time.monotonic())
        run.calls.append(entry)
        try:
            result = original(self, *args, **kwargs)
        except Exception as exc:
            entry.outcome = ("error", type(exc).__name__)
            raise
        finally:
            entry.ended = time.monotonic()
        entry.outcome = ("ok", _outcome(name, result))
        return result

    for name, original in saved.items():
        setattr(queue_class, name, wrap(name, original))
    try:
        yield
    finally:
        for name, original in saved.items():
            setattr(queue_class, name, original)


class _LogRecorder(logging.Handler):
    """Keeps the records the client's own code writes (not pullqueue's or the SDK's)."""

    def __init__(self, run: Run) -> None:
        super().__init__(logging.DEBUG)
        self.run = run

    def emit(self, record: logging.LogRecord) -> None:
        if not record.pathname.startswith(str(PORTED)):
            return
        if record.exc_info and record.exc_info[1] is not None:
            self.run.logs.append((record.levelname, type(record.exc_info[1]).__name__))
        else:
            self.run.logs.append((record.levelname, record.getMessage()))


class ClientTime:
    """The `time` module a client sees. time() is `start` plus the seconds the run has advanced
    since (so a client that reads the clock sees the same times on every backend); sleep
    advances the run and stops the client once two leases in a row came back empty, or after
    `max_sleeps`."""

    def __init__(self, run: Run, *, start: float | None = None, max_sleeps: int = 50) -> None:
        self.run = run
        self.origin = run.advanced
        self.start = run.now() if start is None else start
        self.max_sleeps = max_sleeps
        self.sleeps = 0

    def time(self) -> float:
        return self.start + (self.run.advanced - self.origin)

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        leases = self.run.leases()
        drained = len(leases) >= 2 and all(c.outcome[1] == (0, []) for c in leases[-2:])
        if drained or self.sleeps >= self.max_sleeps:
            raise StopClient
        self.run.advance(seconds)

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


class _FailFirstLease(DelegatingBackend):
    """Its first lease call runs out of its deadline (a slow service); the others pass."""

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner)
        self.failed = False

    def lease(self, queue: str, *args: Any, **kwargs: Any) -> list[CoreTask]:
        if not self.failed:
            self.failed = True
            raise DeadlineExceededError("the service did not answer in time", queue=queue)
        return self.inner.lease(queue, *args, **kwargs)


def _import(client: str, flavour: str) -> types.ModuleType:
    path = PORTED / f"{client}_{flavour}.py"
    spec = importlib.util.spec_from_file_location(f"ported_{client}_{next(_runs)}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextmanager
def _datastore() -> Iterator[testbed.Testbed]:
    bed = testbed.Testbed()
    bed.activate()
    bed.init_datastore_v3_stub()
    bed.init_memcache_stub()
    ndb.get_context().clear_cache()
    try:
        yield bed
    finally:
        bed.deactivate()


@contextmanager
def _sdk_stub(bed: testbed.Testbed, clock: ManualClock, fail_first_lease: bool) -> Iterator[None]:
    """Google's taskqueue stub on `clock` serving QUEUES, the SDK client stamping ETAs on it."""
    with tempfile.TemporaryDirectory(prefix="clients-") as root:
        queue_yaml = QueueYaml(Path(root))
        for name in QUEUES:
            queue_yaml.declare(name, QueueSpec())
        bed.init_taskqueue_stub(root_path=root, gettime=clock)
        stub = apiproxy_stub_map.apiproxy.GetStub("taskqueue")
        saved_time = sdk_client.time
        sdk_client.time = types.SimpleNamespace(time=clock, mktime=time.mktime)
        if fail_first_lease:
            original = stub._Dynamic_QueryAndOwnTasks
            state = {"failed": False}

            def lease(*args: Any, **kwargs: Any) -> Any:
                if not state["failed"]:
                    state["failed"] = True
                    raise sdk_apiproxy_errors.DeadlineExceededError("The API call took too long")
                return original(*args, **kwargs)

            stub._Dynamic_QueryAndOwnTasks = lease
        try:
            yield
        finally:
            sdk_client.time = saved_time


@contextmanager
def _default_backend(backend: Backend) -> Iterator[None]:
    """Make `backend` the process-wide one the client's `taskqueue.Queue(name)` finds."""
    scheme = f"clients{uuid.uuid4().hex[:8]}"
    register(scheme, lambda url, options: backend)
    saved = os.environ.get("PULLQUEUE_URL")
    os.environ["PULLQUEUE_URL"] = f"{scheme}://"
    reset_default_backends()
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PULLQUEUE_URL", None)
        else:
            os.environ["PULLQUEUE_URL"] = saved
        reset_default_backends()


BACKENDS = ("sdk", "memory", "pubsub", "layer")
"""Where a client runs: Google's stub, memory://, the bare Pub/Sub emulator, or the emulator
behind tests/support/realpubsub.py answering as the service does (10 ms round trips unless
PULLQUEUE_TEST_RTT_MS says otherwise, partial pulls, filters, held empty pulls, the cap)."""


def _pubsub(*, layer: bool = False) -> Backend:
    from pullqueue.adapters.pubsub import PubSubBackend
    from tests.support.emulators import shared_emulator_host
    from tests.support.realpubsub import shared_layer, start_as_on_the_service

    host = shared_emulator_host("pubsub")
    with ExitStack() as stack:
        if layer:
            stack.enter_context(shared_layer(host).as_emulator())
        backend = PubSubBackend(
            f"clients-{uuid.uuid4().hex[:10]}",
            settings=Settings(),
            auto_create=True,
            names=MemoryNameRegistry(),
        )
    if layer and shared_layer(host).knobs.hold_empty:
        start_as_on_the_service(backend.rpc)
    return backend


def _short_wait(seconds: float) -> None:
    """Time passing on a real clock: a short wait (what the client reads is Run.advanced)."""
    time.sleep(min(seconds, 0.05))


@contextmanager
def client_run(client: str, backend: str, *, fail_first_lease: bool = False) -> Iterator[Run]:
    """The client imported for `backend` (one of BACKENDS), recording what it does.

    fail_first_lease makes the first lease call run out of its deadline, at the service (the
    stub raises the apiproxy error) or at the backend (pullqueue's DeadlineExceededError).
    """
    with ExitStack() as stack:
        stack.enter_context(frameworks.installed())
        # Before the testbed: it restores the environment it found when it is deactivated.
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, not {backend!r}")
        pubsub = _pubsub(layer=backend == "layer") if backend in ("pubsub", "layer") else None
        bed = stack.enter_context(_datastore())
        now: Callable[[], float]
        advance: Callable[[float], None]
        if backend == "sdk":
            clock = ManualClock()
            now, advance = clock, clock.advance
            stack.enter_context(_sdk_stub(bed, clock, fail_first_lease))
        else:
            if pubsub is not None:
                inner = pubsub
                stack.callback(inner.close)
                now, advance = time.time, _short_wait
            else:
                clock = ManualClock()
                inner = MemoryBackend(clock=clock)
                now, advance = clock, clock.advance
            stack.enter_context(
                _default_backend(_FailFirstLease(inner) if fail_first_lease else inner)
            )
        flavour = "sdk" if backend == "sdk" else "pullqueue"
        tq = sdk_taskqueue if backend == "sdk" else compat_taskqueue
        run = Run(backend, _import(client, flavour), tq, now, advance)
        stack.enter_context(_recording(tq.Queue, run))
        handler = _LogRecorder(run)
        root = logging.getLogger()
        saved_level = root.level
        root.addHandler(handler)
        root.setLevel(logging.DEBUG)
        stack.callback(root.setLevel, saved_level)
        stack.callback(root.removeHandler, handler)
        yield run


def until_stopped(call: Callable[[], Any]) -> Any:
    """Run a client's endless loop until its ClientTime stops it."""
    try:
        return call()
    except StopClient:
        return "stopped"
