"""What a backend brings to the conformance suite: a backend, a clock to move, fresh queues.

Each `case_<backend>.py` beside this file exposes `CASE: BackendCase`; conftest parametrizes the
suite over every case, leaving out only the features a case documents as behaving differently.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from pullqueue import Backend, Queue

_counter = itertools.count(1)


@dataclass
class Harness:
    """One backend under test with the means to drive it."""

    backend: Backend
    advance: Callable[[float], None]
    """Move the backend's clock forward by seconds: a fake clock ticks, a real one sleeps."""
    short_lease: float = 1.0
    """The shortest lease (seconds) whose expiry the backend honours precisely."""
    prefix: str = "conf"

    def new_queue(self) -> Queue:
        """A fresh, empty queue on this backend (a unique legal queue name)."""
        return Queue(f"{self.prefix}-{next(_counter)}", self.backend)


@dataclass
class BackendCase:
    """A backend the conformance suite runs on."""

    name: str
    open: Callable[[], AbstractContextManager[Harness]]
    differs: Mapping[str, str] = field(default_factory=dict)
    """feature -> why this backend behaves differently (documented, and tested on its own)."""


def iter_cases() -> Iterator[BackendCase]:
    """Every CASE in the case_*.py modules beside this file."""
    import importlib
    import pkgutil
    from pathlib import Path

    for info in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda m: m.name):
        if info.name.startswith("case_"):
            module = importlib.import_module(f"tests.conformance.{info.name}")
            yield module.CASE
