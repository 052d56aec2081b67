"""The Firestore writes of the name registry, built as raw protobufs and sent in one BatchWrite.

The client library wraps every write in proto-plus messages, which costs producers more CPU per
document than the server takes to apply it; the registry needs only five small write shapes,
so they are built here directly, and BatchWrite reports one status code per write.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from google.api_core import retry as api_retry
from google.cloud import firestore
from google.cloud.firestore_v1.types import firestore as firestore_types
from google.protobuf import timestamp_pb2

FieldValue = str | dt.datetime | None
"""A registry field: a string or a timestamp; None removes the field (updates only)."""

_BatchWriteRequestPb: Any = firestore_types.BatchWriteRequest.pb()


def timestamp(moment: dt.datetime) -> Any:
    """A Timestamp protobuf for moment, keeping the nanoseconds Firestore's own times carry."""
    exact = getattr(moment, "timestamp_pb", None)
    if exact is not None:
        return exact()
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(moment)
    return stamp


class Writes:
    """Writes to documents of one database, each applied on its own (BatchWrite is not atomic)."""

    def __init__(self, database: str) -> None:
        self._database = database
        self.request: Any = _BatchWriteRequestPb(database=database)

    def __len__(self) -> int:
        return len(self.request.writes)

    def _write(self, path: str, fields: dict[str, FieldValue] | None) -> Any:
        write = self.request.writes.add()
        name = f"{self._database}/documents/{path}"
        if fields is None:
            write.delete = name
            return write
        write.update.name = name
        values = write.update.fields
        for key, value in fields.items():
            if isinstance(value, str):
                values[key].string_value = value
            elif isinstance(value, dt.datetime):
                values[key].timestamp_value.CopyFrom(timestamp(value))
        return write

    def create(self, path: str, fields: dict[str, FieldValue]) -> None:
        """Create the document; ALREADY_EXISTS when it exists."""
        self._write(path, fields).current_document.exists = False

    def set(self, path: str, fields: dict[str, FieldValue]) -> None:
        """Create or replace the document, unconditionally."""
        self._write(path, fields)

    def update(self, path: str, fields: dict[str, FieldValue], *, update_time: dt.datetime) -> None:
        """Change the given fields (None removes one) if the document is unchanged since
        update_time; FAILED_PRECONDITION otherwise."""
        write = self._write(path, fields)
        write.update_mask.field_paths.extend(fields)
        write.current_document.update_time.CopyFrom(timestamp(update_time))

    def delete(self, path: str, *, update_time: dt.datetime) -> None:
        """Delete the document if it is unchanged since update_time."""
        write = self._write(path, None)
        write.current_document.update_time.CopyFrom(timestamp(update_time))


def send(
    client: firestore.Client, writes: Writes, *, retry: api_retry.Retry, timeout: float
) -> list[int]:
    """Apply writes with one BatchWrite request; a google.rpc status code per write, in order."""
    if not len(writes):
        return []
    response = client._firestore_api.batch_write(
        request=firestore_types.BatchWriteRequest.wrap(writes.request),
        metadata=client._rpc_metadata,
        retry=retry,
        timeout=timeout,
    )
    return [int(status.code) for status in firestore_types.BatchWriteResponse.pb(response).status]
