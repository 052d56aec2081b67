"""Named tasks on Pub/Sub with no name registry: refused with what to set, or accepted on purpose.

The legacy queue refused a second task of a name; Pub/Sub cannot. Without a registry a named add
fails, whole, naming PULLQUEUE_DEDUPE_URL and PULLQUEUE_ACCEPT_DUPLICATE_NAMES, and publishes
nothing; with duplicates accepted the names go out unchecked and each process is warned once.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from pullqueue import ConfigurationError, Queue, Task, connect
from pullqueue.compat import taskqueue
from pullqueue.dedupe import MemoryNameRegistry
from tests.pubsub.conftest import MakeBackend


def _everything(queue: Queue) -> list[Task]:
    """What the queue hands out now (leases of 60 s: nothing comes back during the test)."""
    found: list[Task] = []
    while batch := queue.lease(60, 1000, deadline=3):
        found += batch
    return found


def test_a_named_add_is_refused_with_what_to_set(make_backend: MakeBackend) -> None:
    queue = Queue("refused", make_backend())
    with pytest.raises(ConfigurationError) as caught:
        queue.add(Task(b"x", name="order-17"))
    error = caught.value
    assert (error.queue, error.task) == ("refused", "order-17")
    text = str(error)
    assert "PULLQUEUE_DEDUPE_URL" in text
    assert "PULLQUEUE_ACCEPT_DUPLICATE_NAMES=1" in text
    assert "nothing was added" in text


def test_a_batch_with_one_named_task_publishes_nothing(make_backend: MakeBackend) -> None:
    queue = Queue("whole-batch", make_backend())
    batch = [Task(f"plain-{i}".encode()) for i in range(60)]
    batch.insert(30, Task(b"named", name="the-one"))
    with pytest.raises(ConfigurationError) as caught:
        queue.add(batch)
    assert caught.value.task == "the-one"
    assert not any(task.was_added for task in batch)
    assert _everything(queue) == []


def test_the_legacy_api_gets_the_same_refusal(make_backend: MakeBackend) -> None:
    queue = taskqueue.Queue("legacy", backend=make_backend())
    with pytest.raises(taskqueue.Error, match="PULLQUEUE_DEDUPE_URL"):
        queue.add(taskqueue.Task(payload="x", method="PULL", name="job-1"))
    assert queue.lease_tasks(60, 100) == []


def test_unnamed_adds_are_unaffected(make_backend: MakeBackend) -> None:
    queue = Queue("unnamed", make_backend())
    queue.add([Task(f"t{i}".encode(), tag="a" if i % 2 else None) for i in range(20)])
    assert len(_everything(queue)) == 20


def test_a_registry_keeps_names_unique(make_backend: MakeBackend) -> None:
    queue = Queue("with-registry", make_backend(names=MemoryNameRegistry()))
    queue.add(Task(b"first", name="once"))
    with pytest.raises(taskqueue.TaskAlreadyExistsError):
        queue.add(Task(b"second", name="once"))
    assert [t.payload for t in _everything(queue)] == [b"first"]


def test_accepting_duplicates_publishes_a_name_twice(make_backend: MakeBackend) -> None:
    queue = Queue("accepted", make_backend(accept_duplicate_names=True))
    queue.add(Task(b"first", name="twice"))
    queue.add(Task(b"second", name="twice"))
    first = queue.lease(60, 100)
    second = queue.lease(60, 100)
    assert sorted(t.payload for t in first + second) == [b"first", b"second"]


def test_connect_takes_the_setting_as_an_option(emulator: str, project: str) -> None:
    backend = connect(
        f"pubsub://{project}", auto_create=True, dedupe_url=None, accept_duplicate_names=True
    )
    try:
        Queue("option", backend).add(Task(b"x", name="by-option"))
    finally:
        backend.close()
    refusing = connect(f"pubsub://{project}", auto_create=True, dedupe_url=None)
    try:
        with pytest.raises(ConfigurationError):
            Queue("option", refusing).add(Task(b"x", name="refused"))
    finally:
        refusing.close()


_PRODUCER = textwrap.dedent(
    """
    import logging, sys
    from pullqueue import Queue, Task, connect

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    for _ in range(2):
        backend = connect(sys.argv[1], auto_create=True)
        for queue in ("one", "two"):
            for i in range(3):
                Queue(queue, backend).add(Task(b"x", name=f"n{i}"))
        backend.close()
    print("added")
    """
)


def _run_producer(project: str, emulator: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PULLQUEUE_DEDUPE_URL", "PULLQUEUE_ACCEPT_DUPLICATE_NAMES")
    }
    environment.update(PUBSUB_EMULATOR_HOST=emulator, **env)
    return subprocess.run(
        [sys.executable, "-c", _PRODUCER, f"pubsub://{project}"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_accept_setting_warns_once_per_process(emulator: str, project: str) -> None:
    for _ in range(2):  # each process is warned, once
        run = _run_producer(project, emulator, PULLQUEUE_ACCEPT_DUPLICATE_NAMES="1")
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == "added"
        warnings = [line for line in run.stderr.splitlines() if line.startswith("WARNING")]
        assert len(warnings) == 1, run.stderr
        assert "without a uniqueness check" in warnings[0]
        assert "PULLQUEUE_DEDUPE_URL" in warnings[0]


def test_without_the_setting_the_process_fails_on_its_first_named_add(
    emulator: str, project: str
) -> None:
    run = _run_producer(project, emulator)
    assert run.returncode != 0
    assert "ConfigurationError" in run.stderr
    assert "PULLQUEUE_ACCEPT_DUPLICATE_NAMES=1" in run.stderr
    assert run.stdout == ""
