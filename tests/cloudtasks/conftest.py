"""Fixtures for the cloudtasks:// adapter tests: a fake Cloud Tasks service on a manual clock."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pullqueue import Queue
from pullqueue.adapters.cloudtasks import CloudTasksBackend
from tests.support.cloudtasks_fake import CloudTasksModel, ManualClock, cloudtasks_service


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def service(clock: ManualClock) -> Iterator[CloudTasksModel]:
    with cloudtasks_service(clock=clock, queues=["pulls"]) as model:
        yield model


@pytest.fixture
def backend(service: CloudTasksModel) -> Iterator[CloudTasksBackend]:
    backend = service.backend()
    yield backend
    backend.close()


@pytest.fixture
def queue(backend: CloudTasksBackend) -> Queue:
    return Queue("pulls", backend)
