# -*- coding: utf-8 -*-
"""A Python 2.7 pull-queue worker on the 1.9.x App Engine SDK, run two ways for the bridge tests.

`worker.py stub SCENARIO` runs it on the SDK's own taskqueue stub (testbed, pull queues declared
in a queue.yaml); `worker.py bridge SCENARIO` on the SDK's remote_api_stub, configured by the
bootstrap docs/bridge.md gives (API_HOST, API_PORT; PULLQUEUE_TICKET for a ticketed bridge).
Each step prints one JSON line; the test compares the two runs' lines. Python 2.7 code.
"""
from __future__ import print_function

import collections
import json
import os
import shutil
import sys
import tempfile
import threading
import time

import dev_appserver

dev_appserver.fix_sys_path()

from google.appengine.api import apiproxy_stub_map  # noqa: E402
from google.appengine.api import taskqueue  # noqa: E402
from google.appengine.api.taskqueue import taskqueue_service_pb  # noqa: E402
from google.appengine.runtime import apiproxy_errors  # noqa: E402

QUEUE_YAML = """queue:
- name: pull-queue
  mode: pull
- name: other
  mode: pull
"""


def out(step, result):
    print(json.dumps({"step": step, "result": result}, sort_keys=True))
    sys.stdout.flush()


def error_name(call):
    """The class name of the exception call() raises, or 'ok'."""
    try:
        call()
    except Exception as exc:  # the class is what the test compares
        return type(exc).__name__
    return "ok"


def shown(tasks):
    """What both sides agree on about leased tasks: names given by the worker (job-*, stale-*),
    not generated ones, which each service spells its own way; not ETAs."""
    return sorted(
        [t.payload, t.tag, t.retry_count, t.name if t.name.startswith(("job-", "stale-")) else None]
        for t in tasks
    )


def delete_codes(queue, names):
    """The raw result codes of a Delete call (the SDK folds UNKNOWN and TOMBSTONED together)."""
    request = taskqueue_service_pb.TaskQueueDeleteRequest()
    request.set_queue_name(queue)
    for name in names:
        request.add_task_name(name)
    response = taskqueue_service_pb.TaskQueueDeleteResponse()
    apiproxy_stub_map.MakeSyncCall("taskqueue", "Delete", request, response)
    names_of = taskqueue_service_pb.TaskQueueServiceError.ErrorCode_Name
    return [names_of(code) for code in response.result_list()]


# scenarios


def samples():
    """The legacy docs' pull-queue samples, sync and async."""
    q = taskqueue.Queue("pull-queue")
    tasks = [taskqueue.Task(payload="hello world %d" % i, method="PULL") for i in range(3)]
    q.add(tasks)
    out("add", [t.was_enqueued for t in tasks])
    leased = q.lease_tasks(3600, 100)
    out("lease", shown(leased))
    q.delete_tasks(leased)
    out("deleted", [t.was_deleted for t in leased])
    for i in range(6):
        tag = "coolest-tag" if i % 2 else "other-tag"
        q.add(taskqueue.Task(payload="p%d" % i, method="PULL", tag=tag))
    time.sleep(0.01)
    by_tag = q.lease_tasks_by_tag(3600, 100, "coolest-tag")
    out("lease_by_tag", shown(by_tag))
    oldest = q.lease_tasks_by_tag(3600, 100, deadline=60)
    out("lease_by_oldest_tag", shown(oldest))
    q.modify_task_lease(oldest[0], 10)
    out("modify_lease", oldest[0].eta_posix - time.time() < 11)
    q.delete_tasks(by_tag + oldest)
    out("stats", taskqueue.QueueStatistics.fetch(q).tasks)
    rpc = q.add_async(taskqueue.Task(payload="async", method="PULL", tag="a"))
    out("add_async", rpc.get_result().was_enqueued)
    leased = q.lease_tasks_by_tag_async(60, 10, "a").get_result()
    out("lease_async", shown(leased))
    out("delete_async", [t.was_deleted for t in q.delete_tasks_async(leased).get_result()])
    q.add([taskqueue.Task(payload="x%d" % i, method="PULL") for i in range(5)])
    q.purge()
    out("after_purge", shown(q.lease_tasks(60, 100)))
    out("lease_bad_time", error_name(lambda: q.lease_tasks(-1, 10)))
    out("lease_too_many", error_name(lambda: q.lease_tasks(60, 1001)))
    out("unknown_tag", shown(q.lease_tasks_by_tag(60, 10, "nobody")))


