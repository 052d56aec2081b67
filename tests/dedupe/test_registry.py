"""The NameRegistry contract, run on the in-memory registry and on Firestore (emulator).

These are the legacy named-task rules a producer relies on: a live name refuses a re-add, a
deleted name stays tombstoned until its time to live runs out, a failed publish gives it back.
"""

from __future__ import annotations

import threading

import pytest

from pullqueue.dedupe.base import NameRegistry
from pullqueue.errors import TaskAlreadyExistsError, TombstonedTaskError

from .conftest import TOMBSTONE_SECONDS, FakeClock, RegistryFactory


def kinds(outcomes: list[object]) -> list[str | None]:
    return [None if o is None else type(o).__name__ for o in outcomes]


def test_fresh_names_are_claimed_once(registry: NameRegistry, queue_name: str) -> None:
    assert registry.claim(queue_name, ["a", "b", "c"]) == [None, None, None]
    outcomes = registry.claim(queue_name, ["b", "d"])
    assert kinds(outcomes) == ["TaskAlreadyExistsError", None]
    error = outcomes[0]
    assert isinstance(error, TaskAlreadyExistsError)
    assert error.queue == queue_name and error.task == "b"


def test_empty_claim_is_a_no_op(registry: NameRegistry, queue_name: str) -> None:
    assert registry.claim(queue_name, []) == []


def test_a_name_repeated_in_one_claim_is_claimed_once(
    registry: NameRegistry, queue_name: str
) -> None:
    assert kinds(registry.claim(queue_name, ["x", "x"])) == [None, "TaskAlreadyExistsError"]


def test_queues_have_separate_names(registry: NameRegistry, queue_name: str) -> None:
    assert registry.claim(queue_name, ["same"]) == [None]
    assert registry.claim(f"{queue_name}-other", ["same"]) == [None]


def test_deleted_name_is_tombstoned_until_it_expires(
    registry: NameRegistry, queue_name: str, clock: FakeClock
) -> None:
    registry.claim(queue_name, ["gone", "kept"])
    registry.tombstone(queue_name, ["gone"])
    outcomes = registry.claim(queue_name, ["gone", "kept"])
    assert kinds(outcomes) == ["TombstonedTaskError", "TaskAlreadyExistsError"]
    assert isinstance(outcomes[0], TombstonedTaskError)
    assert outcomes[0].task == "gone" and "tombstoned until" in str(outcomes[0])

    clock.advance(TOMBSTONE_SECONDS - 1)
    assert kinds(registry.claim(queue_name, ["gone"])) == ["TombstonedTaskError"]
    clock.advance(2)
    assert registry.claim(queue_name, ["gone"]) == [None]
    assert kinds(registry.claim(queue_name, ["gone"])) == ["TaskAlreadyExistsError"]


def test_released_name_can_be_claimed_again(registry: NameRegistry, queue_name: str) -> None:
    registry.claim(queue_name, ["retry-me", "stay"])
    registry.release(queue_name, ["retry-me"])
    assert kinds(registry.claim(queue_name, ["retry-me", "stay"])) == [
        None,
        "TaskAlreadyExistsError",
    ]


def test_release_never_lifts_a_tombstone(registry: NameRegistry, queue_name: str) -> None:
    registry.claim(queue_name, ["t"])
    registry.tombstone(queue_name, ["t"])
    registry.release(queue_name, ["t", "never-claimed"])
    assert kinds(registry.claim(queue_name, ["t"])) == ["TombstonedTaskError"]


def test_tombstone_without_claim_still_blocks(registry: NameRegistry, queue_name: str) -> None:
    """A task added before deduplication was switched on is tombstoned when deleted."""
    registry.tombstone(queue_name, ["older"])
    assert kinds(registry.claim(queue_name, ["older"])) == ["TombstonedTaskError"]


