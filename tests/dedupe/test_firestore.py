"""The Firestore registry's own promises: the documented document layout, lazy TTL, failures.

Runs on the real Firestore emulator; an unreachable registry is a closed loopback port.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from google.api_core import exceptions as api_exceptions
from google.cloud import firestore

from pullqueue.dedupe import connect_registry, firestore_writes
from pullqueue.dedupe import firestore as firestore_module
from pullqueue.dedupe.firestore import TTL_FIELD, FirestoreNameRegistry, document_id
from pullqueue.errors import InvalidTaskNameError, TaskAlreadyExistsError, TransientError
from tests.support.emulators import free_port

from .conftest import TOMBSTONE_SECONDS, FakeClock


def _collection(url: str) -> firestore.CollectionReference:
    name = parse_qs(urlsplit(url).query)["collection"][0]
    return firestore.Client(project="pullqueue-test").collection(name)


def test_documents_follow_the_documented_layout(firestore_url: str, clock: FakeClock) -> None:
    registry = connect_registry(firestore_url, tombstone_seconds=TOMBSTONE_SECONDS, clock=clock)
    registry.claim("orders", ["order-17", "order-18"])
    collection = _collection(firestore_url)

    live = collection.document("orders.order-17").get()
    assert live.exists
    data = live.to_dict()
    assert data is not None
    assert (data["queue"], data["name"], data["state"]) == ("orders", "order-17", "live")
    assert "expire_at" not in data

    registry.tombstone("orders", ["order-17"])
    tomb = collection.document("orders.order-17").get().to_dict()
    assert tomb is not None
    assert tomb["state"] == "tombstone"
    assert isinstance(tomb[TTL_FIELD], dt.datetime)
    assert tomb[TTL_FIELD].timestamp() == pytest.approx(clock.now + TOMBSTONE_SECONDS, abs=1e-3)
    registry.close()


def test_expired_tombstone_frees_the_name_before_ttl_deletes_it(
    firestore_url: str, clock: FakeClock
) -> None:
    registry = connect_registry(firestore_url, tombstone_seconds=5, clock=clock)
    registry.claim("orders", ["late"])
    registry.tombstone("orders", ["late"])
    clock.advance(6)
    assert _collection(firestore_url).document("orders.late").get().exists
    assert registry.claim("orders", ["late"]) == [None]
    data = _collection(firestore_url).document("orders.late").get().to_dict()
    assert data is not None and data["state"] == "live"
    assert "expire_at" not in data and "tombstoned_at" not in data
    registry.close()


@pytest.mark.parametrize(
    ("queue", "name", "expected"),
    [
        ("q", "task-1_a", "q.task-1_a"),
        ("q", "a/b", "q.a%2Fb"),
        ("q", "..", "q.%2E%2E"),
        ("__q__", "x", "%5F%5Fq%5F%5F.x"),
        ("q.r", "s", "q%2Er.s"),
    ],
)
def test_document_ids_are_safe_and_unambiguous(queue: str, name: str, expected: str) -> None:
    assert document_id(queue, name) == expected


def test_document_id_refuses_names_firestore_cannot_hold() -> None:
    with pytest.raises(InvalidTaskNameError) as caught:
        document_id("q", "/" * 600)
    assert caught.value.queue == "q"
    with pytest.raises(InvalidTaskNameError):
        document_id("q", "")


def test_unreachable_registry_is_a_transient_error(
    firestore_host: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", f"127.0.0.1:{free_port()}")
    registry = connect_registry("firestore://pullqueue-test?timeout=1.5")
    started = time.monotonic()
    with pytest.raises(TransientError) as caught:
        registry.claim("orders", ["order-1"])
    assert time.monotonic() - started < 15
    assert caught.value.queue == "orders" and caught.value.task == "order-1"
    assert "firestore://pullqueue-test" in str(caught.value)
    assert "retry" in str(caught.value)
    with pytest.raises(TransientError):
        registry.tombstone("orders", ["order-1"])
    registry.close()


def test_url_selects_database_collection_and_timeout(firestore_host: str) -> None:
    registry = connect_registry("firestore://proj-a/db-b?collection=names&timeout=7")
    assert isinstance(registry, FirestoreNameRegistry)
    assert (registry.project, registry.database, registry.timeout) == ("proj-a", "db-b", 7.0)
    assert registry.url == "firestore://proj-a/db-b"
    registry.close()


def test_purge_reaches_every_live_name_past_one_page(firestore_url: str, clock: FakeClock) -> None:
    registry = connect_registry(firestore_url, tombstone_seconds=TOMBSTONE_SECONDS, clock=clock)
    names = [f"bulk-{i}" for i in range(1100)]
    assert registry.claim("orders", names) == [None] * len(names)
    registry.purge("orders")
    outcomes = registry.claim("orders", names)
    assert {type(o).__name__ for o in outcomes} == {"TombstonedTaskError"}
    registry.close()


def test_a_retried_request_recognises_its_own_claims(
    firestore_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A BatchWrite applied but answered with an error is sent again: ALREADY_EXISTS then."""
    real_send = firestore_writes.send

    def applied_twice(*args: Any, **kwargs: Any) -> list[int]:
        real_send(*args, **kwargs)
        return real_send(*args, **kwargs)

    registry = connect_registry(firestore_url)
    registry.claim("orders", ["someone-elses"])
    monkeypatch.setattr(firestore_module, "send", applied_twice)
    outcomes = registry.claim("orders", ["mine", "someone-elses"])
    assert [type(o).__name__ if o else None for o in outcomes] == [None, "TaskAlreadyExistsError"]
    monkeypatch.undo()
    assert isinstance(registry.claim("orders", ["mine"])[0], TaskAlreadyExistsError)
    registry.close()


def test_a_claim_that_fails_midway_gives_back_what_it_claimed(
    firestore_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = connect_registry(firestore_url)
    assert isinstance(registry, FirestoreNameRegistry)
    registry.claim("orders", ["taken"])
    real_read = registry._read
    calls = iter(range(100))

    def read_fails_once(refs: Any) -> Any:
        if next(calls) == 0:
            raise api_exceptions.ServiceUnavailable("registry went away")
        return real_read(refs)

    monkeypatch.setattr(registry, "_read", read_fails_once)
    with pytest.raises(TransientError):
        registry.claim("orders", ["fresh", "taken"])
    monkeypatch.undo()
    docs = {d.id: d.to_dict() for d in _collection(firestore_url).stream()}
    assert set(docs) == {"orders.taken"}
    assert registry.claim("orders", ["fresh"]) == [None]
    registry.close()
