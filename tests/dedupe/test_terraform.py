"""The Terraform TTL policy for tombstones targets exactly what the Firestore registry writes.

The module's dedupe.tf is parsed, so a renamed field or collection on either side fails here
instead of silently leaving expired tombstones in place forever.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hcl2

from pullqueue.dedupe.firestore import COLLECTION, DEFAULT_DATABASE, TTL_FIELD

DEDUPE_TF = Path(__file__).parents[2] / "terraform" / "modules" / "pullqueue" / "dedupe.tf"


def _unquote(value: Any) -> Any:
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def _blocks(parsed: dict[str, Any], kind: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for block in parsed.get(kind, []):
        for key, body in block.items():
            found[_unquote(key)] = body
    return found


def _module() -> dict[str, Any]:
    with DEDUPE_TF.open() as handle:
        parsed: dict[str, Any] = hcl2.load(handle)
    return parsed


def _ttl_resource(parsed: dict[str, Any]) -> dict[str, Any]:
    fields = _blocks(parsed, "resource")["google_firestore_field"]
    resource: dict[str, Any] = {_unquote(k): v for k, v in fields.items()}["dedupe_tombstone_ttl"]
    return resource


def test_ttl_policy_is_on_the_field_and_collection_the_registry_writes() -> None:
    parsed = _module()
    variables = _blocks(parsed, "variable")
    ttl = _ttl_resource(parsed)
    assert _unquote(ttl["field"]) == TTL_FIELD
    assert "var.dedupe_collection" in ttl["collection"]
    assert "var.dedupe_database" in ttl["database"]
    assert "ttl_config" in ttl
    assert _unquote(variables["dedupe_collection"]["default"]) == COLLECTION
    assert _unquote(variables["dedupe_database"]["default"]) == DEFAULT_DATABASE


def test_ttl_policy_is_off_unless_asked_for() -> None:
    parsed = _module()
    variables = _blocks(parsed, "variable")
    assert variables["enable_dedupe_ttl"]["default"] is False
    assert "var.enable_dedupe_ttl ? 1 : 0" in _ttl_resource(parsed)["count"]
