"""A drop-in for `google.appengine.runtime.apiproxy_errors`, the errors of the legacy RPC layer.

Legacy workers catch `apiproxy_errors.DeadlineExceededError` beside `taskqueue.TransientError`;
with `from pullqueue.compat import apiproxy_errors` that code runs unchanged, because
`pullqueue.compat.taskqueue` raises these classes where the App Engine API raised them.
"""

from __future__ import annotations

from typing import Any


class Error(Exception):
    """Base of the RPC-layer errors (legacy `apiproxy_errors.Error`)."""


class RPCFailedError(Error):
    """The call could not reach the service."""


class CallNotFoundError(Error):
    """The service has no such call."""


class ArgumentError(Error):
    """The call's arguments could not be encoded."""


class DeadlineExceededError(Error):
    """The call did not finish within its deadline: back off and retry."""


class CancelledError(Error):
    """The call was cancelled."""


class ApplicationError(Error):
    """The service answered with an application-level error code."""

    def __init__(self, application_error: int, error_detail: str = "") -> None:
        self.application_error = application_error
        self.error_detail = error_detail
        Error.__init__(self, application_error)

    def __str__(self) -> str:
        return f"ApplicationError: {self.application_error} {self.error_detail}"


class OverQuotaError(Error):
    """The call was refused for lack of quota."""


class RequestTooLargeError(Error):
    """The request was too large."""


class ResponseTooLargeError(Error):
    """The response was too large."""


class CapabilityDisabledError(Error):
    """The service is disabled for now."""


class FeatureNotEnabledError(Error):
    """The app must enable a feature to use this call."""


class InterruptedError(Error):
    """A wait was interrupted by an exception raised in another call's callback."""

    def __init__(self, exception: BaseException, rpc: Any) -> None:
        self.args = (
            "The Wait() request was interrupted by an exception from another callback:",
            exception,
        )
        self.__rpc = rpc
        self.__exception = exception

    @property
    def rpc(self) -> Any:
        """The call whose wait was interrupted."""
        return self.__rpc

    @property
    def exception(self) -> BaseException:
        """The exception that interrupted it."""
        return self.__exception


class RpcAuthorityError(Error):
    """The RPC authority could not be read from the environment."""


__all__ = [
    "ApplicationError",
    "ArgumentError",
    "CallNotFoundError",
    "CancelledError",
    "CapabilityDisabledError",
    "DeadlineExceededError",
    "Error",
    "FeatureNotEnabledError",
    "InterruptedError",
    "OverQuotaError",
    "RPCFailedError",
    "RequestTooLargeError",
    "ResponseTooLargeError",
    "RpcAuthorityError",
]
