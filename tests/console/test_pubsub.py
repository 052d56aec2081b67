"""The console on the Pub/Sub emulator: the provisioned queues and nothing else, figures unknown
with the emulator's reason (never 0), a look at the tasks only when asked (and what it costs),
delete and purge that change exactly what they say, dead letters with their last error."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from pullqueue import Queue, Settings, Task
from pullqueue.adapters.pubsub import PubSubBackend
from pullqueue.console import create_app
from pullqueue.dedupe.memory import MemoryNameRegistry
from tests.console.conftest import Browser
from tests.support.emulators import shared_emulator_host

SETTINGS = {"pubsub_max_delivery_attempts": 5}


@pytest.fixture
def project() -> str:
    shared_emulator_host("pubsub")
    return f"pq-console-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def producer(project: str) -> Iterator[PubSubBackend]:
    """The service's side: provisions queues and adds named tasks (with a name registry)."""
    backend = PubSubBackend(
        project, settings=Settings(**SETTINGS), auto_create=True, names=MemoryNameRegistry()
    )
    yield backend
    backend.close()


@pytest.fixture
def browser(project: str) -> Iterator[Browser]:
    """The console, in the operator's own process: it provisions nothing."""
    viewer = PubSubBackend(project, settings=Settings(**SETTINGS), auto_create=False)
    with TestClient(create_app(viewer, sample_in_background=False)) as client:
        yield Browser(client)
    viewer.close()


def add(producer: PubSubBackend, queue: str, count: int, tags: list[str | None]) -> None:
    Queue(queue, producer).add(
        [Task(f"payload-{i}", name=f"t{i}", tag=tags[i % len(tags)]) for i in range(count)]
    )


def leasable(producer: PubSubBackend, queue: str) -> set[str]:
    """Every task name a worker can lease now (then given back)."""
    q = Queue(queue, producer)
    found: dict[str, Task] = {}
    deadline = time.monotonic() + 10
    empty = 0
    while empty < 3 and time.monotonic() < deadline:
        tasks = q.lease(30, 100)
        empty = 0 if tasks else empty + 1
        found.update((t.name or "", t) for t in tasks)
    for task in found.values():
        q.modify_lease(task, 0)
    return set(found)


def looked(browser: Browser, queue: str, tag: str | None = None) -> list[tuple[str, int]]:
    """(name, retries) of the tasks one look shows."""
    browser.get(f"/queues/{queue}")
    data = {"tag": tag} if tag else {}
    html = browser.post(f"/queues/{queue}/look", data).text
    rows = re.findall(r'data-name="([^"]+)">.*?<td class="num">(\d+)</td>', html, re.S)
    return [(name, int(retries)) for name, retries in rows]


def test_queues_page_lists_the_provisioned_queues_with_unknown_figures(
    producer: PubSubBackend, browser: Browser
) -> None:
    add(producer, "mail", 3, [None])
    add(producer, "billing", 2, ["acme"])
    # Not queues: a topic and a subscription pullqueue did not make (the name looks like a
    # worker subscription, but its topic is another).
    rpc = producer.rpc
    rpc.publisher.create_topic(request={"name": rpc.topic_path("unrelated")})
    rpc.subscriber.create_subscription(
        request={
            "name": rpc.subscription_path("other-workers"),
            "topic": rpc.topic_path("unrelated"),
        }
    )
    page = browser.get("/").text
    assert re.findall(r'data-queue="([^"]+)">\s*<td>', page) == ["billing", "mail"]
    row = page.split('data-queue="mail"', 1)[1].split("</tr>", 1)[0]
    assert ">0<" not in row and row.count('unknown<sup class="mark">') == 5
    # Each reason once, under the table; the cells carry it on hover.
    notes = page.split('<tr class="notes">', 1)[1]
    assert notes.count("the Pub/Sub emulator has no Cloud Monitoring") == 1
    assert notes.count("counts neither leases nor completions") == 1
    assert 'title="the Pub/Sub emulator has no Cloud Monitoring' in row


def test_tasks_are_shown_only_when_asked_and_each_look_costs_an_attempt(
    producer: PubSubBackend, browser: Browser
) -> None:
    add(producer, "mail", 6, ["alice", "bob"])
    page = browser.get("/queues/mail").text
    assert 'data-name="' not in page  # no look without asking
    assert "costs one delivery attempt" in page
    subscriptions = browser.get("/queues/mail/figures?part=subscriptions").text
    assert "<html" not in subscriptions
    assert ">mail-workers<" in subscriptions and ">mail-shard-15<" in subscriptions
    assert ">mail-workers<" in page
    first = dict(looked(browser, "mail"))
    assert set(first) == {f"t{i}" for i in range(6)} and set(first.values()) == {1}
    second = dict(looked(browser, "mail"))
    assert set(second.values()) == {2}
    assert [n for n, _ in looked(browser, "mail", "bob")] == ["t1", "t3", "t5"]
    assert leasable(producer, "mail") == {f"t{i}" for i in range(6)}  # given back


