"""A process of the crash test: an app making transactions with transactional adds, or a sweeper.

`app START STEP STOP` (bundled ndb) or `cloud-app START STEP STOP` (google-cloud-ndb on
DATASTORE_PROJECT): for each id in range(START, STOP, STEP) not committed yet, one ndb
transaction writes Order(id) and adds task b"<id>" transactionally; ids divisible by 5 roll back.
Random pauses before the commit, before and after the publish widen the moments a SIGKILL can
hit. `sweeper` / `cloud-sweeper`: sweeps the outbox in a loop. The bundled SDK's datastore is
DATASTORE_HOST (the SDK's stub served over /rpc_http), google-cloud-ndb's the Datastore emulator;
the queue is the process-wide backend (PULLQUEUE_URL, a registry).
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import random
import signal
import sys
import time
from typing import Any

from google.appengine.ext import db, ndb

from pullqueue.adapters.pubsub import PubSubBackend
from pullqueue.compat import taskqueue
from pullqueue.outbox import sweep
from pullqueue.outbox.appengine import AppEngineStore
from pullqueue.registry import default_backend
from tests.support.datastore_server import APP_ID, use_datastore_at

GRACE_SECONDS = 1.0
LOCK_SECONDS = 2.0
GIVE_UP_SECONDS = 60.0


class Order(ndb.Model):
    number = ndb.IntegerProperty()


def paused(add: Any) -> Any:
    """The backend's add, with a pause before (after the commit) and after (before the staging
    is deleted): where a SIGKILL hurts most."""

    def slow(*args: Any) -> Any:
        time.sleep(random.uniform(0, 0.03))
        result = add(*args)
        time.sleep(random.uniform(0, 0.03))
        return result

    return slow


def app(start: int, step: int, stop: int) -> None:
    context = ndb.get_context()
    context.set_cache_policy(False)
    context.set_memcache_policy(False)
    PubSubBackend.add = paused(PubSubBackend.add)  # type: ignore[method-assign]
    queue = taskqueue.Queue("crash")
    for number in range(start, stop, step):
        if Order.get_by_id(number) is not None:
            continue

        def place(number: int = number) -> None:
            queue.add(taskqueue.Task(payload=b"%d" % number, method="PULL"), transactional=True)
            Order(id=number, number=number).put()
            time.sleep(random.uniform(0, 0.01))
            if number % 5 == 0:
                raise db.Rollback()

        ndb.transaction(place, retries=10)
    print("done", flush=True)


def cloud_app(start: int, step: int, stop: int) -> None:
    from google.cloud import ndb as cloud_ndb

    class CloudOrder(cloud_ndb.Model):  # type: ignore[misc]
        number = cloud_ndb.IntegerProperty()

        @classmethod
        def _get_kind(cls) -> str:
            return "Order"

    PubSubBackend.add = paused(PubSubBackend.add)  # type: ignore[method-assign]
    queue = taskqueue.Queue("crash")
    client = cloud_ndb.Client(project=os.environ["DATASTORE_PROJECT"])
    with client.context(cache_policy=False, global_cache_policy=False):
        for number in range(start, stop, step):
            if CloudOrder.get_by_id(number) is not None:
                continue

            def place(number: int = number) -> None:
                queue.add(taskqueue.Task(payload=b"%d" % number, method="PULL"), transactional=True)
                CloudOrder(id=number, number=number).put()
                time.sleep(random.uniform(0, 0.01))
                if number % 5 == 0:
                    raise RolledBack()

            with contextlib.suppress(RolledBack):
                cloud_ndb.transaction(place, retries=10)
    print("done", flush=True)


def bridge_app(start: int, step: int, stop: int) -> None:
    """The unmodified SDK (its own taskqueue module) with every call sent to the bridge at
    BRIDGE_HOST, which a test kills and restarts: a failed call is retried on the same id, for
    up to GIVE_UP_SECONDS without one success (then the process exits 1: no bridge came back)."""
    from google.appengine.api import apiproxy_stub_map
    from google.appengine.api import taskqueue as sdk_taskqueue
    from google.appengine.runtime import default_api_stub

    host, _, port = os.environ["BRIDGE_HOST"].rpartition(":")
    os.environ.update(
        API_HOST=host,
        API_PORT=port,
        APPLICATION_ID=APP_ID,
        GAE_APPLICATION=APP_ID,
        HTTP_X_APPENGINE_API_TICKET="crash-test",
    )
    default_api_stub.DefaultApiStub.SetUseRequestSecurityTicketForThread(True)
    stub = default_api_stub.DefaultApiStub()
    apiproxy_stub_map.apiproxy = apiproxy_stub_map.APIProxyStubMap()
    for service in ("taskqueue", "datastore_v3"):
        apiproxy_stub_map.apiproxy.RegisterStub(service, stub)
    queue = sdk_taskqueue.Queue("crash")
    for number in range(start, stop, step):
        failing_since: float | None = None
        while True:
            # A fresh ndb context each try: one whose RPC failed keeps failing.
            ndb.tasklets._state.clear_all_pending()
            ndb.tasklets.set_context(None)
            context = ndb.get_context()
            context.set_cache_policy(False)
            context.set_memcache_policy(False)
            try:
                if Order.get_by_id(number) is not None:
                    break

                def place(number: int = number) -> None:
                    queue.add(
                        sdk_taskqueue.Task(payload=b"%d" % number, method="PULL"),
                        transactional=True,
                    )
                    Order(id=number, number=number).put()
                    time.sleep(random.uniform(0, 0.01))
                    if number % 5 == 0:
                        raise db.Rollback()

                ndb.transaction(place, retries=10)
                if number % 5 == 0:
                    break
            except Exception as exc:
                # The bridge is down (or was killed mid-call): try the id again while it
                # restarts, but never forever.
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since > GIVE_UP_SECONDS:
                    print(
                        f"id {number}: no bridge for {GIVE_UP_SECONDS} s: {exc!r}", file=sys.stderr
                    )
                    sys.exit(1)
                time.sleep(0.2)
    print("done", flush=True)


class RolledBack(Exception):
    """Raised in a transaction to roll it back."""


def sweeper(cloud: bool) -> None:
    if cloud:
        from pullqueue.outbox.cloud import CloudDatastoreStore

        store: Any = CloudDatastoreStore(f"datastore://{os.environ['DATASTORE_PROJECT']}")
    else:
        store = AppEngineStore(f"appengine://{os.environ['DATASTORE_HOST']}?app={APP_ID}")
    backend = default_backend()
    while True:
        sweep(store, backend, grace_seconds=GRACE_SECONDS, lock_seconds=LOCK_SECONDS)
        time.sleep(random.uniform(0, 0.2))


if __name__ == "__main__":
    # The test sends SIGUSR1 to a process that outstays its time: every thread's stack to stderr.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    cloud = sys.argv[1].startswith("cloud-")
    if sys.argv[1] == "bridge-app":
        print("ready", flush=True)
        bridge_app(*(int(arg) for arg in sys.argv[2:5]))
        sys.exit(0)
    if not cloud:
        use_datastore_at(os.environ["DATASTORE_HOST"])
    print("ready", flush=True)
    if sys.argv[1] == "app":
        app(*(int(arg) for arg in sys.argv[2:5]))
    elif sys.argv[1] == "cloud-app":
        cloud_app(*(int(arg) for arg in sys.argv[2:5]))
    else:
        sweeper(cloud)
