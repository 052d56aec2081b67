"""Reading a remote_api Request from an HTTP body and writing the Response an SDK expects.

Every way a call can fail ends as one of two answers the SDKs understand: an application error
(a taskqueue code, which each SDK raises as its own exception) or an RPC error (the transport's
codes: call not found, parse error, security violation, deadline exceeded, ...).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from pullqueue.bridge.proto.remote_api_pb2 import Request, Response, RpcError

PROTOCOL_CONTENT_TYPE = "application/octet-stream"
"""The content type both SDKs send and the only one the bridge reads."""

REMOTE_STUB_HEADER = "X-appcfg-api-version"
"""Sent by the 1.9.x SDK's `remote_api_stub.RemoteStub` (Python 2.7), which reads an error from
the Response's `exception` (a pickled Python 2 exception), never from `rpc_error`."""

_PYTHON2_ERRORS = "google.appengine.runtime.apiproxy_errors"
_PYTHON2_RPC_ERRORS: dict[int, str] = {
    RpcError.CALL_NOT_FOUND: "CallNotFoundError",
    RpcError.DEADLINE_EXCEEDED: "DeadlineExceededError",
    RpcError.PARSE_ERROR: "ArgumentError",
}


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


def application_error(code: int, detail: str, *, python2: bool = False) -> bytes:
    """The Response of a call the service refused with code; with `python2`, also carrying
    the pickled `ApplicationError`, as the 1.9.x SDK's remote_api handler answers."""
    answer = Response()
    answer.application_error.code = code
    answer.application_error.detail = detail
    if python2:
        answer.exception = python2_application_error(code, detail)
    return bytes(answer.SerializeToString())


def rpc_error(code: int, detail: str, *, python2: bool = False) -> bytes:
    """The Response of a call that failed at the RPC layer with code; with `python2`, also
    carrying the Python 2 exception the 1.9.x SDK's `RemoteStub` raises for it."""
    answer = Response()
    answer.rpc_error.code = code
    answer.rpc_error.detail = detail
    if python2:
        answer.exception = python2_rpc_error(code, detail)
    return bytes(answer.SerializeToString())


def for_python2(answer: bytes) -> bytes:
    """An upstream's Response with the Python 2 exception a RemoteStub reads added to its
    error (unchanged when it has none, already has one, or does not parse)."""
    try:
        message = Response.FromString(answer)
    except (DecodeError, ValueError):
        return answer
    if message.HasField("exception"):
        return answer
    if message.HasField("application_error"):
        error = message.application_error
        message.exception = python2_application_error(error.code, error.detail)
    elif message.HasField("rpc_error"):
        message.exception = python2_rpc_error(message.rpc_error.code, message.rpc_error.detail)
    else:
        return answer
    return bytes(message.SerializeToString())


def python2_rpc_error(code: int, detail: str) -> bytes:
    """A pickle (protocol 2) that Python 2 loads as the `apiproxy_errors` exception of an RPC
    error code (CallNotFoundError, DeadlineExceededError, ArgumentError, else RPCFailedError),
    the detail its message."""
    name = _PYTHON2_RPC_ERRORS.get(code, "RPCFailedError")
    return b"\x80\x02" + _global(name) + _py2_str(detail) + b"\x85R."


def python2_application_error(code: int, detail: str) -> bytes:
    """A pickle (protocol 2) that Python 2 loads as `apiproxy_errors.ApplicationError(code,
    detail)`, its attributes set as Python 2's own pickle of one restores them."""
    return (
        b"\x80\x02"
        + _global("ApplicationError")
        + b"J"
        + struct.pack("<i", code)
        + b"\x85R}("
        + _py2_str("application_error")
        + b"J"
        + struct.pack("<i", code)
        + _py2_str("error_detail")
        + _py2_str(detail)
        + b"ub."
    )


def _global(name: str) -> bytes:
    return b"c" + _PYTHON2_ERRORS.encode("ascii") + b"\n" + name.encode("ascii") + b"\n"


def _py2_str(text: str) -> bytes:
    """A Python 2 `str` (bytes, UTF-8) in a pickle: SHORT_BINSTRING or BINSTRING."""
    data = text.encode("utf-8")
    if len(data) < 256:
        return b"U" + bytes([len(data)]) + data
    return b"T" + struct.pack("<I", len(data)) + data
