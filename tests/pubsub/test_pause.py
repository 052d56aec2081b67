"""Pausing a Pub/Sub queue: the marker topic, its cached looks, and real `pullqueue work` processes
that stop leasing within the stated bound after `pullqueue pause` and drain everything after
`pullqueue resume`, with no task lost."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from google.api_core.exceptions import NotFound

from pullqueue import Queue, Task
from pullqueue.adapters.pubsub.pause import LABEL_PAUSED, marker_topic
from pullqueue.compat import taskqueue
from pullqueue.inspection import stats_json
from tests.cli.support import PULLQUEUE, clean_env, run
from tests.pubsub.conftest import MakeBackend

CHECK = 2.0
"""PULLQUEUE_PUBSUB_PAUSE_CHECK of the workers here (the default is 10 s)."""
BOUND = CHECK + 3.0
"""The stated bound (the check plus one lease call in flight), with a handler's run on top."""


def test_the_marker_pauses_other_processes_within_the_check(
    make_backend: MakeBackend, raw: tuple[object, object]
) -> None:
    operator = make_backend()
    worker = make_backend(pubsub_pause_check=0.5)
    queue = Queue("held", worker)
    queue.add([Task(b"a"), Task(b"b")])
    assert worker.paused_since("held") is None
    operator.set_paused("held", True)
    marker = marker_topic(operator.topology("held").topic)
    assert marker == f"projects/{operator.project}/topics/held.paused"
    found = raw[0].get_topic(request={"topic": marker})  # type: ignore[attr-defined]
    assert float(found.labels[LABEL_PAUSED]) == pytest.approx(time.time(), abs=5)
    time.sleep(0.6)
    began = time.monotonic()
    assert queue.lease(60, 10) == []
    assert 0.9 < time.monotonic() - began < 3  # answered as an empty pull: after the pull wait
    queue.add(Task(b"c"))  # adds are accepted while paused
    assert queue.lease(60, 10, tag="x", deadline=0.1) == []
    assert queue.lease(60, 10, group_by_tag=True, deadline=0.1) == []
    assert taskqueue.Queue("held", backend=worker).lease_tasks(60, 10, deadline=0.1) == []
    assert stats_json(worker, queue.stats(), None)["paused"] is True
    reads, leases = worker._pauses.reads, 0
    began = time.monotonic()
    while time.monotonic() - began < 2:
        queue.lease(60, 10, deadline=0.05)
        leases += 1
    looks = worker._pauses.reads - reads
    assert 3 <= looks <= 5 < leases  # one look per 0.5 s check, however many leases
    operator.set_paused("held", False)
    time.sleep(0.6)
    got: list[Task] = []
    while len(got) < 3 and (batch := queue.lease(60, 10)):
        got += batch
    assert sorted(t.payload for t in got) == [b"a", b"b", b"c"]
    with pytest.raises(NotFound):
        raw[0].get_topic(request={"topic": marker})  # type: ignore[attr-defined]


HANDLER = """\
import os, time
OUT = open(os.path.join(os.environ["HANDLED_DIR"], "handled-%d" % os.getpid()), "a", buffering=1)

def handle(task):
    OUT.write("%s %.3f\\n" % (task.name, time.time()))
"""


def _handled(tmp_path: Path) -> list[tuple[str, float]]:
    out = []
    for path in tmp_path.glob("handled-*"):
        for line in path.read_text().splitlines():
            name, at = line.split()
            out.append((name, float(at)))
    return out


def _await(condition: Callable[[], bool], within: float, what: str) -> None:
    """Poll `condition` every 0.1 s until it holds; fail naming `what` after `within` s."""
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"not within {within:g} s: {what}"
        time.sleep(0.1)


def test_worker_processes_stop_within_the_bound_and_resume_with_nothing_lost(
    make_backend: MakeBackend, project: str, emulator: str, tmp_path: Path
) -> None:
    backend = make_backend()
    producer = Queue("jobs", backend)
    first = producer.add(Task(b"open")).name  # provisions the queue (auto_create)
    (tmp_path / "pausehandler.py").write_text(HANDLER)
    env = clean_env(
        PUBSUB_EMULATOR_HOST=emulator,
        PULLQUEUE_PUBSUB_PAUSE_CHECK=str(CHECK),
        HANDLED_DIR=str(tmp_path),
        PYTHONPATH=str(tmp_path),
    )
    url = f"pubsub://{project}"
    workers = [
        subprocess.Popen(
            [PULLQUEUE, "work", "jobs", "pausehandler:handle", "--url", url, "--max-backoff", "1"],
            cwd=tmp_path,
            env=env,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(3)
    ]
    added: list[str] = [first or ""]
    stop = threading.Event()

    def produce() -> None:
        while not stop.is_set():
            added.extend(t.name or "" for t in producer.add([Task(b"job") for _ in range(5)]))
            stop.wait(0.1)

    feeder = threading.Thread(target=produce)
    feeder.start()
    try:
        # every worker started and leasing: each has handled a task (a line in its handled-<pid>,
        # which its handler module creates empty on import)
        pids = {f"handled-{worker.pid}" for worker in workers}
        _await(
            lambda: pids <= {p.name for p in tmp_path.glob("handled-*") if p.stat().st_size},
            60,
            "all 3 workers handling tasks",
        )
        paused = run("pause", "jobs", "--url", url, "--json", env=env)
        paused_at = time.time()
        assert paused.returncode == 0, paused.stderr
        assert json.loads(paused.stdout)["paused"] is True
        stats = run("stats", "jobs", "--url", url, "--json", env=env)
        assert json.loads(stats.stdout)["paused"] is True
        time.sleep(BOUND + 5)
        resuming_at = time.time()  # the marker may go any time after this, before run() returns
        resumed = run("resume", "jobs", "--url", url, env=env)
        resumed_at = time.time()
        assert resumed.returncode == 0 and "resumed queue 'jobs'" in resumed.stdout
        # tasks flowing again: one handled after the resume (the bound on when is asserted below)
        _await(
            lambda: any(at > resuming_at for _, at in _handled(tmp_path)),
            60,
            "a task handled after `pullqueue resume`",
        )
        stop.set()
        feeder.join()
        wanted = set(added)
        deadline = time.time() + 60
        while {n for n, _ in _handled(tmp_path)} < wanted and time.time() < deadline:
            time.sleep(0.1)
    finally:
        stop.set()
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        codes = [worker.wait(timeout=60) for worker in workers]
    assert codes == [0, 0, 0], f"exit codes after SIGTERM: {codes}"
    handled = _handled(tmp_path)
    times = [at for _, at in handled]
    assert any(t < paused_at for t in times)
    late = [t - paused_at for t in times if paused_at + BOUND < t < resuming_at]
    assert late == [], f"handled {len(late)} tasks more than {BOUND} s into the pause"
    first_after = min(t for t in times if t > resuming_at)
    last_before = max(t for t in times if t < resuming_at)
    print(
        f"3 workers, check {CHECK:g} s: last task handled {last_before - paused_at:.2f} s after"
        f" `pullqueue pause` returned (bound {BOUND:g} s), first after resume"
        f" {first_after - resumed_at:.2f} s; {len(set(added))} tasks, all handled"
    )
    # the check, a worker's backoff (1 s), a lease call and a handler's run
    assert first_after - resumed_at < CHECK + 1 + 3, (
        f"first task {first_after - resumed_at:.2f} s after resume"
    )
    assert {n for n, _ in handled} == set(added)  # nothing lost
