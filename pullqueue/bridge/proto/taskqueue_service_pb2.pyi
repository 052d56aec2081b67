from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TaskQueueServiceError(_message.Message):
    __slots__ = ()
    class ErrorCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        OK: _ClassVar[TaskQueueServiceError.ErrorCode]
        UNKNOWN_QUEUE: _ClassVar[TaskQueueServiceError.ErrorCode]
        TRANSIENT_ERROR: _ClassVar[TaskQueueServiceError.ErrorCode]
        INTERNAL_ERROR: _ClassVar[TaskQueueServiceError.ErrorCode]
        TASK_TOO_LARGE: _ClassVar[TaskQueueServiceError.ErrorCode]
        INVALID_TASK_NAME: _ClassVar[TaskQueueServiceError.ErrorCode]
        INVALID_QUEUE_NAME: _ClassVar[TaskQueueServiceError.ErrorCode]
        INVALID_URL: _ClassVar[TaskQueueServiceError.ErrorCode]
        INVALID_QUEUE_RATE: _ClassVar[TaskQueueServiceError.ErrorCode]
        PERMISSION_DENIED: _ClassVar[TaskQueueServiceError.ErrorCode]
        TASK_ALREADY_EXISTS: _ClassVar[TaskQueueServiceError.ErrorCode]
        TOMBSTONED_TASK: _ClassVar[TaskQueueServiceError.ErrorCode]
        INVALID_ETA: _ClassVar[TaskQueueServiceError.ErrorCode]
        INVALID_REQUEST: _ClassVar[TaskQueueServiceError.ErrorCode]
        UNKNOWN_TASK: _ClassVar[TaskQueueServiceError.ErrorCode]
        TOMBSTONED_QUEUE: _ClassVar[TaskQueueServiceError.ErrorCode]
        DUPLICATE_TASK_NAME: _ClassVar[TaskQueueServiceError.ErrorCode]
        SKIPPED: _ClassVar[TaskQueueServiceError.ErrorCode]
        TOO_MANY_TASKS: _ClassVar[TaskQueueServiceError.ErrorCode]
        INVALID_PAYLOAD: _ClassVar[TaskQueueServiceError.ErrorCode]
        INVALID_RETRY_PARAMETERS: _ClassVar[TaskQueueServiceError.ErrorCode]
        INVALID_QUEUE_MODE: _ClassVar[TaskQueueServiceError.ErrorCode]
        ACL_LOOKUP_ERROR: _ClassVar[TaskQueueServiceError.ErrorCode]
        TRANSACTIONAL_REQUEST_TOO_LARGE: _ClassVar[TaskQueueServiceError.ErrorCode]
        INCORRECT_CREATOR_NAME: _ClassVar[TaskQueueServiceError.ErrorCode]
        TASK_LEASE_EXPIRED: _ClassVar[TaskQueueServiceError.ErrorCode]
        QUEUE_PAUSED: _ClassVar[TaskQueueServiceError.ErrorCode]
        INVALID_TAG: _ClassVar[TaskQueueServiceError.ErrorCode]
        DATASTORE_ERROR: _ClassVar[TaskQueueServiceError.ErrorCode]
    OK: TaskQueueServiceError.ErrorCode
    UNKNOWN_QUEUE: TaskQueueServiceError.ErrorCode
    TRANSIENT_ERROR: TaskQueueServiceError.ErrorCode
    INTERNAL_ERROR: TaskQueueServiceError.ErrorCode
    TASK_TOO_LARGE: TaskQueueServiceError.ErrorCode
    INVALID_TASK_NAME: TaskQueueServiceError.ErrorCode
    INVALID_QUEUE_NAME: TaskQueueServiceError.ErrorCode
    INVALID_URL: TaskQueueServiceError.ErrorCode
    INVALID_QUEUE_RATE: TaskQueueServiceError.ErrorCode
    PERMISSION_DENIED: TaskQueueServiceError.ErrorCode
    TASK_ALREADY_EXISTS: TaskQueueServiceError.ErrorCode
    TOMBSTONED_TASK: TaskQueueServiceError.ErrorCode
    INVALID_ETA: TaskQueueServiceError.ErrorCode
    INVALID_REQUEST: TaskQueueServiceError.ErrorCode
    UNKNOWN_TASK: TaskQueueServiceError.ErrorCode
    TOMBSTONED_QUEUE: TaskQueueServiceError.ErrorCode
    DUPLICATE_TASK_NAME: TaskQueueServiceError.ErrorCode
    SKIPPED: TaskQueueServiceError.ErrorCode
    TOO_MANY_TASKS: TaskQueueServiceError.ErrorCode
    INVALID_PAYLOAD: TaskQueueServiceError.ErrorCode
    INVALID_RETRY_PARAMETERS: TaskQueueServiceError.ErrorCode
    INVALID_QUEUE_MODE: TaskQueueServiceError.ErrorCode
    ACL_LOOKUP_ERROR: TaskQueueServiceError.ErrorCode
    TRANSACTIONAL_REQUEST_TOO_LARGE: TaskQueueServiceError.ErrorCode
    INCORRECT_CREATOR_NAME: TaskQueueServiceError.ErrorCode
    TASK_LEASE_EXPIRED: TaskQueueServiceError.ErrorCode
    QUEUE_PAUSED: TaskQueueServiceError.ErrorCode
    INVALID_TAG: TaskQueueServiceError.ErrorCode
    DATASTORE_ERROR: TaskQueueServiceError.ErrorCode
    def __init__(self) -> None: ...

