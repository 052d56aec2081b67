"""Builds the message classes from `messages.binpb`, the descriptor set protoc compiled.

Loading a descriptor set instead of importing protoc's Python output keeps the bridge free of
protoc's runtime-version pin: any protobuf from 4.21 builds the same classes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_SET = descriptor_pb2.FileDescriptorSet.FromString(
    (Path(__file__).with_name("messages.binpb")).read_bytes()
)
_POOL = descriptor_pool.DescriptorPool()
for _file in _SET.file:
    _POOL.Add(_file)
_CLASSES = message_factory.GetMessageClassesForFiles([f.name for f in _SET.file], _POOL)


def message(full_name: str) -> Any:
    """The message class of full_name (e.g. `pullqueue.bridge.remote_api.Request`)."""
    return _CLASSES[full_name]
