"""Structured log lines for the worker: `event=NAME key=value ...`, or one JSON object per line.

The message itself is already in key=value form so any logging setup shows the fields; the CLI
installs a formatter that adds a timestamp and level, or emits JSON for log collectors.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any, TextIO

from pullqueue.logs import FIELDS_ATTR, escape_controls, log_event, render

__all__ = [
    "FIELDS_ATTR",
    "JsonFormatter",
    "KeyValueFormatter",
    "configure",
    "escape_controls",
    "log_event",
    "render",
]


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
