"""What the bridge answers where the service said more than the SDKs read: a second delete's
TOMBSTONED_TASK and the hour of FetchQueueStats, on the raw protocol (a Go caller sees them)."""

from __future__ import annotations

import time
from typing import Any

from pullqueue.adapters.delegating import DelegatingBackend
from pullqueue.adapters.memory import MemoryBackend
from pullqueue.bridge.codes import Code
from pullqueue.bridge.proto import taskqueue_service_pb2 as pb
from pullqueue.bridge.taskqueue import TaskQueueService
from tests.conformance.harness import FakeClock


def _call(service: TaskQueueService, method: str, request: Any, kind: Any) -> Any:
    answer = service.call(method, request.SerializeToString(), time.monotonic() + 10)
    return kind.FromString(answer)


def _add(service: TaskQueueService, *names: str) -> None:
    bulk = pb.TaskQueueBulkAddRequest()
    for name in names:
        bulk.add_request.add(
            queue_name=b"q",
            task_name=name.encode(),
            body=b"x",
            eta_usec=1,
            mode=pb.TaskQueueMode.PULL,
        )
    _call(service, "BulkAdd", bulk, pb.TaskQueueBulkAddResponse)


def _delete(service: TaskQueueService, *names: str) -> list[int]:
    request = pb.TaskQueueDeleteRequest(queue_name=b"q", task_name=[n.encode() for n in names])
    return list(_call(service, "Delete", request, pb.TaskQueueDeleteResponse).result)


def test_a_second_delete_is_tombstoned_where_the_backend_keeps_names() -> None:
    service = TaskQueueService(MemoryBackend())
    _add(service, "a", "b", "c")
    assert _delete(service, "a") == [Code.OK]
    purge = pb.TaskQueuePurgeQueueRequest(queue_name=b"q")
    _call(service, "PurgeQueue", purge, pb.TaskQueuePurgeQueueResponse)
    assert _delete(service, "a", "b", "never", "c") == [
        Code.TOMBSTONED_TASK,
        Code.TOMBSTONED_TASK,
        Code.UNKNOWN_TASK,
        Code.TOMBSTONED_TASK,
    ]


def test_a_backend_that_keeps_no_names_answers_unknown() -> None:
    service = TaskQueueService(DelegatingBackend(MemoryBackend()))
    _add(service, "a")
    assert _delete(service, "a") == [Code.OK]
    assert _delete(service, "a", "never") == [Code.UNKNOWN_TASK, Code.UNKNOWN_TASK]


def test_queue_stats_keep_the_hour() -> None:
    clock = FakeClock()
    service = TaskQueueService(MemoryBackend(clock=clock))
    _add(service, *[f"t{i}" for i in range(10)])
    lease = pb.TaskQueueQueryAndOwnTasksRequest(queue_name=b"q", lease_seconds=0, max_tasks=6)
    _call(service, "QueryAndOwnTasks", lease, pb.TaskQueueQueryAndOwnTasksResponse)
    clock.advance(120)
    lease.max_tasks = 2
    _call(service, "QueryAndOwnTasks", lease, pb.TaskQueueQueryAndOwnTasksResponse)
    request = pb.TaskQueueFetchQueueStatsRequest(queue_name=[b"q"])
    [stats] = _call(
        service, "FetchQueueStats", request, pb.TaskQueueFetchQueueStatsResponse
    ).queuestats
    info = stats.scanner_info
    assert (info.executed_last_minute, info.executed_last_hour) == (2, 8)