def names():
    """Named tasks and tombstones."""
    q = taskqueue.Queue("other")
    q.add(taskqueue.Task(payload="one", method="PULL", name="job-1"))
    out("again", error_name(lambda: q.add(taskqueue.Task(payload="1", method="PULL", name="job-1"))))
    batch = [
        taskqueue.Task(payload="two", method="PULL", name="job-2"),
        taskqueue.Task(payload="dup", method="PULL", name="job-1"),
    ]
    out("batch_with_existing", error_name(lambda: q.add(batch)))
    out("batch_enqueued", [t.was_enqueued for t in batch])
    leased = q.lease_tasks(60, 10)
    out("leased", shown(leased))
    q.delete_tasks_by_name("job-1")
    out("tombstoned", error_name(lambda: q.add(taskqueue.Task(payload="1", method="PULL", name="job-1"))))
    out("delete_codes", delete_codes("other", ["job-1", "job-2", "never-was"]))
    out("delete_codes_again", delete_codes("other", ["job-2"]))
    task = taskqueue.Task(payload="three", method="PULL", name="job-3")
    q.add(task)
    q.purge()
    out("after_purge", error_name(lambda: q.add(taskqueue.Task(payload="3", method="PULL", name="job-3"))))


def stale():
    """A lease that runs out: another lease takes the task; the first holder's calls fail."""
    q = taskqueue.Queue("pull-queue")
    q.add(taskqueue.Task(payload="slow", method="PULL", name="stale-1"))
    first = q.lease_tasks(1, 10)
    out("first", shown(first))
    out("still_leased", shown(q.lease_tasks(60, 10)))
    time.sleep(2.5)
    second = q.lease_tasks(60, 10)
    out("second", shown(second))
    out("stale_modify", error_name(lambda: q.modify_task_lease(first[0], 30)))
    q.modify_task_lease(second[0], 30)
    out("fresh_modify", "ok")
    q.delete_tasks(second)
    out("deleted", [t.was_deleted for t in second])


