from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Request(_message.Message):
    __slots__ = ("service_name", "method", "request", "request_id")
    SERVICE_NAME_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    service_name: str
    method: str
    request: bytes
    request_id: str
    def __init__(self, service_name: _Optional[str] = ..., method: _Optional[str] = ..., request: _Optional[bytes] = ..., request_id: _Optional[str] = ...) -> None: ...

class ApplicationError(_message.Message):
    __slots__ = ("code", "detail")
    CODE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    code: int
    detail: str
    def __init__(self, code: _Optional[int] = ..., detail: _Optional[str] = ...) -> None: ...

class RpcError(_message.Message):
    __slots__ = ("code", "detail")
    class ErrorCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNKNOWN: _ClassVar[RpcError.ErrorCode]
        CALL_NOT_FOUND: _ClassVar[RpcError.ErrorCode]
        PARSE_ERROR: _ClassVar[RpcError.ErrorCode]
        SECURITY_VIOLATION: _ClassVar[RpcError.ErrorCode]
        OVER_QUOTA: _ClassVar[RpcError.ErrorCode]
        REQUEST_TOO_LARGE: _ClassVar[RpcError.ErrorCode]
        CAPABILITY_DISABLED: _ClassVar[RpcError.ErrorCode]
        FEATURE_DISABLED: _ClassVar[RpcError.ErrorCode]
        BAD_REQUEST: _ClassVar[RpcError.ErrorCode]
        RESPONSE_TOO_LARGE: _ClassVar[RpcError.ErrorCode]
        CANCELLED: _ClassVar[RpcError.ErrorCode]
        REPLAY_ERROR: _ClassVar[RpcError.ErrorCode]
        DEADLINE_EXCEEDED: _ClassVar[RpcError.ErrorCode]
    UNKNOWN: RpcError.ErrorCode
    CALL_NOT_FOUND: RpcError.ErrorCode
    PARSE_ERROR: RpcError.ErrorCode
    SECURITY_VIOLATION: RpcError.ErrorCode
    OVER_QUOTA: RpcError.ErrorCode
    REQUEST_TOO_LARGE: RpcError.ErrorCode
    CAPABILITY_DISABLED: RpcError.ErrorCode
    FEATURE_DISABLED: RpcError.ErrorCode
    BAD_REQUEST: RpcError.ErrorCode
    RESPONSE_TOO_LARGE: RpcError.ErrorCode
    CANCELLED: RpcError.ErrorCode
    REPLAY_ERROR: RpcError.ErrorCode
    DEADLINE_EXCEEDED: RpcError.ErrorCode
    CODE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    code: int
    detail: str
    def __init__(self, code: _Optional[int] = ..., detail: _Optional[str] = ...) -> None: ...

class Response(_message.Message):
    __slots__ = ("response", "exception", "application_error", "java_exception", "rpc_error")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    EXCEPTION_FIELD_NUMBER: _ClassVar[int]
    APPLICATION_ERROR_FIELD_NUMBER: _ClassVar[int]
    JAVA_EXCEPTION_FIELD_NUMBER: _ClassVar[int]
    RPC_ERROR_FIELD_NUMBER: _ClassVar[int]
    response: bytes
    exception: bytes
    application_error: ApplicationError
    java_exception: bytes
    rpc_error: RpcError
    def __init__(self, response: _Optional[bytes] = ..., exception: _Optional[bytes] = ..., application_error: _Optional[_Union[ApplicationError, _Mapping]] = ..., java_exception: _Optional[bytes] = ..., rpc_error: _Optional[_Union[RpcError, _Mapping]] = ...) -> None: ...
