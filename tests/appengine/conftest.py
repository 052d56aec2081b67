"""Fixtures for the appengine:// adapter tests: a testbed taskqueue stub on a manual clock."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pullqueue import Queue
from tests.support.appengine_testbed import AppEngineTestbed, appengine_testbed


@pytest.fixture
def bed() -> Iterator[AppEngineTestbed]:
    with appengine_testbed(["pulls"]) as active:
        yield active


@pytest.fixture
def queue(bed: AppEngineTestbed) -> Queue:
    return Queue("pulls", bed.backend())
