"""A task's own page and the search for tasks: one task by name, or tasks by payload substring.

memory:// finds exactly (a name in O(1), a substring in one pass over the queue); a listing
backend reads the queue once; Pub/Sub, which can fetch nothing by name, searches within one look
(a pull given back at once, one delivery attempt per task pulled) and the page says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from pullqueue.adapters.base import Backend, ListingBackend
from pullqueue.inspection import TaskRow, pubsub_rows, task_row
from pullqueue.task import Task

FIND_LIMIT = 100
"""Matches a search shows."""
FIND_LOOK_LIMIT = 1000
"""Tasks one search of a Pub/Sub queue pulls (and gives back) to look through."""
HEX_WIDTH = 16


@dataclass(frozen=True)
class PayloadView:
    """A payload as the task page shows it: text when it is printable UTF-8, else a hex dump."""

    size: int
    text: str | None
    hex_lines: list[str] | None


def payload_view(payload: bytes) -> PayloadView:
    """Text (newlines and tabs kept, the template escapes HTML) for printable UTF-8; otherwise
    offset, hex and ASCII columns, 16 bytes a line, like `hexdump -C`."""
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and all(c.isprintable() or c in "\n\r\t" for c in text):
        return PayloadView(len(payload), text, None)
    lines = []
    for offset in range(0, len(payload), HEX_WIDTH):
        chunk = payload[offset : offset + HEX_WIDTH]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        ascii_ = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{offset:08x}  {hexes:<{HEX_WIDTH * 3 - 1}}  |{ascii_}|")
    return PayloadView(len(payload), None, lines)


def is_pubsub(backend: Backend) -> bool:
    return backend.url.startswith("pubsub://")


def find_task(backend: Backend, queue: str, name: str) -> TaskRow | None:
    """The task of this name (memory:// at once, a listing backend by reading the queue), None
    when absent. Pub/Sub cannot: use `look_for` there."""
    now = backend.now()
    getter = getattr(backend, "get_task", None)
    if callable(getter):
        found: Task | None = getter(queue, name)
        return None if found is None else task_row(found, now)
    if isinstance(backend, ListingBackend):
        for task in backend.list_tasks(queue):
            if task.name == name:
                return task_row(task, now)
    return None


@dataclass(frozen=True)
class Found:
    """What a search found: the matches shown, how many there are, and what was searched."""

    rows: list[TaskRow]
    total: int | None
    """Matches in the whole queue (None where only a look was searched)."""
    note: str


def find_tasks(
    backend: Backend, queue: str, *, name: str | None, needle: bytes | None
) -> Found | None:
    """Tasks named `name` (exact) or whose payload contains `needle`, on a backend that can
    search without leasing; None on Pub/Sub (search with `look_for`)."""
    now = backend.now()
    if name is not None:
        if is_pubsub(backend):
            return None
        row = find_task(backend, queue, name)
        rows = [] if row is None else [row]
        return Found(rows, len(rows), "the name, exactly, over the whole queue")
    assert needle is not None
    search = getattr(backend, "find_payload", None)
    if callable(search):
        tasks, total = search(queue, needle, FIND_LIMIT)
        return Found(
            [task_row(t, now) for t in tasks],
            total,
            "every task's payload searched, leased and scheduled tasks included",
        )
    if isinstance(backend, ListingBackend):
        matches = [t for t in backend.list_tasks(queue) if needle in t.payload]
        matches.sort(key=lambda t: (t.eta_posix or 0.0, t.name or ""))
        return Found(
            [task_row(t, now) for t in matches[:FIND_LIMIT]],
            len(matches),
            "every task's payload searched (the queue read whole)",
        )
    return None


def look_for(backend: Backend, queue: str, *, name: str | None, needle: bytes | None) -> Found:
    """The search on Pub/Sub: within one look of up to FIND_LOOK_LIMIT tasks."""
    rows = pubsub_rows(backend, queue, None, FIND_LOOK_LIMIT)
    if name is not None:
        matches = [r for r in rows if r.name == name]
    else:
        assert needle is not None
        matches = [r for r in rows if needle in r.payload]
    return Found(
        matches[:FIND_LIMIT],
        None,
        f"searched within one look: {len(rows):,} tasks pulled and given back at once (each"
        " one delivery attempt); tasks leased by a worker or waiting for a future ETA are"
        " hidden from a pull and were not searched",
    )
