"""Lease calls stay under the service's 10 requests per queue per second.

The fake service refuses lease calls beyond its per-queue quota in real time, as Cloud Tasks does
with RESOURCE_EXHAUSTED; these tests measure that the adapter's pacing keeps under it and that
refusals, when they happen anyway, are backed off rather than handed to the worker.
"""

from __future__ import annotations

import time

import pytest

from pullqueue import Queue, TransientError
from tests.support.cloudtasks_fake import CloudTasksModel, ManualClock, cloudtasks_service


def test_a_burst_of_leases_is_paced_under_the_quota(clock: ManualClock) -> None:
    with cloudtasks_service(clock=clock, queues=["burst"]) as service:
        queue = Queue("burst", service.backend())
        started = time.monotonic()

        results = [queue.lease(10, 1) for _ in range(15)]

        assert results == [[]] * 15
        assert time.monotonic() - started >= 1.3
        assert service.refused_leases == 0


def test_queues_are_paced_separately(clock: ManualClock) -> None:
    with cloudtasks_service(clock=clock, queues=["one", "two"]) as service:
        backend = service.backend(lease_requests_per_second=2)
        started = time.monotonic()

        Queue("one", backend).lease(10, 1)
        Queue("two", backend).lease(10, 1)

        assert time.monotonic() - started < 0.4


def test_without_pacing_refusals_are_backed_off_not_raised(clock: ManualClock) -> None:
    with cloudtasks_service(clock=clock, queues=["eager"]) as service:
        service.seed("eager", b"work", name="job", countdown=-1)
        backend = service.backend(lease_requests_per_second=1000, backoff_initial=0.05)
        queue = Queue("eager", backend)

        results = [queue.lease(10, 1) for _ in range(14)]

        assert service.refused_leases >= 1
        assert [t.name for batch in results for t in batch] == ["job"]


def test_a_lease_that_cannot_get_a_slot_before_its_deadline_is_transient(
    service: CloudTasksModel,
) -> None:
    backend = service.backend(lease_requests_per_second=0.5)
    queue = Queue("pulls", backend)
    queue.lease(10, 1)

    with pytest.raises(TransientError, match=r"0\.5/s per queue"):
        queue.lease(10, 1, deadline=0.5)
    assert service.rpc_count("LeaseTasks") == 1
