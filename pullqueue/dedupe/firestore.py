"""The Firestore task-name registry (`firestore://PROJECT[/DATABASE]`): names shared by processes.

One document per queue and name, created with an exists=false precondition so exactly one
producer wins a name, and turned into a tombstone whose `expire_at` feeds Firestore's TTL policy.
"""

from __future__ import annotations

import datetime as dt
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from google.api_core import exceptions as api_exceptions
from google.api_core import retry as api_retry
from google.auth import exceptions as auth_exceptions
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter
from google.rpc import code_pb2

from pullqueue.dedupe.firestore_reads import states
from pullqueue.dedupe.firestore_writes import FieldValue, Writes, send
from pullqueue.dedupe.memory import DEFAULT_TOMBSTONE_SECONDS
from pullqueue.dedupe.names import LIVE, TOMBSTONE, blocking_error
from pullqueue.errors import (
    ConfigurationError,
    Error,
    InternalError,
    InvalidTaskNameError,
    PermissionDeniedError,
    TransientError,
)

COLLECTION = "pullqueue_names"
DEFAULT_DATABASE = "(default)"
TTL_FIELD = "expire_at"
"""The tombstone expiry field; terraform/modules/pullqueue/dedupe.tf puts the TTL policy on it."""
MAX_WRITES_PER_BATCH = 500
"""Firestore's limit of writes in one BatchWrite request."""
MAX_DOCUMENT_ID_BYTES = 1500
CLAIM_ROUNDS = 5
"""Create/read/take-over rounds before a name still in flux is reported as TransientError."""

_OK = code_pb2.OK
_ALREADY_EXISTS = code_pb2.ALREADY_EXISTS
_TRANSIENT = (
    api_exceptions.ServiceUnavailable,
    api_exceptions.DeadlineExceeded,
    api_exceptions.Aborted,
    api_exceptions.ResourceExhausted,
    api_exceptions.InternalServerError,
    api_exceptions.RetryError,
    auth_exceptions.TransportError,
)
_RETRIED = (
    api_exceptions.ServiceUnavailable,
    api_exceptions.Aborted,
    api_exceptions.ResourceExhausted,
    api_exceptions.InternalServerError,
)

T = TypeVar("T")

_QUEUE_UNSAFE = re.compile(r"[^a-zA-Z0-9-]")
_NAME_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")


def _escape(text: str, unsafe: re.Pattern[str]) -> str:
    """Percent-encode (UTF-8) every character `unsafe` matches."""
    return unsafe.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), text)


def document_id(queue: str, name: str) -> str:
    """The document id of `name` in `queue`: readable `QUEUE.NAME` for every legal name.

    Legal queue names are `[a-zA-Z0-9-]` and task names `[a-zA-Z0-9_-]`, so they appear as
    they are; any other character is percent-encoded (so `.` only ever separates the two and
    `/` never splits the path), and the id never starts with `__`, which Firestore reserves.
    """
    if not queue or not name:
        raise InvalidTaskNameError("queue and task names must not be empty", queue=queue, task=name)
    doc_id = f"{_escape(queue, _QUEUE_UNSAFE)}.{_escape(name, _NAME_UNSAFE)}"
    if len(doc_id.encode()) > MAX_DOCUMENT_ID_BYTES:
        raise InvalidTaskNameError(
            f"the name is too long for a registry document id ({MAX_DOCUMENT_ID_BYTES} bytes);"
            " task names are at most 500 characters of [a-zA-Z0-9_-]",
            queue=queue,
            task=name,
        )
    return doc_id


def _posix(value: object) -> float | None:
    if isinstance(value, dt.datetime):
        return value.timestamp()
    if isinstance(value, int | float):
        return float(value)
    return None


def _chunks(items: Sequence[T]) -> Iterator[Sequence[T]]:
    """items in runs of at most MAX_WRITES_PER_BATCH (Firestore's limit per batched call)."""
    for start in range(0, len(items), MAX_WRITES_PER_BATCH):
        yield items[start : start + MAX_WRITES_PER_BATCH]


def _utc(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, tz=dt.timezone.utc)


