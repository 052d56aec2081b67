"""The remote_api envelope: Request (what an SDK posts to /rpc_http) and Response (the answer).

Classes built from the descriptor set by `_messages`; `remote_api_pb2.pyi` types them.
"""

from pullqueue.bridge.proto._messages import message

_PACKAGE = "pullqueue.bridge.remote_api."
Request = message(_PACKAGE + "Request")
ApplicationError = message(_PACKAGE + "ApplicationError")
RpcError = message(_PACKAGE + "RpcError")
Response = message(_PACKAGE + "Response")
