"""The taskqueue service's pull-queue requests and responses, and its error codes.

Classes built from the descriptor set by `_messages`; `taskqueue_service_pb2.pyi` types them.
"""

from pullqueue.bridge.proto._messages import message

_PACKAGE = "pullqueue.bridge.taskqueue."
TaskQueueServiceError = message(_PACKAGE + "TaskQueueServiceError")
TaskQueueRetryParameters = message(_PACKAGE + "TaskQueueRetryParameters")
TaskQueueMode = message(_PACKAGE + "TaskQueueMode")
TaskQueueAddRequest = message(_PACKAGE + "TaskQueueAddRequest")
TaskQueueAddResponse = message(_PACKAGE + "TaskQueueAddResponse")
TaskQueueBulkAddRequest = message(_PACKAGE + "TaskQueueBulkAddRequest")
TaskQueueBulkAddResponse = message(_PACKAGE + "TaskQueueBulkAddResponse")
TaskQueueDeleteRequest = message(_PACKAGE + "TaskQueueDeleteRequest")
TaskQueueDeleteResponse = message(_PACKAGE + "TaskQueueDeleteResponse")
TaskQueueFetchQueueStatsRequest = message(_PACKAGE + "TaskQueueFetchQueueStatsRequest")
TaskQueueScannerQueueInfo = message(_PACKAGE + "TaskQueueScannerQueueInfo")
TaskQueueFetchQueueStatsResponse = message(_PACKAGE + "TaskQueueFetchQueueStatsResponse")
TaskQueuePurgeQueueRequest = message(_PACKAGE + "TaskQueuePurgeQueueRequest")
TaskQueuePurgeQueueResponse = message(_PACKAGE + "TaskQueuePurgeQueueResponse")
TaskQueueQueryAndOwnTasksRequest = message(_PACKAGE + "TaskQueueQueryAndOwnTasksRequest")
TaskQueueQueryAndOwnTasksResponse = message(_PACKAGE + "TaskQueueQueryAndOwnTasksResponse")
TaskQueueModifyTaskLeaseRequest = message(_PACKAGE + "TaskQueueModifyTaskLeaseRequest")
TaskQueueModifyTaskLeaseResponse = message(_PACKAGE + "TaskQueueModifyTaskLeaseResponse")
