"""On Pub/Sub a lease lives with the process that took it: only that process can change it.

The ack id Pub/Sub needs exists only there; docs/migration-guide.md lists the difference.
"""

from __future__ import annotations

import pytest

from pullqueue import Queue, Task, TaskLeaseExpiredError
from tests.pubsub.conftest import MakeBackend

pytestmark = pytest.mark.unchecked_names  # names are labels here; no registry


def test_only_the_process_holding_a_lease_can_change_it(make_backend: MakeBackend) -> None:
    holder = Queue("holder", make_backend())
    holder.add(Task(b"x", name="job"))
    (task,) = holder.lease(60, 10)
    other = Queue("holder", make_backend())
    with pytest.raises(TaskLeaseExpiredError) as raised:
        other.modify_lease(task, 120)  # the same task object, from another process
    assert "holds no lease" in str(raised.value)
    holder.modify_lease(task, 120)  # the holder still can
    assert holder.delete(task)[0].was_deleted
