"""Turns at a queue's hand (pullqueue/adapters/pubsub/turns.py): plain leases side by side, a
lease by tag alone, and a waiting lease by tag not starved by plain ones."""

from __future__ import annotations

import threading
import time

import pytest

from pullqueue.adapters.pubsub.turns import Turns


def hold(turns: Turns, shared: bool, seconds: float, spans: list[tuple[float, float]]) -> None:
    assert turns.acquire(shared=shared, timeout=5)
    began = time.monotonic()
    time.sleep(seconds)
    spans.append((began, time.monotonic()))
    turns.release()


def overlapping(spans: list[tuple[float, float]]) -> int:
    """Most spans running at one moment."""
    events = sorted([(b, 1) for b, _ in spans] + [(e, -1) for _, e in spans])
    most = running = 0
    for _, step in events:
        running += step
        most = max(most, running)
    return most


def run(turns: Turns, kinds: list[bool], seconds: float = 0.1) -> list[tuple[float, float]]:
    spans: list[tuple[float, float]] = []
    threads = [threading.Thread(target=hold, args=(turns, k, seconds, spans)) for k in kinds]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return spans


def test_shared_turns_run_side_by_side() -> None:
    assert overlapping(run(Turns(), [True] * 4)) == 4


def test_exclusive_turns_run_alone() -> None:
    assert overlapping(run(Turns(), [False] * 3)) == 1
    turns = Turns()
    spans: list[tuple[float, float]] = []
    first = threading.Thread(target=hold, args=(turns, False, 0.2, spans))
    first.start()
    time.sleep(0.05)
    assert not turns.acquire(shared=True, timeout=0.05)  # not beside one alone
    first.join()
    assert turns.acquire(shared=True, timeout=0.05)
    turns.release()


def test_a_waiting_exclusive_turn_holds_back_new_shared_ones() -> None:
    turns = Turns()
    spans: list[tuple[float, float]] = []
    reader = threading.Thread(target=hold, args=(turns, True, 0.3, spans))
    reader.start()
    time.sleep(0.05)
    order: list[str] = []

    def exclusive() -> None:
        assert turns.acquire(shared=False, timeout=5)
        order.append("exclusive")
        turns.release()

    def late_shared() -> None:
        assert turns.acquire(shared=True, timeout=5)
        order.append("shared")
        turns.release()

    writer = threading.Thread(target=exclusive)
    writer.start()
    time.sleep(0.05)
    second = threading.Thread(target=late_shared)
    second.start()
    for thread in (reader, writer, second):
        thread.join()
    assert order == ["exclusive", "shared"]


def test_an_exclusive_turn_is_reentrant_and_may_take_a_shared_one() -> None:
    turns = Turns()
    assert turns.acquire(shared=False, timeout=0)
    assert turns.acquire(shared=False, timeout=0)
    assert turns.acquire(shared=True, timeout=0)
    for _ in range(3):
        turns.release()
    other: list[bool] = []
    thread = threading.Thread(target=lambda: other.append(turns.acquire(shared=False, timeout=1)))
    thread.start()
    thread.join()
    assert other == [True]


def test_misuse_is_refused() -> None:
    turns = Turns()
    with pytest.raises(RuntimeError, match="does not hold"):
        turns.release()
    assert turns.acquire(shared=True, timeout=0)
    with pytest.raises(RuntimeError, match="alone"):
        turns.acquire(shared=False, timeout=0)
    turns.release()