class TaskQueueRetryParameters(_message.Message):
    __slots__ = ("retry_limit", "age_limit_sec", "min_backoff_sec", "max_backoff_sec", "max_doublings")
    RETRY_LIMIT_FIELD_NUMBER: _ClassVar[int]
    AGE_LIMIT_SEC_FIELD_NUMBER: _ClassVar[int]
    MIN_BACKOFF_SEC_FIELD_NUMBER: _ClassVar[int]
    MAX_BACKOFF_SEC_FIELD_NUMBER: _ClassVar[int]
    MAX_DOUBLINGS_FIELD_NUMBER: _ClassVar[int]
    retry_limit: int
    age_limit_sec: int
    min_backoff_sec: float
    max_backoff_sec: float
    max_doublings: int
    def __init__(self, retry_limit: _Optional[int] = ..., age_limit_sec: _Optional[int] = ..., min_backoff_sec: _Optional[float] = ..., max_backoff_sec: _Optional[float] = ..., max_doublings: _Optional[int] = ...) -> None: ...

class TaskQueueMode(_message.Message):
    __slots__ = ()
    class Mode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        PUSH: _ClassVar[TaskQueueMode.Mode]
        PULL: _ClassVar[TaskQueueMode.Mode]
    PUSH: TaskQueueMode.Mode
    PULL: TaskQueueMode.Mode
    def __init__(self) -> None: ...

class TaskQueueAddRequest(_message.Message):
    __slots__ = ("queue_name", "task_name", "eta_usec", "url", "method", "body", "transaction", "datastore_transaction", "retry_parameters", "mode", "tag")
    QUEUE_NAME_FIELD_NUMBER: _ClassVar[int]
    TASK_NAME_FIELD_NUMBER: _ClassVar[int]
    ETA_USEC_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_FIELD_NUMBER: _ClassVar[int]
    DATASTORE_TRANSACTION_FIELD_NUMBER: _ClassVar[int]
    RETRY_PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    queue_name: bytes
    task_name: bytes
    eta_usec: int
    url: bytes
    method: int
    body: bytes
    transaction: bytes
    datastore_transaction: bytes
    retry_parameters: TaskQueueRetryParameters
    mode: TaskQueueMode.Mode
    tag: bytes
    def __init__(self, queue_name: _Optional[bytes] = ..., task_name: _Optional[bytes] = ..., eta_usec: _Optional[int] = ..., url: _Optional[bytes] = ..., method: _Optional[int] = ..., body: _Optional[bytes] = ..., transaction: _Optional[bytes] = ..., datastore_transaction: _Optional[bytes] = ..., retry_parameters: _Optional[_Union[TaskQueueRetryParameters, _Mapping]] = ..., mode: _Optional[_Union[TaskQueueMode.Mode, str]] = ..., tag: _Optional[bytes] = ...) -> None: ...

