"""The README's troubleshooting entries quote messages a user can search for: each quoted one
is checked against what the installed command prints for that cause."""

from __future__ import annotations

import re
import uuid

from tests.cli.support import ROOT, clean_env, run
from tests.support.emulators import free_port, shared_emulator_host


def troubleshooting_quote(starting: str) -> str:
    """The quoted message of the README troubleshooting entry that starts with `starting`."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Troubleshooting", 1)[1].split("\n## ", 1)[0]
    quotes = re.findall(r"^- \*\*`([^`]+)`", section, flags=re.MULTILINE)
    found = [quote for quote in quotes if quote.startswith(starting)]
    assert len(found) == 1, quotes
    return found[0]


def assert_quoted(quote: str, stderr: str) -> None:
    """Every part of `quote` between its `...` is in stderr, in order."""
    pattern = ".*".join(re.escape(part.strip()) for part in quote.split("..."))
    assert re.search(pattern, stderr), (quote, stderr)


def test_the_dead_emulator_entry_quotes_the_message() -> None:
    host = f"127.0.0.1:{free_port()}"
    quote = troubleshooting_quote("cannot reach").replace("HOST:PORT", host)
    done = run(
        "stats", "jobs", "--url", "pubsub://my-project", env=clean_env(PUBSUB_EMULATOR_HOST=host)
    )
    assert done.returncode == 1
    assert_quoted(quote, done.stderr)


def test_the_not_provisioned_entry_quotes_the_message() -> None:
    env = clean_env(PUBSUB_EMULATOR_HOST=shared_emulator_host("pubsub"))
    project = f"pq-{uuid.uuid4().hex[:12]}"
    done = run("stats", "jobs", "--url", f"pubsub://{project}", env=env)
    assert done.returncode == 1
    assert_quoted(troubleshooting_quote("queue"), done.stderr)


def test_the_memory_entry_quotes_the_warning() -> None:
    done = run("stats", "jobs")
    assert done.returncode == 0
    assert_quoted(troubleshooting_quote("Warning: memory://"), done.stderr)
