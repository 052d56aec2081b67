"""Task names and tags from a foreign publisher cannot forge or corrupt `pullqueue work` logs.

A raw Pub/Sub publisher puts ESC sequences, C1 controls, CR, LF followed by a forged
`event=forged level=error`, and separators into task_name and tag; the installed CLI serves the
tasks on the emulator and every line it logs stays one well-formed record, payloads never shown.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials
from google.pubsub_v1 import PublisherClient

from pullqueue import Queue, Task, connect
from pullqueue.worker.logs import configure, render
from tests.support.emulators import shared_emulator_host

PULLQUEUE = str(Path(sys.executable).with_name("pullqueue"))
FORGED = "\r\nevent=forged level=error"
HOSTILE_NAME = "evil\x1b[2J\x1b]0;owned\x07\x9b31m" + FORGED
HOSTILE_TAG = "tag\x85\u2028\u202e\x00" + FORGED
ESC_NAME = "esc\x1b[31m\x9b1m\x1b]0;owned\x07"
ESC_TAG = "tag\x1b[5m\u202e\x9d"
SECRET = "SECRET-PAYLOAD-7f3a"
HANDLER = """
def handle(task):
    if task.retry_count == 1:
        raise RuntimeError("downstream unavailable")
"""


def _publish_hostile(project: str, queue_name: str) -> None:
    shared_emulator_host("pubsub")
    backend = connect(f"pubsub://{project}", auto_create=True, dedupe_url="memory://")
    try:
        Queue(queue_name, backend).add(Task(SECRET, name="plain", tag="plain-tag"))
    finally:
        backend.close()
    publisher = PublisherClient(credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
    try:
        publisher.publish(
            request={
                "topic": publisher.topic_path(project, queue_name),
                "messages": [
                    {"data": SECRET.encode(), "attributes": {"task_name": HOSTILE_NAME}},
                    {"data": SECRET.encode(), "attributes": {"tag": HOSTILE_TAG}},
                    {
                        "data": SECRET.encode(),
                        "attributes": {"task_name": ESC_NAME, "tag": ESC_TAG},
                    },
                ],
            }
        )
    finally:
        publisher.transport.close()  # type: ignore[no-untyped-call]


def _work(tmp_path: Path, project: str, queue_name: str, log_format: str) -> str:
    (tmp_path / "forging_handler.py").write_text(textwrap.dedent(HANDLER))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULLQUEUE_")}
    env.update(PULLQUEUE_AUTO_CREATE="1", PUBSUB_EMULATOR_HOST=shared_emulator_host("pubsub"))
    result = subprocess.run(
        [
            *(PULLQUEUE, "work", queue_name, "forging_handler:handle", "--group-by-tag", "-v"),
            *("--url", f"pubsub://{project}", "--exit-when-idle", "2", "--log-format", log_format),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stderr


def _clean(log: str) -> list[str]:
    """The log's lines, after checking that no byte of it is a control character but LF."""
    assert SECRET not in log
    assert all(c.isprintable() or c == "\n" for c in log), [c for c in log if not c.isprintable()]
    return log.splitlines()


_TOKEN = re.compile(r'([a-z_]+)=("(?:[^"\\]|\\.)*"|[^\s"]+)(?: |$)')


def parse_kv(line: str) -> dict[str, str]:
    """A kv log line as its fields (quoted values decoded); fails unless the whole line is
    `key=value` tokens, each key once."""
    fields: dict[str, str] = {}
    position = 0
    while position < len(line):
        match = _TOKEN.match(line, position)
        assert match is not None, f"not key=value at {position}: {line}"
        key, value = match.groups()
        assert key not in fields, f"{key} twice: {line}"
        fields[key] = json.loads(value) if value.startswith('"') else value
        position = match.end()
    return fields


def assert_hostile_names_replaced(records: list[dict[str, str]], failed: list[Any]) -> None:
    """A task_name that is no task name is served as pubsub-MESSAGE_ID; the hostile value reaches
    the log only escaped, in the warning that says so (docs/pubsub.md, wire format)."""
    ignored = [r for r in records if r["event"] == "foreign_attribute_ignored"]
    assert {r["message_id"] for r in ignored if "task_name" in r["detail"]}, records
    assert all(r["detail"].isprintable() for r in ignored)
    renamed = {f"pubsub-{r['message_id']}" for r in ignored if "task_name" in r["detail"]}
    assert len(renamed) == 2
    assert renamed <= {record["task"] for record in failed}, failed


def test_kv_logs_escape_every_control_character(tmp_path: Path) -> None:
    project, queue_name = f"pq-{uuid.uuid4().hex[:12]}", "forged"
    _publish_hostile(project, queue_name)
    records = [parse_kv(line) for line in _clean(_work(tmp_path, project, queue_name, "kv"))]
    assert all(record["event"] != "forged" for record in records)
    failed = [record for record in records if record["event"] == "failed"]
    assert_hostile_names_replaced(records, failed)
    assert {HOSTILE_TAG, ESC_TAG} <= {record.get("tag") for record in failed}, failed
    assert render(HOSTILE_NAME).startswith(r'"evil\u001b[2J\u001b]0;owned\u0007\u009b31m\r\n')


def test_json_logs_escape_every_control_character(tmp_path: Path) -> None:
    project, queue_name = f"pq-{uuid.uuid4().hex[:12]}", "forged"
    _publish_hostile(project, queue_name)
    records = [json.loads(line) for line in _clean(_work(tmp_path, project, queue_name, "json"))]
    assert all(record["event"] != "forged" for record in records)
    failed = [record for record in records if record["event"] == "failed"]
    assert_hostile_names_replaced(records, failed)
    assert {HOSTILE_TAG, ESC_TAG} <= {record.get("tag") for record in failed}, failed


@pytest.mark.parametrize(
    "value",
    [
        "plain",
        "",
        "a b",
        "x=y",
        'q"uote',
        "back\\slash",
        HOSTILE_NAME,
        ESC_NAME,
        ESC_TAG,
        "\U000e0001",
    ],
)
def test_a_rendered_value_is_one_token_that_reads_back(value: str) -> None:
    text = render(value)
    assert text.isprintable() and (text == value or json.loads(text) == value)
    assert not re.search(r"\s", text.strip('"')) or text.startswith('"')


@pytest.mark.parametrize("log_format", ["kv", "json"])
def test_free_text_records_are_one_line_too(log_format: str) -> None:
    stream = io.StringIO()
    configure(log_format, stream=stream)
    logging.getLogger("pullqueue.adapters.pubsub").warning("task %s: taken back", ESC_NAME + FORGED)
    (line,) = stream.getvalue().splitlines()
    assert line.isprintable() and "taken back" in line
    if log_format == "json":
        assert json.loads(line)["message"] == f"task {ESC_NAME + FORGED}: taken back"
