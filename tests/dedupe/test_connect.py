"""connect_registry: the URL and settings that select a task-name registry.

A wrong URL fails at start-up with a ConfigurationError saying what a right one looks like.
"""

from __future__ import annotations

import pytest

from pullqueue.dedupe import MemoryNameRegistry, connect_registry
from pullqueue.errors import ConfigurationError


def test_settings_choose_the_registry_and_tombstone_lifetime(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PULLQUEUE_DEDUPE_URL", "memory://")
    monkeypatch.setenv("PULLQUEUE_TOMBSTONE_SECONDS", "3")
    now = [100.0]
    registry = connect_registry(clock=lambda: now[0])
    assert isinstance(registry, MemoryNameRegistry)
    registry.claim("q", ["n"])
    registry.tombstone("q", ["n"])
    now[0] += 2
    assert registry.claim("q", ["n"])[0] is not None
    now[0] += 2
    assert registry.claim("q", ["n"]) == [None]


def test_unconfigured_registry_says_how_to_configure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PULLQUEUE_DEDUPE_URL", raising=False)
    with pytest.raises(ConfigurationError, match="PULLQUEUE_DEDUPE_URL"):
        connect_registry()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://host", "expected memory:// or firestore://"),
        ("memory://host", "memory:// takes no host"),
        ("firestore://", "expected firestore://PROJECT"),
        ("firestore://p/db/extra", "expected firestore://PROJECT"),
        ("firestore://p?colection=x", "unknown parameters"),
        ("firestore://p?timeout=soon", "timeout"),
        ("firestore://p?timeout=0", "above zero"),
    ],
)
def test_malformed_urls_are_configuration_errors(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        connect_registry(url)


def test_tombstone_lifetime_must_be_positive() -> None:
    with pytest.raises(ConfigurationError, match="above zero"):
        connect_registry("memory://", tombstone_seconds=0)
