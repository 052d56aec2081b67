"""Reading a remote_api Request from an HTTP body and writing the Response an SDK expects.

Every way a call can fail ends as one of two answers the SDKs understand: an application error
(a taskqueue code, which each SDK raises as its own exception) or an RPC error (the transport's
codes: call not found, parse error, security violation, deadline exceeded, ...).
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf.message import DecodeError

from pullqueue.bridge.proto.remote_api_pb2 import Request, Response, RpcError

PROTOCOL_CONTENT_TYPE = "application/octet-stream"
"""The content type both SDKs send and the only one the bridge reads."""


class ApplicationFailure(Exception):
    """A call the service refused: `code` is the service's error code, `detail` says why."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(detail)
        self.code = int(code)
        self.detail = detail


class RpcFailure(Exception):
    """A call that failed before or around the service: `code` is a remote_api RpcError code."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(detail)
        self.code = int(code)
        self.detail = detail


@dataclass(frozen=True)
class Call:
    """One decoded call: the service and method named, the request bytes and the ticket."""

    service: str
    method: str
    request: bytes
    ticket: str


def decode_call(body: bytes) -> Call:
    """The call in an HTTP body, or RpcFailure(PARSE_ERROR) naming what is wrong with it."""
    try:
        message = Request.FromString(body)
    except (DecodeError, ValueError, UnicodeDecodeError) as exc:
        raise RpcFailure(
            RpcError.PARSE_ERROR, f"the body is not a remote_api Request ({exc})"
        ) from None
    missing = [name for name in ("service_name", "method", "request") if not message.HasField(name)]
    if missing:
        raise RpcFailure(
            RpcError.PARSE_ERROR,
            f"the remote_api Request has no {', '.join(missing)}",
        )
    texts = (message.service_name, message.method, message.request_id)
    if not all(isinstance(text, str) for text in texts):
        raise RpcFailure(
            RpcError.PARSE_ERROR, "the remote_api Request's service, method or ticket is not UTF-8"
        )
    return Call(message.service_name, message.method, message.request, message.request_id)


def ok(response: bytes) -> bytes:
    """The Response carrying a successful call's response bytes."""
    return bytes(Response(response=response).SerializeToString())


def application_error(code: int, detail: str) -> bytes:
    """The Response of a call the service refused with code."""
    answer = Response()
    answer.application_error.code = code
    answer.application_error.detail = detail
    return bytes(answer.SerializeToString())


def rpc_error(code: int, detail: str) -> bytes:
    """The Response of a call that failed at the RPC layer with code."""
    answer = Response()
    answer.rpc_error.code = code
    answer.rpc_error.detail = detail
    return bytes(answer.SerializeToString())
