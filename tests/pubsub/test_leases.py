"""Leases on the Pub/Sub emulator: big batches, short and long leases, renewal, release, stale acks.

Pub/Sub holds a message at most 600 s and its subscriptions at least 10 s; these tests show a
lease still starts and ends when the caller asked, and that a lease that is gone is reported.
"""

from __future__ import annotations

import threading
import time

import pytest

from pullqueue import Queue, Task, TaskLeaseExpiredError, TombstonedTaskError
from tests.pubsub.conftest import MakeBackend
from tests.support.emulators import free_port

pytestmark = pytest.mark.unchecked_names  # names are labels here; no registry


def _wait_for(queue: Queue, timeout: float, lease_seconds: float = 60) -> tuple[list[Task], float]:
    """Lease until something comes back; the tasks and the seconds it took."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        leased = queue.lease(lease_seconds, 1000)
        if leased:
            return leased, time.monotonic() - start
        time.sleep(0.1)
    return [], time.monotonic() - start


def test_one_call_leases_1000_tasks(make_backend: MakeBackend) -> None:
    queue = Queue("bulk", make_backend())
    added = set()
    for _ in range(11):
        added |= {t.name for t in queue.add([Task(b"x" * 64) for _ in range(100)])}
    leased = queue.lease(60, 1000)
    assert len(leased) == 1000
    assert len({t.name for t in leased}) == 1000 and {t.name for t in leased} <= added
    assert all(t.retry_count == 1 and t.lease_token for t in leased)
    rest = queue.lease(60, 1000)
    assert len(rest) == 100 and not {t.name for t in rest} & {t.name for t in leased}


def test_lease_shorter_than_the_subscription_minimum_ends_on_time(
    make_backend: MakeBackend,
) -> None:
    holder = Queue("short", make_backend())
    other = Queue("short", make_backend())
    holder.add(Task(b"x", name="brief"))
    assert len(holder.lease(1, 10)) == 1
    assert other.lease(60, 10) == []
    back, waited = _wait_for(other, timeout=8)
    assert [t.name for t in back] == ["brief"]
    # Pub/Sub's smallest subscription deadline is 10 s; the lease asked for 1 s.
    assert waited < 3.5
    assert back[0].retry_count == 2


def test_lease_longer_than_600_s_is_held_past_its_ack_deadline(make_backend: MakeBackend) -> None:
    # The window is four keeper periods, as by default (60 s and 15 s): a renewal is sent when
    # the deadline is two periods away. At 2 s and 0.5 s a pass delayed a second by a loaded
    # host (CI) came after the deadline, and Pub/Sub took the lease back.
    holder_backend = make_backend(pubsub_keeper_period=1.0, pubsub_lease_window=4)
    holder = Queue("long", holder_backend)
    other = Queue("long", make_backend())
    holder.add(Task(b"x", name="week"))
    (task,) = holder.lease(7 * 24 * 3600, 10)
    assert task.eta_posix is not None and task.eta_posix > time.time() + 7 * 24 * 3600 - 60
    # Each Pub/Sub deadline is 4 s; 10 s later the keeper has renewed it at least three times.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        assert other.lease(60, 10) == []
        time.sleep(0.3)
    holder.modify_lease(task, 7 * 24 * 3600)
    assert holder.delete(task)[0].was_deleted
    time.sleep(4.5)  # past the last window: deleted, not merely held
    assert other.lease(60, 10) == []


def test_keeper_ends_a_long_lease_at_its_end(make_backend: MakeBackend) -> None:
    backend = make_backend(pubsub_keeper_period=0.5, pubsub_lease_window=2)
    holder = Queue("ending", backend)
    other = Queue("ending", make_backend())
    holder.add(Task(b"x", name="ends"))
    assert len(holder.lease(3600, 10)) == 1
    # Stand in for a lease that has run almost all of its hour: 4 s are left, two windows.
    (lease,) = backend._book.leases("ending")
    lease.expires = time.time() + 4
    start = time.monotonic()
    back, _ = _wait_for(other, timeout=10)
    assert [t.name for t in back] == ["ends"]
    assert 3.8 <= time.monotonic() - start < 6


def test_modify_lease_extends_releases_and_refuses_a_stale_lease(
    make_backend: MakeBackend,
) -> None:
    holder = Queue("modify", make_backend())
    other = Queue("modify", make_backend())
    holder.add([Task(b"a", name="a"), Task(b"b", name="b")])
    a, b = sorted(holder.lease(2, 10), key=lambda t: t.name or "")
    before = time.time()
    holder.modify_lease(a, 30)
    assert a.eta_posix is not None and a.eta_posix >= before + 30
    holder.modify_lease(b, 0)
    (again,) = other.lease(60, 10)
    assert again.name == "b" and again.retry_count == 2
    with pytest.raises(TaskLeaseExpiredError):
        holder.modify_lease(b, 10)
    time.sleep(2.5)
    assert other.lease(60, 10) == []  # a's lease was extended to 30 s
    other.delete(again)
    holder.delete(a)
    with pytest.raises(TombstonedTaskError):
        holder.modify_lease(a, 10)


def test_a_stale_delete_raises_and_loses_nothing(make_backend: MakeBackend) -> None:
    first = Queue("stale", make_backend())
    second = Queue("stale", make_backend())
    first.add([Task(b"x", name="slow"), Task(b"y", name="quick")])
    tasks = sorted(first.lease(1, 10), key=lambda t: t.name or "")
    quick, slow = tasks
    first.delete(quick)
    time.sleep(2.5)
    (taken,) = second.lease(60, 10)
    assert taken.name == "slow" and taken.retry_count == 2
    with pytest.raises(TaskLeaseExpiredError) as raised:
        first.delete(slow)
    assert raised.value.task == "slow" and raised.value.queue == "stale"
    with pytest.raises(TaskLeaseExpiredError):
        first.modify_lease(slow, 60)
    assert second.delete(taken)[0].was_deleted


def test_delete_of_many_reports_the_stale_one_and_deletes_the_rest(
    make_backend: MakeBackend,
) -> None:
    first = Queue("mixed", make_backend())
    second = Queue("mixed", make_backend())
    first.add([Task(b"x", name="one"), Task(b"y", name="two")])
    (old,) = first.lease(1, 1)
    time.sleep(2.5)
    both = first.lease(60, 10)
    assert {t.name for t in both} == {"one", "two"}
    # `old` is the first lease of a task leased again since: that lease is stale.
    (fresh,) = [t for t in both if t.name != old.name]
    with pytest.raises(TaskLeaseExpiredError) as raised:
        first.delete([old, fresh])
    assert raised.value.task == old.name
    assert fresh.was_deleted and not old.was_deleted
    assert second.lease(60, 10) == []


def test_closing_gives_leases_back(make_backend: MakeBackend) -> None:
    closing = make_backend()
    queue = Queue("closing", closing)
    queue.add([Task(b"x") for _ in range(5)])
    assert len(queue.lease(3600, 10)) == 5
    closing.close()
    other = Queue("closing", make_backend())
    back = other.lease(60, 10)
    assert len(back) == 5 and all(t.retry_count == 2 for t in back)


def test_a_lease_the_keeper_could_not_renew_is_reported_not_kept(
    make_backend: MakeBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = make_backend(pubsub_keeper_period=0.5, pubsub_lease_window=2)
    holder = Queue("lapsed", backend)
    other = Queue("lapsed", make_backend())
    holder.add(Task(b"x", name="lapsed"))
    (task,) = holder.lease(3600, 10)
    # Cut the holder off from Pub/Sub for longer than a window: its renewals fail.
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", f"127.0.0.1:{free_port()}")
    healthy, backend.rpc = backend.rpc, type(backend.rpc)(backend.project, 0.3)
    try:
        back, _ = _wait_for(other, timeout=8)
    finally:
        backend.rpc.close()
        backend.rpc = healthy
    monkeypatch.undo()
    assert [t.name for t in back] == ["lapsed"]
    time.sleep(1.0)  # a keeper pass on the healthy connection finds the lease gone
    with pytest.raises(TaskLeaseExpiredError):
        holder.modify_lease(task, 60)
    with pytest.raises(TaskLeaseExpiredError):
        holder.delete(task)
    assert other.delete(back)[0].was_deleted


def _pubsub_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("pullqueue-pubsub-")}


def test_close_stops_the_keeper_thread(make_backend: MakeBackend) -> None:
    before = _pubsub_threads()  # backends other tests left open keep theirs
    backend = make_backend(pubsub_keeper_period=0.5, pubsub_lease_window=2)
    queue = Queue("threads", backend)
    queue.add(Task(b"x"))
    queue.lease(3600, 10)
    started = _pubsub_threads() - before
    assert any(t.name == "pullqueue-pubsub-lease-keeper" for t in started)
    backend.close()
    assert not [t for t in started if t.is_alive()], "close() must stop this backend's threads"


def test_a_lease_as_long_as_the_subscription_deadline_holds_the_same(
    make_backend: MakeBackend,
) -> None:
    holder = Queue("sixty", make_backend(pubsub_ack_deadline=20))
    other = Queue("sixty", make_backend())
    holder.add([Task(b"x", name="a"), Task(b"y", name="b")])
    before = time.time()
    # 20 s is the subscription's own deadline: the pull already set it.
    leased = holder.lease(20, 10)
    after = time.time()
    assert len(leased) == 2
    for task in leased:
        assert task.eta_posix is not None
        assert before + 20 - 0.25 <= task.eta_posix <= after + 20
    assert other.lease(60, 10) == []
    holder.modify_lease(leased[0], 1)
    time.sleep(2.2)
    (back,) = other.lease(60, 10)
    assert back.name == leased[0].name and back.retry_count == 2
    assert holder.delete(leased[1])[0].was_deleted
