"""The name registry's lease-time read: the state and expiry of many names in one BatchGetDocuments.

Every non-empty lease asks which of its names are tombstoned. Through the client library's
`get_all` each document becomes a proto-plus message and a snapshot of every field, which cost
more than the read itself; this asks for the two fields the answer needs and reads raw protobufs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.api_core import retry as api_retry
from google.cloud import firestore
from google.cloud.firestore_v1.types import firestore as firestore_types

_BatchGetRequestPb: Any = firestore_types.BatchGetDocumentsRequest.pb()
_response_pb = firestore_types.BatchGetDocumentsResponse.pb


def states(
    client: firestore.Client,
    paths: Sequence[str],
    fields: Sequence[str],
    *,
    retry: api_retry.Retry,
    timeout: float,
) -> dict[str, Any]:
    """The `fields` of each existing document among `paths` (collection/id), as a map of field
    name to protobuf Value, by path; documents that do not exist are left out."""
    if not paths:
        return {}
    database = client._database_string
    prefix = f"{database}/documents/"
    request = _BatchGetRequestPb(database=database)
    request.documents.extend(prefix + path for path in paths)
    request.mask.field_paths.extend(fields)
    found: dict[str, Any] = {}
    for response in client._firestore_api.batch_get_documents(
        request=firestore_types.BatchGetDocumentsRequest.wrap(request),
        metadata=client._rpc_metadata,
        retry=retry,
        timeout=timeout,
    ):
        raw = _response_pb(response)
        if raw.HasField("found"):
            found[raw.found.name.removeprefix(prefix)] = raw.found.fields
    return found