def threads():
    """A worker of 4 threads leasing by tag and deleting, as production workers run."""
    ticket = os.environ.get("PULLQUEUE_TICKET")
    if ticket:
        # The one line of docs/bridge.md: every thread's calls carry the ticket.
        from google.appengine.ext.remote_api import remote_api_stub

        remote_api_stub.RemoteStub._local = type("Ticket", (threading.local,), {"request_id": ticket})()
    q = taskqueue.Queue("pull-queue")
    for start in range(0, 400, 100):
        q.add([
            taskqueue.Task(payload="t%d" % i, method="PULL", tag="tag-%d" % (i % 8))
            for i in range(start, start + 100)
        ])
    seen = collections.Counter()
    mixed = []
    errors = []
    lock = threading.Lock()

    def work():
        empty = 0
        try:
            while empty < 3:
                leased = q.lease_tasks_by_tag(60, 25)
                if not leased:
                    empty += 1
                    time.sleep(0.1)
                    continue
                empty = 0
                q.delete_tasks(leased)
                with lock:
                    seen.update(t.payload for t in leased)
                    if len(set(t.tag for t in leased)) != 1:
                        mixed.append([t.tag for t in leased])
                    if not all(t.was_deleted for t in leased):
                        errors.append("not deleted")
        except Exception as exc:
            with lock:
                errors.append(repr(exc))

    workers = [threading.Thread(target=work) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    out("processed", sorted(seen.items()) == sorted(("t%d" % i, 1) for i in range(400)))
    out("count", sum(seen.values()))
    out("mixed", mixed)
    out("errors", errors)


def deadline():
    """A lease the bridge cannot answer before the call's deadline."""
    started = time.time()
    out("lease", error_name(lambda: taskqueue.Queue("slow").lease_tasks(60, 10)))
    out("within", time.time() - started < 5)


def unserved():
    """A taskqueue call the bridge does not serve (an admin call)."""
    request = taskqueue_service_pb.TaskQueueFetchQueuesRequest()
    request.set_app_id("pullqueue-bridge")
    request.set_max_rows(10)
    response = taskqueue_service_pb.TaskQueueFetchQueuesResponse()
    out("fetch_queues", error_name(
        lambda: apiproxy_stub_map.MakeSyncCall("taskqueue", "FetchQueues", request, response)))
    out("then_served", taskqueue.Queue("pull-queue").lease_tasks(60, 10))


def refused():
    """A call whose ticket is not the bridge's: the SDK's own permission error."""
    out("lease", error_name(lambda: taskqueue.Queue("pull-queue").lease_tasks(60, 10)))
    out("add", error_name(lambda: taskqueue.Queue("pull-queue").add(
        taskqueue.Task(payload="x", method="PULL"))))


def pickles():
    """The bridge's pickled exceptions, read from stdin as JSON lines of hex."""
    import binascii
    import pickle

    for line in sys.stdin:
        exc = pickle.loads(binascii.unhexlify(json.loads(line)))
        fields = [getattr(exc, "application_error", None), getattr(exc, "error_detail", None)]
        out(type(exc).__module__ + "." + type(exc).__name__, [str(exc)] + fields)


def bench():
    """Calls per second (benchmarks/bridge_py27.py): BENCH_SECONDS of add(1) + lease(1) + delete,
    then of lease(100) + delete of 100 tasks added beforehand, on BENCH_THREADS threads."""
    seconds = float(os.environ.get("BENCH_SECONDS", "3"))
    threads_wanted = int(os.environ.get("BENCH_THREADS", "1"))
    counts = collections.Counter()
    lock = threading.Lock()

    def single(queue):
        q = taskqueue.Queue(queue)
        calls = 0
        ends = time.time() + seconds
        while time.time() < ends:
            q.add(taskqueue.Task(payload="x", method="PULL"))
            q.delete_tasks(q.lease_tasks(60, 1))
            calls += 3
        with lock:
            counts["single"] += calls

    def batch(queue):
        q = taskqueue.Queue(queue)
        calls = 0
        ends = time.time() + seconds
        while time.time() < ends:
            q.add([taskqueue.Task(payload="x", method="PULL") for _ in range(100)])
            q.delete_tasks(q.lease_tasks(60, 100))
            calls += 3
        with lock:
            counts["batch"] += calls

    for kind in (single, batch):
        workers = [
            threading.Thread(target=kind, args=("pull-queue" if i % 2 else "other",))
            for i in range(threads_wanted)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    out("calls_per_second", {k: v / seconds for k, v in counts.items()})


SCENARIOS = {
    "bench": bench,
    "samples": samples,
    "names": names,
    "stale": stale,
    "threads": threads,
    "deadline": deadline,
    "unserved": unserved,
    "refused": refused,
    "pickles": pickles,
}


def main():
    side, scenario = sys.argv[1], sys.argv[2]
    if side == "stub":
        from google.appengine.ext import testbed

        root = tempfile.mkdtemp()
        with open(os.path.join(root, "queue.yaml"), "w") as f:
            f.write(QUEUE_YAML)
        bed = testbed.Testbed()
        bed.activate()
        bed.setup_env(app_id="pullqueue-bridge", overwrite=True)
        bed.init_taskqueue_stub(root_path=root)
        out("app_id", os.environ["APPLICATION_ID"])
        try:
            SCENARIOS[scenario]()
        finally:
            bed.deactivate()
            shutil.rmtree(root)
    elif side == "bridge":
        # The bootstrap of docs/bridge.md, "Python 2.7 apps".
        from google.appengine.ext.remote_api import remote_api_stub

        remote_api_stub.ConfigureRemoteApi(
            None, os.environ.get("PULLQUEUE_PATH", "/_ah/remote_api"), lambda: ("", ""),
            servername="%s:%s" % (os.environ["API_HOST"], os.environ["API_PORT"]),
            services=["taskqueue"])
        ticket = os.environ.get("PULLQUEUE_TICKET")
        if ticket:
            remote_api_stub.RemoteStub._SetRequestId(ticket)
        out("app_id", os.environ["APPLICATION_ID"])
        SCENARIOS[scenario]()
    else:
        SCENARIOS[scenario]()


if __name__ == "__main__":
    main()
