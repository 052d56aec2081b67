"""`pullqueue tasks` and `pullqueue dead-letters` on the Pub/Sub emulator, which applies
dead-letter policies: looking leaves tasks available, dead letters say why they died, redrive
keeps names, tags and ETAs and neither loses nor duplicates a task when killed, purge asks."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from google.api_core import exceptions as gexc

from pullqueue import Queue, Settings, Task
from pullqueue.adapters.pubsub import PubSubBackend
from pullqueue.adapters.pubsub.deadletters import (
    _copy,
    _ensure_audit,
    _paths,
    redrive,
)
from pullqueue.adapters.pubsub.layout import shard_of
from pullqueue.adapters.pubsub.peek import look, pull_all
from pullqueue.adapters.pubsub.provision import DEAD_LETTER_ACK_DEADLINE
from pullqueue.adapters.pubsub.wire import (
    SOURCE_DELIVERIES,
    SOURCE_PUBLISH_TIME,
    SOURCE_SUBSCRIPTION,
    PubsubMessagePb,
    format_eta,
)
from pullqueue.dedupe import MemoryNameRegistry
from tests.cli.support import PULLQUEUE, clean_env, run
from tests.support.emulators import shared_emulator_host

PROJECT = "pullqueue-deadletters"
URL = f"pubsub://{PROJECT}"


@pytest.fixture
def emulator() -> str:
    return shared_emulator_host("pubsub")


@pytest.fixture
def backend(emulator: str) -> Iterator[PubSubBackend]:
    opened = PubSubBackend(
        PROJECT,
        settings=Settings(pubsub_max_delivery_attempts=5),
        auto_create=True,
        names=MemoryNameRegistry(),
    )
    yield opened
    opened.close()


def new_queue() -> str:
    return f"dl-{uuid.uuid4().hex[:10]}"


def cli(emulator: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run(*args, "--url", URL, env=clean_env(PUBSUB_EMULATOR_HOST=emulator))


def dead_letter_by_releasing(
    queue: Queue, names: set[str], attempts: int = 5, tag: str | None = None
) -> None:
    """Lease (of `tag`) and release the named tasks until Pub/Sub dead-letters them."""
    for _ in range(attempts):
        deadline = time.monotonic() + 10
        released: set[str] = set()
        while released != names and time.monotonic() < deadline:
            for task in queue.lease(30, 100, tag=tag):
                queue.modify_lease(task, 0)
                if task.name in names:
                    released.add(task.name)
        assert released == names


def drain_names(queue: Queue, expected: int, timeout: float = 20) -> Counter[str]:
    """Lease and delete everything the queue hands out until `expected` tasks came."""
    names: Counter[str] = Counter()
    deadline = time.monotonic() + timeout
    while sum(names.values()) < expected and time.monotonic() < deadline:
        leased = queue.lease(60, 1000)
        names.update(t.name for t in leased if t.name)
        if leased:
            queue.delete(leased)
    names.update(t.name for t in queue.lease(60, 1000, deadline=2) if t.name)
    return names


def publish_dead_letters(backend: PubSubBackend, queue: str, count: int) -> None:
    """Dead letters as Pub/Sub writes them (its attributes included), without the wait."""
    backend.topology(queue)
    layout = backend.topology(queue).layout
    topic = backend.rpc.topic_path(layout.dead_letter_topic_id)
    first = time.time() - 3600
    messages = [
        PubsubMessagePb(
            data=f"payload {i}".encode(),
            attributes={
                "task_name": f"d{i:04}",
                **({"tag": f"tag{i % 3}"} if i % 3 else {}),
                SOURCE_DELIVERIES: "5",
                SOURCE_SUBSCRIPTION: layout.worker_subscription_id,
                SOURCE_PUBLISH_TIME: format_eta(first + i),
            },
        )
        for i in range(count)
    ]
    for start in range(0, count, 500):
        backend.rpc.publish(topic, messages[start : start + 500], queue=queue)


def test_tasks_looks_without_taking(backend: PubSubBackend, emulator: str) -> None:
    name = new_queue()
    queue = Queue(name, backend)
    queue.add([Task(b"\x1b[2Jhello", name=f"t{i}", tag="a" if i % 2 else None) for i in range(6)])
    result = cli(emulator, "tasks", name, "--json", "--payload")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["complete"] is False and data["shown"] == 6
    assert sorted(t["name"] for t in data["tasks"]) == [f"t{i}" for i in range(6)]
    first = next(t for t in data["tasks"] if t["name"] == "t1")
    assert first["tag"] == "a" and first["payload_bytes"] == 9 and first["retry_count"] == 1
    assert first["payload_preview"] == "\\x1b[2Jhello"
    tagged = json.loads(cli(emulator, "tasks", name, "--json", "--tag", "a").stdout)
    assert sorted(t["name"] for t in tagged["tasks"]) == ["t1", "t3", "t5"]
    # Still there for workers, one delivery attempt further on per look. The looks gave them
    # back a moment ago, and Pub/Sub (the emulator too) may not have every one ready to deliver
    # at once: a loaded machine's first lease had 4 of the 6, the next lease the other 2.
    leased: list[Task] = []
    give_up = time.monotonic() + 10
    while len(leased) < 6 and time.monotonic() < give_up:
        leased += queue.lease(60, 100)
    assert sorted(t.name for t in leased if t.name) == [f"t{i}" for i in range(6)]
    assert {t.name: t.retry_count for t in leased}["t1"] == 3


def test_looking_never_dead_letters_a_task(backend: PubSubBackend, emulator: str) -> None:
    name = new_queue()
    queue = Queue(name, backend)
    queue.add(Task(b"x", name="near"))
    dead_letter_by_releasing(queue, {"near"}, attempts=3)  # two attempts from the limit of 5
    assert cli(emulator, "tasks", name, "--json").returncode == 0
    for _ in range(3):
        assert [seen.delivery.name for seen in look(backend, name, tag=None, limit=5)] == ["near"]
    (task,) = queue.lease(60, 10)
    assert task.name == "near" and task.retry_count <= 2  # republished fresh, not dead-lettered
    listing = json.loads(cli(emulator, "dead-letters", name, "--json").stdout)
    assert listing["dead_letters"] == []


def test_dead_letters_say_why_and_redrive_keeps_name_tag_and_eta(
    backend: PubSubBackend, emulator: str
) -> None:
    name = new_queue()
    queue = Queue(name, backend)
    queue.add([Task(f"p{i}", name=f"t{i}", tag="a" if i % 2 else None) for i in range(6)])
    dead_letter_by_releasing(queue, {"t1", "t3", "t5"}, tag="a")
    rest = queue.lease(60, 100)
    assert sorted(t.name for t in rest if t.name) == ["t0", "t2", "t4"]
    for task in rest:
        queue.modify_lease(task, 0)
    listing = json.loads(cli(emulator, "dead-letters", name, "--json").stdout)
    rows = {row["name"]: row for row in listing["dead_letters"]}
    assert sorted(rows) == ["t1", "t3", "t5"]
    assert rows["t1"]["attempts"] == 5 and rows["t1"]["tag"] == "a"
    assert rows["t1"]["source_subscription"] == f"{name}-shard-{shard_of('a')}"
    limited = json.loads(cli(emulator, "dead-letters", name, "--json", "--limit", "2").stdout)
    assert len(limited["dead_letters"]) == 2
    # A future ETA is kept too: one dead letter carries one.
    dead_topic = backend.rpc.topic_path(backend.topology(name).layout.dead_letter_topic_id)
    eta = format_eta(time.time() + 3600)
    backend.rpc.publish(
        dead_topic,
        [PubsubMessagePb(data=b"later", attributes={"task_name": "later", "eta": eta})],
        queue=name,
    )
    moved = cli(emulator, "dead-letters", name, "--redrive", "--json")
    assert moved.returncode == 0, moved.stderr
    assert json.loads(moved.stdout)["redriven"] == 4
    back = queue.lease(60, 100)
    by_name = {t.name: t for t in back}
    assert sorted(by_name) == [f"t{i}" for i in range(6)]  # "later" waits for its ETA
    assert by_name["t1"].tag == "a" and by_name["t1"].payload == b"p1"
    assert by_name["t1"].retry_count == 1  # a fresh task: a full set of attempts again
    hidden = backend.rpc.subscription_path(f"{name}-workers")
    raw = backend.rpc.pull(hidden, 10, queue=name, wait=1, budget=5)
    assert raw == []  # the future task is hidden by the adapter until its ETA ...
    shown = json.loads(cli(emulator, "dead-letters", name, "--json").stdout)
    assert shown["dead_letters"] == []


def test_purge_asks_and_deletes_only_what_it_was_told(
    backend: PubSubBackend, emulator: str
) -> None:
    name = new_queue()
    publish_dead_letters(backend, name, 9)
    refused = cli(emulator, "dead-letters", name, "--purge")  # no terminal, no --yes
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert (
        len(json.loads(cli(emulator, "dead-letters", name, "--json").stdout)["dead_letters"]) == 9
    )
    some = cli(emulator, "dead-letters", name, "--purge", "--yes", "--tag", "tag1", "--json")
    assert json.loads(some.stdout)["purged"] == 3
    rest = cli(emulator, "dead-letters", name, "--purge", "--yes", "--json")
    assert json.loads(rest.stdout)["purged"] == 6
    assert json.loads(cli(emulator, "dead-letters", name, "--json").stdout)["dead_letters"] == []


def test_a_redrive_killed_between_publish_and_acknowledge_publishes_nothing_twice(
    backend: PubSubBackend,
) -> None:
    name = new_queue()
    publish_dead_letters(backend, name, 50)
    topic, dead, audit = _paths(backend, name)
    # The state a run killed after publishing a batch and before acknowledging it leaves.
    _ensure_audit(backend, name, topic, audit)
    kept, _ = pull_all(backend, name, dead, 20, lambda d: True)
    backend.rpc.publish(topic, [_copy(d) for d in kept], queue=name)
    # ... once the killed run's hold on those dead letters has run out.
    backend.rpc.modify(dead, [d.ack_id for d in kept], 0, queue=name)
    done = redrive(backend, name, tag=None, limit=10**9)
    assert (done.redriven, done.resumed) == (30, 20)
    names = drain_names(Queue(name, backend), 50)
    assert names == Counter({f"d{i:04}": 1 for i in range(50)})


@pytest.mark.slow
def test_redrive_survives_sigkill(backend: PubSubBackend, emulator: str) -> None:
    name = new_queue()
    count = 300
    publish_dead_letters(backend, name, count)
    env = clean_env(PUBSUB_EMULATOR_HOST=emulator)
    args = [PULLQUEUE, "dead-letters", name, "--url", URL, "--redrive"]
    first = subprocess.Popen(
        args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert first.stderr is not None
    for line in first.stderr:
        if line.startswith("redriven"):
            break
    time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    # Dead letters the killed run held come back once their ack deadline (30 s) has passed.
    held_until = time.monotonic() + DEAD_LETTER_ACK_DEADLINE + 2
    while True:
        again = subprocess.run([*args, "--json"], env=env, capture_output=True, text=True)
        assert again.returncode == 0, again.stderr
        left = json.loads(cli(emulator, "dead-letters", name, "--json").stdout)["dead_letters"]
        if not left and time.monotonic() > held_until:
            break
        time.sleep(max(min(held_until - time.monotonic(), 5.0), 0.0))
    names = drain_names(Queue(name, backend), count, timeout=60)
    assert sum(names.values()) == count  # nothing lost ...
    assert set(names.values()) == {1}  # ... and nothing twice
    audit = backend.rpc.subscription_path(f"{name}-redrive")
    with pytest.raises(gexc.NotFound):
        backend.rpc.subscriber.get_subscription(request={"subscription": audit})


def test_memory_keeps_no_dead_letters() -> None:
    result = run("dead-letters", "jobs", "--url", "memory://", "--json")
    assert result.returncode == 0
    data: dict[str, Any] = json.loads(result.stdout)
    assert data["dead_letters"] == [] and "keeps no dead letters" in data["note"]
    both = run("dead-letters", "jobs", "--url", "memory://", "--redrive", "--purge")
    assert both.returncode == 2


def test_tasks_on_memory_lists_every_task_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from pullqueue.cli import cli as command
    from pullqueue.registry import reset_default_backends

    monkeypatch.delenv("PULLQUEUE_URL", raising=False)
    reset_default_backends()
    try:
        queue = Queue("listed")
        queue.add([Task(b"x" * i, name=f"n{i}", tag="t" if i else None) for i in range(3)])
        queue.add(Task(b"later", name="later", countdown=3600))
        (leased,) = queue.lease(60, 1)
        result = CliRunner().invoke(command, ["tasks", "listed", "--json"])
        tagged = CliRunner().invoke(command, ["tasks", "listed", "--json", "--tag", "t"])
        one = CliRunner().invoke(command, ["tasks", "listed", "--json", "--limit", "1"])
    finally:
        reset_default_backends()
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["complete"] is True and data["shown"] == 4
    states = {t["name"]: t["state"] for t in data["tasks"]}
    assert states == {"n0": "leased", "n1": "available", "n2": "available", "later": "scheduled"}
    assert leased.name == "n0"
    assert {t["name"]: t["retry_count"] for t in data["tasks"]}["n0"] == 1
    assert sorted(t["name"] for t in json.loads(tagged.stdout)["tasks"]) == ["n1", "n2"]
    assert [t["name"] for t in json.loads(one.stdout)["tasks"]] == ["n1"]


@pytest.mark.parametrize(("answer", "left"), [("n", 3), ("y", 0)])
def test_purge_on_a_terminal_asks_first(
    backend: PubSubBackend, emulator: str, answer: str, left: int
) -> None:
    name = new_queue()
    publish_dead_letters(backend, name, 3)
    main, child = pty.openpty()
    try:
        asked = subprocess.Popen(
            [PULLQUEUE, "dead-letters", name, "--url", URL, "--purge"],
            env=clean_env(PUBSUB_EMULATOR_HOST=emulator),
            stdin=child,
            stdout=child,
            stderr=child,
        )
        os.write(main, f"{answer}\n".encode())
        asked.wait(60)
    finally:
        os.close(child)
        os.close(main)
    assert asked.returncode == (0 if answer == "y" else 1)
    listing = json.loads(cli(emulator, "dead-letters", name, "--json").stdout)
    assert len(listing["dead_letters"]) == left
