"""Query parameters read strictly: each route names the ones it takes and how each is read.

A value a page cannot use (a garbage cursor, a tag over the limit, bytes that are not UTF-8, a
parameter given twice or one the page does not take) is a 400 naming the parameter, never a
500 and never silently ignored (a mistyped filter must not look like an empty queue).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote_to_bytes

from pullqueue import limits
from pullqueue.errors import Error
from pullqueue.queue import validate_queue_name

MAX_USEC = 253_402_300_800_000_000
"""Microseconds from the epoch to year 10000: no ETA a cursor holds is further off."""
_CURSOR = re.compile(
    rf"(-?(?:0|[1-9][0-9]{{0,17}}))~([a-zA-Z0-9_-]{{0,{limits.MAX_TASK_NAME_LENGTH}}})"
)


class BadParameter(ValueError):
    """A query parameter the page cannot use; `parameter` names it."""

    def __init__(self, parameter: str, problem: str) -> None:
        super().__init__(f"bad parameter {parameter!r}: {problem}")
        self.parameter = parameter
        self.problem = problem


Reader = Callable[[str], Any]


def read_query(
    raw: bytes, readers: Mapping[str, Reader], *, ignored: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The parameters of a raw query string, each read by its reader; BadParameter otherwise.

    Parameters in `ignored` (the token gate's `token`) are let through unread.
    """
    values: dict[str, Any] = {}
    seen: set[str] = set()
    for pair in raw.split(b"&"):
        if not pair:
            continue
        name_bytes, _, value_bytes = pair.partition(b"=")
        shown = name_bytes.decode("ascii", "replace")[:60]
        name = _decode(name_bytes, shown)
        value = _decode(value_bytes, name)
        if name in ignored:
            continue
        if name not in readers:
            takes = ", ".join(sorted(readers)) or "none"
            raise BadParameter(name, f"this page takes no such parameter (it takes: {takes})")
        if name in seen:
            raise BadParameter(name, "given more than once")
        seen.add(name)
        try:
            values[name] = readers[name](value)
        except BadParameter:
            raise
        except (ValueError, Error) as exc:
            raise BadParameter(name, str(exc)) from None
    return values


def _decode(raw: bytes, parameter: str) -> str:
    try:
        return unquote_to_bytes(raw.replace(b"+", b" ")).decode("utf-8")
    except UnicodeDecodeError:
        raise BadParameter(parameter, "not UTF-8 text once percent-decoded") from None


def tag(text: str) -> str | None:
    """A tag filter: empty for every tag; at most 500 bytes (the legacy limit)."""
    if text == "":
        return None
    size = len(text.encode("utf-8"))
    if size > limits.MAX_TAG_LENGTH:
        raise ValueError(f"a tag is at most {limits.MAX_TAG_LENGTH} bytes; this one is {size}")
    return text


def cursor(text: str) -> tuple[float, str] | None:
    """A paging cursor as the page's next link writes it: ETA in microseconds, '~', name."""
    if text == "":
        return None
    found = _CURSOR.fullmatch(text)
    if found is None or abs(int(found.group(1))) >= MAX_USEC:
        raise ValueError(
            "not a paging cursor (ETA in microseconds, '~', task name, as the page's next link"
            " has it): open the first page again"
        )
    return int(found.group(1)) / 1e6, found.group(2)


def queue_name(text: str) -> str:
    """A queue's name typed into the 'open a queue' box."""
    name = text.strip()
    if not name:
        raise ValueError("give a queue's name")
    validate_queue_name(name)
    return name


def one_of(*choices: str) -> Reader:
    def read(text: str) -> str:
        if text not in choices:
            raise ValueError(f"{text[:80]!r} is not one of: {', '.join(choices)}")
        return text

    return read


_TASK_NAME = re.compile(rf"[a-zA-Z0-9_-]{{1,{limits.MAX_TASK_NAME_LENGTH}}}")
MAX_NEEDLE_BYTES = 10_000
"""The longest payload substring a search takes."""


def task_name(text: str) -> str:
    """A task's name, by the legacy rules (letters, digits, '_' and '-'; at most 500)."""
    if text == "":
        raise ValueError("give the task's name")
    if _TASK_NAME.fullmatch(text) is None:
        raise ValueError(
            f"{text[:80]!r} is not a task name (letters, digits, '_' and '-';"
            f" at most {limits.MAX_TASK_NAME_LENGTH})"
        )
    return text


def optional_task_name(text: str) -> str | None:
    """A task name typed into the find box: empty when only the payload is searched."""
    return None if text == "" else task_name(text)


def payload_text(text: str) -> str | None:
    """A payload substring typed into the find box: empty for none; at most 10,000 bytes."""
    if text == "":
        return None
    size = len(text.encode("utf-8"))
    if size > MAX_NEEDLE_BYTES:
        raise ValueError(
            f"a payload substring is at most {MAX_NEEDLE_BYTES:,} bytes; this is {size:,}"
        )
    return text
