"""The legacy queue keeps its own pause: pullqueue refuses to pause it, with a typed error saying
where to pause it instead, and changes nothing."""

from __future__ import annotations

import pytest

from pullqueue import Queue, Task
from pullqueue import pause as pausing
from pullqueue.adapters.cloudtasks import CloudTasksBackend
from pullqueue.inspection import pause_state, pause_text
from tests.support.cloudtasks_fake import ManualClock


def test_pause_is_refused_with_where_to_pause_instead(
    backend: CloudTasksBackend, clock: ManualClock
) -> None:
    queue = Queue("pulls", backend)
    queue.add(Task(b"x"))
    for change in (pausing.pause, pausing.resume):
        with pytest.raises(pausing.PauseNotSupportedError) as refused:
            change(backend, "pulls")
        assert "gcloud tasks queues pause" in str(refused.value)
        assert "pulls" in str(refused.value)
    assert pause_state(backend, "pulls") == (None, None)
    assert "keeps no pause" in pause_text(backend, "pulls")
    clock.advance(1)
    assert len(queue.lease(60, 10)) == 1
