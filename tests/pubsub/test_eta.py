"""ETAs on Pub/Sub: a task is never handed out before it is due, and waiting never dead-letters it.

Pub/Sub has no delayed delivery; the adapter hides a task that is not due with its ack deadline,
which costs a delivery attempt per deferral, and republishes a task that nears the dead-letter
limit while it waits.
"""

from __future__ import annotations

import datetime as dt
import random
import time

import pytest

from pullqueue import Queue, Task
from pullqueue.adapters.pubsub.layout import ATTR_ETA
from pullqueue.adapters.pubsub.wire import format_eta, parse_eta
from tests.pubsub.conftest import MakeBackend, raw_pull

pytestmark = pytest.mark.unchecked_names  # names are labels here; no registry


def test_a_task_is_never_leased_before_its_eta(make_backend: MakeBackend) -> None:
    queue = Queue("later", make_backend())
    rng = random.Random(3)
    due: dict[str, float] = {}
    tasks = []
    for i in range(30):
        wait = rng.uniform(0.3, 3.5)
        if i % 2:
            tasks.append(Task(b"c", name=f"c{i}", countdown=wait))
        else:
            eta = dt.datetime.fromtimestamp(time.time() + wait, tz=dt.timezone.utc)
            tasks.append(Task(b"e", name=f"e{i}", eta=eta))
    for task in queue.add(tasks):
        assert task.name is not None and task.eta_posix is not None
        due[task.name] = task.eta_posix
    leased_at: dict[str, float] = {}
    start = time.monotonic()
    while len(leased_at) < len(due) and time.monotonic() - start < 15:
        for task in queue.lease(60, 100):
            assert task.name is not None
            leased_at[task.name] = time.time()
            assert task.retry_count == 1
        time.sleep(0.05)
    assert set(leased_at) == set(due)
    for name, at in leased_at.items():
        assert at >= due[name], f"{name} leased {due[name] - at:.3f} s early"
        # Hidden with whole-second ack deadlines: at most about a second late.
        assert at - due[name] < 2.0, f"{name} leased {at - due[name]:.3f} s late"


def test_the_eta_attribute_is_rfc3339_utc_and_absent_without_eta_or_countdown(
    make_backend: MakeBackend, raw: tuple[object, object]
) -> None:
    _, subscriber = raw
    backend = make_backend()
    queue = Queue("wire", backend)
    eta = dt.datetime(2030, 1, 2, 3, 4, 5, 250000, tzinfo=dt.timezone.utc)
    queue.add([Task(b"now", name="now"), Task(b"later", name="later", countdown=29 * 86400)])
    queue.add(Task(b"past", name="past", eta=dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc)))
    received = raw_pull(subscriber, backend.topology("wire").workers)  # type: ignore[arg-type]
    attributes = {m.message.attributes["task_name"]: dict(m.message.attributes) for m in received}
    assert ATTR_ETA not in attributes["now"]
    assert attributes["past"][ATTR_ETA] == "2020-01-01T00:00:00.000000Z"
    later = parse_eta(attributes["later"][ATTR_ETA])
    assert later is not None and abs(later - (time.time() + 29 * 86400)) < 5
    assert attributes["later"][ATTR_ETA].endswith("Z")
    assert format_eta(eta.timestamp()) == "2030-01-02T03:04:05.250000Z"
    assert parse_eta("2030-01-02T04:04:05.25+01:00") == eta.timestamp()
    assert parse_eta("2030-01-02T03:04:05.250000000Z") == eta.timestamp()
    assert parse_eta("tomorrow") is None


def test_waiting_for_an_eta_never_dead_letters_the_task(
    make_backend: MakeBackend, raw: tuple[object, object]
) -> None:
    _, subscriber = raw
    # Five delivery attempts before dead-lettering, and one-second deferrals: an ETA 8 s ahead
    # needs about eight deferrals, so the task must be republished on the way.
    backend = make_backend(pubsub_max_delivery_attempts=5, pubsub_max_deferral=1)
    queue = Queue("patient", backend)
    (task,) = [queue.add(Task(b"x", name="patient", countdown=8))]
    assert task.eta_posix is not None
    leased: list[Task] = []
    start = time.monotonic()
    while not leased and time.monotonic() - start < 20:
        leased = queue.lease(60, 10)
        time.sleep(0.2)
    assert [t.name for t in leased] == ["patient"]
    assert time.time() >= task.eta_posix
    assert leased[0].retry_count == 1 and leased[0].payload == b"x"
    dead_letters = backend.rpc.subscription_path(
        backend.topology("patient").layout.dead_letter_subscription_id
    )
    assert raw_pull(subscriber, dead_letters) == []  # type: ignore[arg-type]
