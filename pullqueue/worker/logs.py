"""Structured log lines for the worker: `event=NAME key=value ...`, or one JSON object per line.

The message itself is already in key=value form so any logging setup shows the fields; the CLI
installs a formatter that adds a timestamp and level, or emits JSON for log collectors.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any, TextIO

FIELDS_ATTR = "pullqueue_fields"
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(char: str) -> str:
    known = _ESCAPES.get(char)
    if known is not None:
        return known
    if char.isprintable():
        return char
    code = ord(char)
    if code > 0xFFFF:  # a JSON surrogate pair, so a quoted value still parses as JSON
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    """text with every character that is not printable (C0 and C1 controls, ESC, CR, LF, tabs,
    line and paragraph separators, bidi and other format characters) written as a JSON escape."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape_char(c) for c in text)


def render(value: object) -> str:
    """A value as it appears after `key=`: bare when it is plain printable text, else a quoted
    JSON-style string with every control character escaped, so no value can end a log line,
    start a forged field or reach a terminal as an escape sequence."""
    text = str(value)
    if text and text.isprintable() and not any(c.isspace() or c in '="\\' for c in text):
        return text
    return '"' + "".join(_escape_char(c) for c in text) + '"'


def log_event(logger: logging.Logger, level: int, event: str, **fields: object) -> None:
    """Log `event` with fields as `event=NAME k=v ...`; the fields also ride on the record."""
    if not logger.isEnabledFor(level):
        return
    parts = [f"event={event}", *(f"{k}={render(v)}" for k, v in fields.items() if v is not None)]
    payload = {"event": event, **{k: v for k, v in fields.items() if v is not None}}
    logger.log(level, " ".join(parts), extra={FIELDS_ATTR: payload})


class KeyValueFormatter(logging.Formatter):
    """`ts=... level=info logger=pullqueue.worker event=leased queue=q tasks=10`."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = self.formatTime(record, "%Y-%m-%dT%H:%M:%S")
        line = (
            f"ts={stamp}.{int(record.msecs):03d} level={record.levelname.lower()}"
            f" logger={record.name} {escape_controls(record.getMessage())}"
        )
        if record.exc_info:
            line += " traceback=" + json.dumps(self.formatException(record.exc_info))
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, event and the event's fields."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": record.created,
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        fields = getattr(record, FIELDS_ATTR, None)
        if isinstance(fields, dict):
            data.update(fields)
        else:
            data["message"] = record.getMessage()
        if record.exc_info:
            data["traceback"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


def configure(fmt: str = "kv", level: int = logging.INFO, stream: TextIO | None = None) -> None:
    """Send pullqueue's logs to stream (stderr) as key=value (`kv`) or `json` lines."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else KeyValueFormatter())
    root = logging.getLogger("pullqueue")
    for old in list(root.handlers):
        if getattr(old, "pullqueue_cli", False):
            root.removeHandler(old)
    handler.pullqueue_cli = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False
