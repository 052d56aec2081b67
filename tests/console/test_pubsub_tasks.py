"""A task's page, the search and the bulk actions of a tag on the Pub/Sub emulator: a search is a
look (a POST, said on the page), a found task can be deleted by its message id, deleting a tag
acknowledges exactly its tasks across its shard and the worker subscription, and a tag's redrive
puts back only that tag's dead letters."""

from __future__ import annotations

import re

from google.pubsub_v1 import PubsubMessage
from starlette.testclient import TestClient

from pullqueue import Queue, Task
from pullqueue.adapters.pubsub import PubSubBackend
from pullqueue.console import create_app
from tests.console.conftest import Browser
from tests.console.test_pubsub import add, dead_letter, leasable
from tests.console.test_pubsub import browser as browser
from tests.console.test_pubsub import producer as producer
from tests.console.test_pubsub import project as project


def test_a_task_is_found_by_name_within_a_look_and_deleted_by_its_id(
    producer: PubSubBackend,
    browser: Browser,
) -> None:
    add(producer, "mail", 6, [None, "red"])
    offer = browser.get("/queues/mail/task?name=t3")
    assert offer.status_code == 200 and 'id="look-for-task"' in offer.text
    assert "cannot fetch a task by name" in offer.text
    assert browser.get("/queues/mail/find?name=t3").status_code == 200  # GET searches nothing
    page = browser.post("/queues/mail/find", {"name": "t3"}).text
    assert 'id="attr-name">t3<' in page and "searched within one look" in page
    assert "payload-3" in page and 'href="data:application/octet-stream;base64,' in page
    assert 'id="run-now"' not in page  # only the holder can change an ack deadline
    message_id = re.search(r'name="message_id" value="([^"]+)"', page)
    subscription = re.search(r'name="subscription" value="([^"]+)"', page)
    assert message_id and subscription
    done = browser.post(
        "/queues/mail/delete-task",
        {
            "name": "t3",
            "subscription": subscription.group(1),
            "message_id": message_id.group(1),
            "confirm": "mail",
        },
    )
    assert "deleted task &#39;t3&#39;" in done.text
    assert leasable(producer, "mail") == {"t0", "t1", "t2", "t4", "t5"}


def test_find_by_payload_substring_within_a_look(
    producer: PubSubBackend,
    browser: Browser,
) -> None:
    add(producer, "mail", 12, [None])
    browser.get("/queues/mail")
    html = browser.post("/queues/mail/find", {"payload": "payload-1"}).text
    assert set(re.findall(r'class="found-task" data-name="([^"]+)"', html)) == {"t1", "t10", "t11"}
    assert "searched within one look: 12 tasks pulled" in html
    forged = browser.client.post("/queues/mail/find", data={"payload": "x"})
    assert forged.status_code == 403  # a look costs attempts: CSRF-checked like any POST


def test_delete_a_tag_acknowledges_exactly_its_tasks(
    producer: PubSubBackend,
    browser: Browser,
) -> None:
    add(producer, "mail", 30, ["alice", "bob", None])
    # A publisher that knows only the queue topic: an alice task on the worker subscription.
    topic = producer.topology("mail").topic
    producer.rpc.publisher.publish(
        topic=topic,
        messages=[PubsubMessage(data=b"foreign", attributes={"task_name": "f1", "tag": "alice"})],
    )
    browser.get("/queues/mail?tag=alice")
    done = browser.post("/queues/mail/delete-tag", {"tag": "alice", "confirm": "mail"})
    assert "deleted 11 tasks with tag &#39;alice&#39;" in done.text
    assert "not visible to a pull" in done.text
    left = leasable(producer, "mail")
    assert left == {f"t{i}" for i in range(30) if i % 3 != 0}
    again = browser.post("/queues/mail/delete-tag", {"tag": "alice", "confirm": "mail"})
    assert "deleted 0 tasks" in again.text


def test_make_future_tasks_available_is_refused_on_pubsub(
    producer: PubSubBackend,
    browser: Browser,
) -> None:
    add(producer, "mail", 3, ["alice"])
    page = browser.get("/queues/mail?tag=alice").text
    assert 'id="run-tag-now"' not in page and 'id="redrive-tag"' in page
    refused = browser.post("/queues/mail/run-tag-now", {"tag": "alice", "confirm": "mail"})
    assert refused.status_code == 409 and "nothing was changed" in refused.text


def test_redrive_only_the_dead_letters_of_a_tag(
    producer: PubSubBackend,
    browser: Browser,
) -> None:
    Queue("mail", producer).add(
        [Task(b"a", name="a1", tag="alpha"), Task(b"b", name="b1", tag="beta")]
    )
    dead_letter(producer, "mail", "a1", "boom", tag="alpha")
    dead_letter(producer, "mail", "b1", "boom", tag="beta")
    browser.get("/queues/mail?tag=alpha")
    done = browser.post(
        "/queues/mail/redrive-tag-dead-letters", {"tag": "alpha", "confirm": "mail"}
    )
    assert "put 1 dead letters with tag &#39;alpha&#39; back" in done.text
    assert leasable(producer, "mail") == {"a1"}
    listing = browser.get("/queues/mail/dead-letters").text
    assert "b1" in listing and "a1" not in listing


def test_a_pause_survives_a_console_restart(
    producer: PubSubBackend,
    browser: Browser,
    project: str,
) -> None:
    add(producer, "mail", 2, [None])
    browser.get("/queues/mail")
    done = browser.post("/queues/mail/pause", {"confirm": "mail"})
    assert "paused queue &#39;mail&#39;" in done.text
    # A new console process: a backend of its own, nothing remembered but Pub/Sub.
    restarted = PubSubBackend(project, auto_create=False)
    try:
        with TestClient(create_app(restarted, sample_in_background=False)) as client:
            assert 'id="paused-banner"' in client.get("/queues/mail").text
            assert 'class="paused"' in client.get("/").text
            assert client.get("/api/queues/mail").json()["stats"]["paused"] is True
    finally:
        restarted.close()
    assert Queue("mail", producer).lease(60, 10, deadline=0.1) == []
