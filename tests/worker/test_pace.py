"""LeasePace: when the next lease is due, from measured lease and handler times."""

from __future__ import annotations

from pullqueue.worker.pace import EARLY_BYTES, LeasePace


def test_nothing_is_due_early_before_a_lease_and_a_handler_call_were_timed() -> None:
    pace = LeasePace()
    assert not pace.due(0, 0, 4)
    pace.leased(0.1, 1000)
    assert not pace.due(0, 0, 4)
    pace.handled(0.001)
    assert pace.due(0, 0, 4)


def test_the_next_lease_is_due_once_the_queued_work_lasts_less_than_two_leases() -> None:
    pace = LeasePace()
    pace.leased(0.1, 1000)
    pace.handled(0.01)
    # 4 threads at 10 ms a task start 400 tasks a second: 0.2 s of leases is 80 tasks.
    assert pace.due(70, 4, 4)
    assert not pace.due(80, 4, 4)
    # A slow handler: what runs keeps the threads busy past two leases.
    slow = LeasePace()
    slow.leased(0.1, 1000)
    slow.handled(1.0)
    assert not slow.due(0, 4, 4)
    assert slow.due(0, 1, 4)


def test_the_times_are_moving_averages_of_the_latest_measures() -> None:
    pace = LeasePace()
    pace.leased(1.0, 1000)
    for _ in range(30):
        pace.leased(0.1, 1000)
    assert pace.lease_seconds is not None and abs(pace.lease_seconds - 0.1) < 0.01
    pace.handled(0.5)
    pace.handled(0.0)
    assert pace.item_seconds == 0.4


def test_nothing_starts_early_past_the_bytes_queued_and_on_their_way() -> None:
    pace = LeasePace()
    batch = 10 * 2**20
    pace.leased(0.1, batch)
    pace.handled(0.001)
    assert pace.due(0, 4, 4, queued_bytes=0, leases=1)
    # Two leases in flight and this one, of 10 MiB each, beside what is queued.
    assert pace.due(10, 4, 4, queued_bytes=EARLY_BYTES - 3 * batch, leases=3)
    assert not pace.due(10, 4, 4, queued_bytes=EARLY_BYTES - 3 * batch + 1, leases=3)
