"""The protocol messages the service bridge speaks: remote_api's envelope and taskqueue's calls.

The `.proto` files here are the definitions; `messages.binpb` is their compiled descriptor set
(regenerate it with `python -m pullqueue.bridge.proto`), loaded at import time by
`_messages.py` so the bridge needs only `protobuf>=4.21` at run time, whatever protoc built it.
The `_pb2.pyi` stubs (protoc --pyi_out) type the classes for mypy.
"""