def test_delete_a_task_from_a_look(producer: PubSubBackend, browser: Browser) -> None:
    add(producer, "mail", 5, [None, "bob"])
    browser.get("/queues/mail")
    html = browser.post("/queues/mail/look", {}).text
    form = html.split('data-name="t3"', 1)[1].split("</form>", 1)[0]
    fields = dict(re.findall(r'name="(subscription|message_id)" value="([^"]+)"', form))
    done = browser.post("/queues/mail/delete-task", {"name": "t3", "confirm": "mail", **fields})
    assert "deleted task &#39;t3&#39;" in done.text
    assert leasable(producer, "mail") == {"t0", "t1", "t2", "t4"}
    without = browser.post("/queues/mail/delete-task", {"name": "t1", "confirm": "mail"})
    assert without.status_code == 409 and "look at the tasks" in without.text


def test_purge_empties_the_queue(producer: PubSubBackend, browser: Browser) -> None:
    add(producer, "mail", 4, [None])
    add(producer, "keep", 2, [None])
    browser.get("/queues/mail")
    done = browser.post("/queues/mail/purge", {"confirm": "mail"})
    assert done.status_code == 200 and "purged queue &#39;mail&#39;" in done.text
    assert leasable(producer, "mail") == set()
    assert leasable(producer, "keep") == {"t0", "t1"}


def dead_letter(
    producer: PubSubBackend, queue: str, name: str, error: str, tag: str | None = None
) -> None:
    """Release the task (leasing only `tag`) until its last attempt, then fail it with `error`
    (the other tasks of its batch are released: a lease's tasks come in no set order)."""
    q = Queue(queue, producer)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        leased = q.lease(30, 100, tag=tag)
        for i, task in enumerate(leased):
            if task.name == name and producer.final_attempt(queue, task):
                assert producer.dead_letter(queue, task, error)
                for other in leased[i + 1 :]:
                    q.modify_lease(other, 0)
                return
            q.modify_lease(task, 0)
    raise AssertionError(f"{name} never reached its last attempt")


def test_dead_letters_with_their_last_error_redrive_and_purge(
    producer: PubSubBackend, browser: Browser
) -> None:
    add(producer, "mail", 2, ["doomed", None])
    dead_letter(producer, "mail", "t0", "ValueError: <script>bad</script>", tag="doomed")
    browser.get("/queues/mail")
    listing = browser.get("/queues/mail/dead-letters").text
    assert "t0" in listing and "ValueError: &lt;script&gt;bad&lt;/script&gt;" in listing
    assert leasable(producer, "mail") == {"t1"}
    page = browser.get("/queues/mail").text
    assert "Redrive dead letters" in page and "Purge dead letters" in page
    done = browser.post("/queues/mail/redrive-dead-letters", {"confirm": "mail"})
    assert "put 1 dead letters back" in done.text
    assert leasable(producer, "mail") == {"t0", "t1"}
    dead_letter(producer, "mail", "t1", "boom")
    browser.get("/queues/mail")
    purged = browser.post("/queues/mail/purge-dead-letters", {"confirm": "mail"})
    assert "purged 1 dead letters" in purged.text
    assert "no dead letters" in browser.get("/queues/mail/dead-letters").text
    assert leasable(producer, "mail") == {"t0"}


def test_the_command_serves_a_pubsub_project(producer: PubSubBackend, project: str) -> None:
    import httpx2

    from tests.cli.support import clean_env
    from tests.console.test_safety import start_console

    add(producer, "mail", 2, [None])
    env = clean_env(PUBSUB_EMULATOR_HOST=shared_emulator_host("pubsub"))
    proc, address = start_console("--url", f"pubsub://{project}", "--read-only", env=env)
    try:
        page = httpx2.get(address, timeout=30)
        assert page.status_code == 200 and 'data-queue="mail"' in page.text
        assert "the Pub/Sub emulator has no Cloud Monitoring" in page.text
    finally:
        proc.terminate()
        proc.wait(15)
    assert proc.returncode == 0  # SIGTERM is its normal end, as Ctrl-C