class FirestoreNameRegistry:
    """Task names in a Firestore collection, shared by every producer of a project.

    Adds claim names with one BatchWrite of preconditioned creates (per-document outcomes in
    one round trip); only names already present cost a read, and expired tombstones are taken
    over with an update-time precondition, so two producers never both win a name.
    """

    def __init__(
        self,
        project: str,
        database: str = DEFAULT_DATABASE,
        *,
        tombstone_seconds: float = DEFAULT_TOMBSTONE_SECONDS,
        clock: Callable[[], float] = time.time,
        timeout: float = 30.0,
        collection: str = COLLECTION,
        client: firestore.Client | None = None,
    ) -> None:
        if tombstone_seconds <= 0:
            raise ValueError("tombstone_seconds must be above zero")
        if timeout <= 0:
            raise ValueError("timeout must be above zero")
        self.project = project
        self.database = database
        self.url = f"firestore://{project}" + (
            f"/{database}" if database != DEFAULT_DATABASE else ""
        )
        self.tombstone_seconds = float(tombstone_seconds)
        self.timeout = float(timeout)
        self._clock = clock
        try:
            self._client = client or firestore.Client(project=project, database=database)
        except auth_exceptions.DefaultCredentialsError as exc:
            raise ConfigurationError(
                f"no Google credentials for the task-name registry {self.url}: run `gcloud auth"
                " application-default login`, set GOOGLE_APPLICATION_CREDENTIALS, or set"
                " FIRESTORE_EMULATOR_HOST for the emulator"
            ) from exc
        self._collection = self._client.collection(collection)
        self._collection_path = self._collection.document("_").path.rpartition("/")[0]
        self._write_retry = api_retry.Retry(
            predicate=api_retry.if_exception_type(*_RETRIED),
            initial=0.1,
            maximum=2.0,
            multiplier=1.5,
            timeout=self.timeout,
        )
        self._read_retry = api_retry.Retry(
            predicate=api_retry.if_exception_type(*_RETRIED, api_exceptions.DeadlineExceeded),
            initial=0.1,
            maximum=2.0,
            multiplier=1.5,
            timeout=self.timeout,
        )

    def claim(self, queue: str, names: Sequence[str]) -> list[Error | None]:
        now = self._clock()
        token = uuid.uuid4().hex
        refs = [self._collection.document(document_id(queue, n)) for n in names]
        outcomes: list[Error | None] = [None] * len(names)
        first_of: dict[str, int] = {}
        to_create: list[int] = []
        for i, ref in enumerate(refs):
            if ref.id in first_of:
                outcomes[i] = blocking_error(queue, names[i], LIVE, None, now)
            else:
                first_of[ref.id] = i
                to_create.append(i)
        live: dict[str, FieldValue] = {
            "queue": queue,
            "state": LIVE,
            "claim": token,
            "claimed_at": _utc(now),
        }
        try:
            unsettled = self._claim_rounds(queue, names, refs, to_create, live, outcomes, now)
        except Exception as exc:
            error = self._translate(
                exc,
                queue,
                "claim task names",
                "no name was claimed, so nothing was published: back off and retry the add",
                names,
            )
            if error is None:
                raise
            self._abandon([refs[i] for i in to_create], token)
            raise error from exc
        for i in unsettled:
            outcomes[i] = TransientError(
                "the name's registry record kept changing under concurrent adds; retry the add",
                queue=queue,
                task=names[i],
            )
        return outcomes

    def _claim_rounds(
        self,
        queue: str,
        names: Sequence[str],
        refs: Sequence[firestore.DocumentReference],
        to_create: list[int],
        live: dict[str, FieldValue],
        outcomes: list[Error | None],
        now: float,
    ) -> list[int]:
        """Create, then inspect and take over, until every name is settled; the unsettled rest."""
        to_inspect: list[int] = []
        for _ in range(CLAIM_ROUNDS):
            next_create: list[int] = []
            next_inspect: list[int] = []
            codes = self._commit(
                lambda writes, i: writes.create(refs[i].path, {**live, "name": names[i]}),
                to_create,
            )
            for i, code in zip(to_create, codes, strict=True):
                if code == _ALREADY_EXISTS:
                    to_inspect.append(i)
                elif code != _OK:
                    next_create.append(i)
            snapshots = self._read([refs[i] for i in to_inspect])
            takeovers: list[tuple[int, Any]] = []
            for i in to_inspect:
                snapshot = snapshots.get(refs[i].id)
                if snapshot is None or not snapshot.exists:
                    next_create.append(i)
                    continue
                data = snapshot.to_dict() or {}
                if data.get("claim") == live["claim"]:
                    continue
                error = blocking_error(
                    queue, names[i], data.get("state"), _posix(data.get(TTL_FIELD)), now
                )
                if error is not None:
                    outcomes[i] = error
                else:
                    takeovers.append((i, snapshot.update_time))
            codes = self._commit(
                lambda writes, item: writes.update(
                    refs[item[0]].path,
                    {**live, "name": names[item[0]], "tombstoned_at": None, TTL_FIELD: None},
                    update_time=item[1],
                ),
                takeovers,
            )
            for (i, _), code in zip(takeovers, codes, strict=True):
                if code != _OK:
                    next_inspect.append(i)
            to_create, to_inspect = next_create, next_inspect
            if not to_create and not to_inspect:
                return []
        return to_create + to_inspect

    def release(self, queue: str, names: Sequence[str]) -> None:
        refs = [self._collection.document(document_id(queue, n)) for n in dict.fromkeys(names)]
        try:
            self._delete_live(refs, lambda data: True)
        except Exception as exc:
            error = self._translate(
                exc,
                queue,
                "release task names",
                "the names stay claimed and a re-add reports TaskAlreadyExistsError",
                names,
            )
            if error is None:
                raise
            raise error from exc

    def tombstone(self, queue: str, names: Sequence[str]) -> None:
        now = self._clock()
        unique = list(dict.fromkeys(names))
        record: dict[str, FieldValue] = {
            "queue": queue,
            "state": TOMBSTONE,
            "tombstoned_at": _utc(now),
            TTL_FIELD: _utc(now + self.tombstone_seconds),
        }
        pending = list(range(len(unique)))
        try:
            for _ in range(CLAIM_ROUNDS):
                codes = self._commit(
                    lambda writes, i: writes.set(
                        self._collection.document(document_id(queue, unique[i])).path,
                        {**record, "name": unique[i]},
                    ),
                    pending,
                )
                pending = [i for i, code in zip(pending, codes, strict=True) if code != _OK]
                if not pending:
                    return
        except Exception as exc:
            error = self._translate(
                exc,
                queue,
                "tombstone deleted task names",
                "the tasks are deleted but a re-add of their names reports"
                " TaskAlreadyExistsError instead of TombstonedTaskError",
                names,
            )
            if error is None:
                raise
            raise error from exc
        raise TransientError(
            f"{len(pending)} deleted task names could not be tombstoned in {self.url} (first:"
            f" {unique[pending[0]]!r}); they stay claimed, so a re-add reports"
            " TaskAlreadyExistsError instead of TombstonedTaskError",
            queue=queue,
        )

    def delete(self, queue: str, names: Sequence[str]) -> list[bool]:
        now = self._clock()
        unique = list(dict.fromkeys(names))
        refs = [self._collection.document(document_id(queue, n)) for n in unique]
        tombstone: dict[str, FieldValue] = {
            "state": TOMBSTONE,
            "tombstoned_at": _utc(now),
            TTL_FIELD: _utc(now + self.tombstone_seconds),
            "claim": None,
        }
        deleted: set[str] = set()
        pending = list(range(len(unique)))
        try:
            for _ in range(CLAIM_ROUNDS):
                snapshots = self._read([refs[i] for i in pending])
                live = [
                    (i, snapshots[refs[i].id])
                    for i in pending
                    if refs[i].id in snapshots
                    and snapshots[refs[i].id].exists
                    and (snapshots[refs[i].id].to_dict() or {}).get("state") == LIVE
                ]
                codes = self._commit(
                    lambda writes, item: writes.update(
                        refs[item[0]].path, tombstone, update_time=item[1].update_time
                    ),
                    live,
                )
                pending = []
                for (i, _), code in zip(live, codes, strict=True):
                    if code == _OK:
                        deleted.add(unique[i])
                    else:
                        pending.append(i)
                if not pending:
                    return [name in deleted for name in names]
        except Exception as exc:
            error = self._translate(
                exc,
                queue,
                "tombstone task names deleted by name",
                "the tasks may not be deleted: retry the delete",
                names,
            )
            if error is None:
                raise
            raise error from exc
        raise TransientError(
            f"{len(pending)} task names kept changing while being deleted by name in {self.url}"
            f" (first: {unique[pending[0]]!r}); retry the delete",
            queue=queue,
        )

    def tombstoned(self, queue: str, names: Sequence[str]) -> set[str]:
        now = self._clock()
        unique = list(dict.fromkeys(names))
        paths = [f"{self._collection_path}/{document_id(queue, n)}" for n in unique]
        found: dict[str, Any] = {}
        try:
            for chunk in _chunks(paths):
                found.update(
                    states(
                        self._client,
                        chunk,
                        ("state", TTL_FIELD),
                        retry=self._read_retry,
                        timeout=self.timeout,
                    )
                )
        except Exception as exc:
            error = self._translate(
                exc,
                queue,
                "look up deleted task names",
                "no task was handed out: back off and retry the lease",
                names,
            )
            if error is None:
                raise
            raise error from exc
        tombstoned: set[str] = set()
        for name, path in zip(unique, paths, strict=True):
            fields = found.get(path)
            if fields is None or "state" not in fields:
                continue
            if fields["state"].string_value != TOMBSTONE:
                continue
            expiry = fields.get(TTL_FIELD)  # get: indexing a protobuf map would add the key
            if (
                expiry is None
                or not expiry.HasField("timestamp_value")
                or expiry.timestamp_value.ToMicroseconds() / 1e6 > now
            ):
                tombstoned.add(name)
        return tombstoned

    def purge(self, queue: str) -> None:
        now = self._clock()
        tombstone: dict[str, FieldValue] = {
            "state": TOMBSTONE,
            "tombstoned_at": _utc(now),
            TTL_FIELD: _utc(now + self.tombstone_seconds),
            "claim": None,
        }
        query = (
            self._collection.where(filter=FieldFilter("queue", "==", queue))
            .where(filter=FieldFilter("state", "==", LIVE))
            .select(["state"])
            .order_by("__name__")
            .limit(MAX_WRITES_PER_BATCH)
        )
        try:
            page = list(query.stream(retry=self._read_retry, timeout=self.timeout))
            while page:
                self._commit(
                    lambda writes, snapshot: writes.update(
                        snapshot.reference.path, tombstone, update_time=snapshot.update_time
                    ),
                    page,
                )
                page = list(
                    query.start_after(page[-1]).stream(retry=self._read_retry, timeout=self.timeout)
                )
        except Exception as exc:
            error = self._translate(
                exc,
                queue,
                "tombstone the purged queue's task names",
                "some purged names stay live (a re-add reports TaskAlreadyExistsError): purge"
                " again",
                (),
            )
            if error is None:
                raise
            raise error from exc

    def close(self) -> None:
        self._client.close()  # type: ignore[no-untyped-call]

    def _commit(self, fill: Callable[[Writes, T], None], items: Sequence[T]) -> list[int]:
        """Apply one write per item with BatchWrite (non-atomic); the status code of each."""
        codes: list[int] = []
        for chunk in _chunks(items):
            writes = Writes(self._client._database_string)
            for item in chunk:
                fill(writes, item)
            codes += send(self._client, writes, retry=self._write_retry, timeout=self.timeout)
        return codes

    def _read(self, refs: Sequence[firestore.DocumentReference]) -> dict[str, Any]:
        """Snapshots by document id (missing documents come back with exists False)."""
        snapshots: dict[str, Any] = {}
        for chunk in _chunks(refs):
            for snapshot in self._client.get_all(
                list(chunk), retry=self._read_retry, timeout=self.timeout
            ):
                snapshots[snapshot.id] = snapshot
        return snapshots

    def _delete_live(
        self, refs: Sequence[firestore.DocumentReference], mine: Callable[[dict[str, Any]], bool]
    ) -> None:
        """Delete the live claims among refs that `mine` accepts, unless they changed since read."""
        doomed = [
            snapshot
            for snapshot in self._read(refs).values()
            if snapshot.exists
            and (snapshot.to_dict() or {}).get("state") == LIVE
            and mine(snapshot.to_dict() or {})
        ]
        self._commit(
            lambda writes, snapshot: writes.delete(
                snapshot.reference.path, update_time=snapshot.update_time
            ),
            doomed,
        )

    def _abandon(self, refs: Iterable[firestore.DocumentReference], token: str) -> None:
        """After a failed claim, delete the claims it may have made (best effort: it failed)."""
        try:
            self._delete_live(list(refs), lambda data: data.get("claim") == token)
        except Exception:
            return  # the claim's own error is the one to report

    def _translate(
        self, exc: Exception, queue: str, action: str, consequence: str, names: Sequence[str]
    ) -> Error | None:
        """The pullqueue error for a Firestore failure, or None when it is not one."""
        cause = exc.cause if isinstance(exc, api_exceptions.RetryError) and exc.cause else exc
        detail = f"{type(cause).__name__}: {cause}"
        task = names[0] if len(names) == 1 else None
        if len(names) > 1:
            action = f"{action} ({len(names)} names, first {names[0]!r})"
        if isinstance(exc, _TRANSIENT):
            return TransientError(
                f"the task-name registry {self.url} did not answer when asked to {action}"
                f" ({detail}); {consequence}",
                queue=queue,
                task=task,
            )
        if isinstance(exc, api_exceptions.PermissionDenied | api_exceptions.Unauthenticated):
            return PermissionDeniedError(
                f"the task-name registry {self.url} refused to {action} ({detail}); grant the"
                " service account roles/datastore.user on the project",
                queue=queue,
                task=task,
            )
        if isinstance(exc, api_exceptions.NotFound):
            return ConfigurationError(
                f"the task-name registry {self.url} does not exist ({detail}); create the"
                " Firestore database or fix PULLQUEUE_DEDUPE_URL",
                queue=queue,
                task=task,
            )
        if isinstance(exc, api_exceptions.GoogleAPICallError):
            return InternalError(
                f"the task-name registry {self.url} failed to {action} ({detail}); {consequence}",
                queue=queue,
                task=task,
            )
        return None
