"""The rate limiter keeps every one-second window under the rate, across threads."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from pullqueue.ratelimit import RateLimiter, shared_limiter


class FakeTime:
    def __init__(self) -> None:
        self.now = 1000.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_calls_are_spaced_one_interval_apart() -> None:
    fake = FakeTime()
    limiter = RateLimiter(10, clock=fake.clock, sleep=fake.sleep)
    stamps = []
    for _ in range(25):
        limiter.acquire()
        stamps.append(fake.now)
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert stamps[0] == 1000.0
    assert all(gap == pytest.approx(0.1) for gap in gaps)


def test_an_idle_limiter_does_not_bank_calls_beyond_its_burst() -> None:
    fake = FakeTime()
    limiter = RateLimiter(10, burst=3, clock=fake.clock, sleep=fake.sleep)
    limiter.acquire()
    fake.now += 60
    assert [limiter.try_acquire() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.try_acquire() == pytest.approx(0.1)
    assert limiter.try_acquire() == pytest.approx(0.1), "a refused try claims nothing"
    fake.now += 0.1
    assert limiter.try_acquire() == 0.0


def test_threads_sharing_a_limiter_stay_under_the_rate() -> None:
    limiter = RateLimiter(50)
    stamps: list[float] = []
    lock = threading.Lock()

    def call() -> None:
        for _ in range(10):
            limiter.acquire()
            with lock:
                stamps.append(time.monotonic())

    threads = [threading.Thread(target=call) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stamps.sort()
    assert len(stamps) == 40
    # 40 calls at 50/s take at least 39 intervals of 20 ms.
    assert stamps[-1] - stamps[0] >= 39 * 0.02 * 0.95
    for i, start in enumerate(stamps):
        in_window = [s for s in stamps[i:] if s < start + 0.2]
        assert len(in_window) <= 10


def test_shared_limiter_is_one_object_per_key_and_rate() -> None:
    a = shared_limiter("memory://|q1", 10)
    assert shared_limiter("memory://|q1", 10) is a
    assert shared_limiter("memory://|q2", 10) is not a
    assert shared_limiter("memory://|q1", 5) is not a


def test_rate_must_be_positive() -> None:
    with pytest.raises(ValueError, match="rate must be above zero"):
        RateLimiter(0)
