"""`release_for_retry`: the worker's retry delay for lease loops written by hand.

A legacy worker that leases, handles and deletes in its own loop lets a failed task's lease run
out, or releases it with `modify_task_lease(task, 0)`; calling this instead spaces the attempts
by the queue's retry parameters, as `pullqueue work` does, so an outage does not dead-letter it.
"""

from __future__ import annotations

from pullqueue.compat import taskqueue
from pullqueue.queue import Queue
from pullqueue.retry import RetryParameters, queue_retry_parameters
from pullqueue.task import Task


def release_for_retry(
    queue: Queue | taskqueue.Queue, task: Task, retry: RetryParameters | None = None
) -> float:
    """Release a leased task whose work failed so it is leasable again after the retry delay
    for its retry_count (from `retry`, else the queue's parameters); returns the delay (s).

    Raises what modify_lease raises (TaskLeaseExpiredError when the lease is no longer yours).
    """
    parameters = retry or queue_retry_parameters(queue.backend, queue.name)
    delay = parameters.delay(task.retry_count)
    if isinstance(queue, Queue):
        queue.modify_lease(task, delay)
    else:
        queue.modify_task_lease(task, delay)
    return delay
