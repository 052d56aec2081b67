"""Backoff delays double up to a ceiling, carry jitter, and start over after a reset."""

from __future__ import annotations

import pytest

from pullqueue.worker import Backoff


def ceilings(backoff: Backoff, count: int) -> list[float]:
    return [backoff.next() for _ in range(count)]


def test_delays_double_up_to_the_maximum() -> None:
    backoff = Backoff(0.1, 1.0, uniform=lambda lo, hi: hi)
    assert ceilings(backoff, 7) == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0])


def test_each_delay_is_drawn_between_half_and_all_of_its_ceiling() -> None:
    seen: list[tuple[float, float]] = []

    def uniform(lo: float, hi: float) -> float:
        seen.append((lo, hi))
        return (lo + hi) / 2

    backoff = Backoff(0.2, 5.0, uniform=uniform)
    assert backoff.next() == pytest.approx(0.15)
    assert seen == [(pytest.approx(0.1), pytest.approx(0.2))]


def test_real_jitter_spreads_workers_apart() -> None:
    delays = {Backoff(1.0, 1.0).next() for _ in range(50)}
    assert len(delays) > 40
    assert all(0.5 <= d <= 1.0 for d in delays)


def test_reset_starts_again_from_the_initial_delay() -> None:
    backoff = Backoff(0.1, 10.0, uniform=lambda lo, hi: hi)
    ceilings(backoff, 4)
    backoff.reset()
    assert backoff.next() == pytest.approx(0.1)


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="initial <= maximum"):
        Backoff(2.0, 1.0)