def test_purge_tombstones_the_queues_live_names(
    registry: NameRegistry, queue_name: str, clock: FakeClock
) -> None:
    """The legacy stub keeps purged names as it keeps deleted ones."""
    registry.claim(queue_name, ["live-1", "live-2"])
    registry.claim(f"{queue_name}-other", ["live-1"])
    registry.purge(queue_name)
    assert kinds(registry.claim(queue_name, ["live-1", "live-2", "new"])) == [
        "TombstonedTaskError",
        "TombstonedTaskError",
        None,
    ]
    assert kinds(registry.claim(f"{queue_name}-other", ["live-1"])) == ["TaskAlreadyExistsError"]
    clock.advance(TOMBSTONE_SECONDS + 1)
    assert registry.claim(queue_name, ["live-1"]) == [None]


def test_names_are_seen_by_every_handle(make_registry: RegistryFactory, queue_name: str) -> None:
    first, second = make_registry(), make_registry()
    first.claim(queue_name, ["shared"])
    assert kinds(second.claim(queue_name, ["shared"])) == ["TaskAlreadyExistsError"]
    first.tombstone(queue_name, ["shared"])
    assert kinds(second.claim(queue_name, ["shared"])) == ["TombstonedTaskError"]


def _race(
    make_registry: RegistryFactory, queue_name: str, names: list[str], producers: int
) -> list[list[object]]:
    handles = [make_registry() for _ in range(producers)]
    start = threading.Barrier(producers)
    results: list[list[object]] = [[] for _ in range(producers)]
    failures: list[BaseException] = []

    def produce(index: int) -> None:
        try:
            start.wait()
            for offset in range(0, len(names), 100):
                results[index].extend(
                    handles[index].claim(queue_name, names[offset : offset + 100])
                )
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(producers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
    return results


def test_concurrent_producers_win_each_name_exactly_once(
    make_registry: RegistryFactory, queue_name: str
) -> None:
    names = [f"n{i}" for i in range(1000)]
    results = _race(make_registry, queue_name, names, producers=8)
    winners = [sum(1 for r in results if r[i] is None) for i in range(len(names))]
    assert winners == [1] * len(names)
    losers = {type(o).__name__ for r in results for o in r if o is not None}
    assert losers == {"TaskAlreadyExistsError"}


def test_concurrent_producers_take_over_an_expired_tombstone_once(
    make_registry: RegistryFactory, queue_name: str, clock: FakeClock
) -> None:
    names = [f"old{i}" for i in range(200)]
    setup = make_registry()
    setup.claim(queue_name, names)
    setup.tombstone(queue_name, names)
    clock.advance(TOMBSTONE_SECONDS + 1)
    results = _race(make_registry, queue_name, names, producers=4)
    winners = [sum(1 for r in results if r[i] is None) for i in range(len(names))]
    assert winners == [1] * len(names)


@pytest.mark.parametrize("name", ["x" * 500, "with_under-score", "0"])
def test_any_legal_name_round_trips(registry: NameRegistry, queue_name: str, name: str) -> None:
    assert registry.claim(queue_name, [name]) == [None]
    registry.tombstone(queue_name, [name])
    assert kinds(registry.claim(queue_name, [name])) == ["TombstonedTaskError"]


def test_delete_by_name_tombstones_only_live_names(
    registry: NameRegistry, queue_name: str, clock: FakeClock
) -> None:
    registry.claim(queue_name, ["job-1", "job-2", "done"])
    registry.tombstone(queue_name, ["done"])
    assert registry.delete(queue_name, ["job-1", "done", "never-added"]) == [True, False, False]
    assert registry.tombstoned(queue_name, ["job-1", "job-2", "done", "never-added"]) == {
        "job-1",
        "done",
    }
    assert kinds(registry.claim(queue_name, ["job-1", "never-added"])) == [
        "TombstonedTaskError",
        None,
    ]
    assert registry.delete(queue_name, ["job-1"]) == [False]
    clock.advance(TOMBSTONE_SECONDS + 1)
    assert registry.tombstoned(queue_name, ["job-1", "done"]) == set()
    assert registry.delete(queue_name, []) == []
    assert registry.tombstoned(queue_name, []) == set()
