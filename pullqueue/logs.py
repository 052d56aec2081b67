"""Structured log lines: `event=NAME key=value ...`, every value escaped so none forges a line.

The adapters and the worker both log events this way; it lives below both so an adapter does not
import the worker package (its formatters and set-up stay in pullqueue.worker.logs).
"""

from __future__ import annotations

import logging

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