class TaskQueueAddResponse(_message.Message):
    __slots__ = ("chosen_task_name",)
    CHOSEN_TASK_NAME_FIELD_NUMBER: _ClassVar[int]
    chosen_task_name: bytes
    def __init__(self, chosen_task_name: _Optional[bytes] = ...) -> None: ...

class TaskQueueBulkAddRequest(_message.Message):
    __slots__ = ("add_request",)
    ADD_REQUEST_FIELD_NUMBER: _ClassVar[int]
    add_request: _containers.RepeatedCompositeFieldContainer[TaskQueueAddRequest]
    def __init__(self, add_request: _Optional[_Iterable[_Union[TaskQueueAddRequest, _Mapping]]] = ...) -> None: ...

class TaskQueueBulkAddResponse(_message.Message):
    __slots__ = ("taskresult",)
    class TaskResult(_message.Message):
        __slots__ = ("result", "chosen_task_name")
        RESULT_FIELD_NUMBER: _ClassVar[int]
        CHOSEN_TASK_NAME_FIELD_NUMBER: _ClassVar[int]
        result: TaskQueueServiceError.ErrorCode
        chosen_task_name: bytes
        def __init__(self, result: _Optional[_Union[TaskQueueServiceError.ErrorCode, str]] = ..., chosen_task_name: _Optional[bytes] = ...) -> None: ...
    TASKRESULT_FIELD_NUMBER: _ClassVar[int]
    taskresult: _containers.RepeatedCompositeFieldContainer[TaskQueueBulkAddResponse.TaskResult]
    def __init__(self, taskresult: _Optional[_Iterable[_Union[TaskQueueBulkAddResponse.TaskResult, _Mapping]]] = ...) -> None: ...

class TaskQueueDeleteRequest(_message.Message):
    __slots__ = ("queue_name", "task_name", "app_id")
    QUEUE_NAME_FIELD_NUMBER: _ClassVar[int]
    TASK_NAME_FIELD_NUMBER: _ClassVar[int]
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    queue_name: bytes
    task_name: _containers.RepeatedScalarFieldContainer[bytes]
    app_id: bytes
    def __init__(self, queue_name: _Optional[bytes] = ..., task_name: _Optional[_Iterable[bytes]] = ..., app_id: _Optional[bytes] = ...) -> None: ...

class TaskQueueDeleteResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: _containers.RepeatedScalarFieldContainer[TaskQueueServiceError.ErrorCode]
    def __init__(self, result: _Optional[_Iterable[_Union[TaskQueueServiceError.ErrorCode, str]]] = ...) -> None: ...

class TaskQueueFetchQueueStatsRequest(_message.Message):
    __slots__ = ("app_id", "queue_name", "max_num_tasks")
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_TASKS_FIELD_NUMBER: _ClassVar[int]
    app_id: bytes
    queue_name: _containers.RepeatedScalarFieldContainer[bytes]
    max_num_tasks: int
    def __init__(self, app_id: _Optional[bytes] = ..., queue_name: _Optional[_Iterable[bytes]] = ..., max_num_tasks: _Optional[int] = ...) -> None: ...

class TaskQueueScannerQueueInfo(_message.Message):
    __slots__ = ("executed_last_minute", "executed_last_hour", "sampling_duration_seconds", "requests_in_flight", "enforced_rate")
    EXECUTED_LAST_MINUTE_FIELD_NUMBER: _ClassVar[int]
    EXECUTED_LAST_HOUR_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_DURATION_SECONDS_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    ENFORCED_RATE_FIELD_NUMBER: _ClassVar[int]
    executed_last_minute: int
    executed_last_hour: int
    sampling_duration_seconds: float
    requests_in_flight: int
    enforced_rate: float
    def __init__(self, executed_last_minute: _Optional[int] = ..., executed_last_hour: _Optional[int] = ..., sampling_duration_seconds: _Optional[float] = ..., requests_in_flight: _Optional[int] = ..., enforced_rate: _Optional[float] = ...) -> None: ...

class TaskQueueFetchQueueStatsResponse(_message.Message):
    __slots__ = ("queuestats",)
    class QueueStats(_message.Message):
        __slots__ = ("num_tasks", "oldest_eta_usec", "scanner_info")
        NUM_TASKS_FIELD_NUMBER: _ClassVar[int]
        OLDEST_ETA_USEC_FIELD_NUMBER: _ClassVar[int]
        SCANNER_INFO_FIELD_NUMBER: _ClassVar[int]
        num_tasks: int
        oldest_eta_usec: int
        scanner_info: TaskQueueScannerQueueInfo
        def __init__(self, num_tasks: _Optional[int] = ..., oldest_eta_usec: _Optional[int] = ..., scanner_info: _Optional[_Union[TaskQueueScannerQueueInfo, _Mapping]] = ...) -> None: ...
    QUEUESTATS_FIELD_NUMBER: _ClassVar[int]
    queuestats: _containers.RepeatedCompositeFieldContainer[TaskQueueFetchQueueStatsResponse.QueueStats]
    def __init__(self, queuestats: _Optional[_Iterable[_Union[TaskQueueFetchQueueStatsResponse.QueueStats, _Mapping]]] = ...) -> None: ...

class TaskQueuePurgeQueueRequest(_message.Message):
    __slots__ = ("app_id", "queue_name")
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_NAME_FIELD_NUMBER: _ClassVar[int]
    app_id: bytes
    queue_name: bytes
    def __init__(self, app_id: _Optional[bytes] = ..., queue_name: _Optional[bytes] = ...) -> None: ...

class TaskQueuePurgeQueueResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TaskQueueQueryAndOwnTasksRequest(_message.Message):
    __slots__ = ("queue_name", "lease_seconds", "max_tasks", "group_by_tag", "tag")
    QUEUE_NAME_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MAX_TASKS_FIELD_NUMBER: _ClassVar[int]
    GROUP_BY_TAG_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    queue_name: bytes
    lease_seconds: float
    max_tasks: int
    group_by_tag: bool
    tag: bytes
    def __init__(self, queue_name: _Optional[bytes] = ..., lease_seconds: _Optional[float] = ..., max_tasks: _Optional[int] = ..., group_by_tag: _Optional[bool] = ..., tag: _Optional[bytes] = ...) -> None: ...

class TaskQueueQueryAndOwnTasksResponse(_message.Message):
    __slots__ = ("task",)
    class Task(_message.Message):
        __slots__ = ("task_name", "eta_usec", "retry_count", "body", "tag")
        TASK_NAME_FIELD_NUMBER: _ClassVar[int]
        ETA_USEC_FIELD_NUMBER: _ClassVar[int]
        RETRY_COUNT_FIELD_NUMBER: _ClassVar[int]
        BODY_FIELD_NUMBER: _ClassVar[int]
        TAG_FIELD_NUMBER: _ClassVar[int]
        task_name: bytes
        eta_usec: int
        retry_count: int
        body: bytes
        tag: bytes
        def __init__(self, task_name: _Optional[bytes] = ..., eta_usec: _Optional[int] = ..., retry_count: _Optional[int] = ..., body: _Optional[bytes] = ..., tag: _Optional[bytes] = ...) -> None: ...
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: _containers.RepeatedCompositeFieldContainer[TaskQueueQueryAndOwnTasksResponse.Task]
    def __init__(self, task: _Optional[_Iterable[_Union[TaskQueueQueryAndOwnTasksResponse.Task, _Mapping]]] = ...) -> None: ...

class TaskQueueModifyTaskLeaseRequest(_message.Message):
    __slots__ = ("queue_name", "task_name", "eta_usec", "lease_seconds")
    QUEUE_NAME_FIELD_NUMBER: _ClassVar[int]
    TASK_NAME_FIELD_NUMBER: _ClassVar[int]
    ETA_USEC_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    queue_name: bytes
    task_name: bytes
    eta_usec: int
    lease_seconds: float
    def __init__(self, queue_name: _Optional[bytes] = ..., task_name: _Optional[bytes] = ..., eta_usec: _Optional[int] = ..., lease_seconds: _Optional[float] = ...) -> None: ...

class TaskQueueModifyTaskLeaseResponse(_message.Message):
    __slots__ = ("updated_eta_usec",)
    UPDATED_ETA_USEC_FIELD_NUMBER: _ClassVar[int]
    updated_eta_usec: int
    def __init__(self, updated_eta_usec: _Optional[int] = ...) -> None: ...
