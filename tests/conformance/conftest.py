"""Parametrizes the conformance suite over every backend case (`case_*.py` beside this file).

A test asks for the `harness` fixture and names the features it needs with
`@pytest.mark.feature(...)`; it is generated only for the cases that do not list one of them in
`differs`, so a documented difference removes the test for that backend instead of skipping it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from tests.conformance.harness import FEATURES, BackendCase, Harness, iter_cases

CASES = list(iter_cases())


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "feature(*names): conformance features the test needs (see harness.FEATURES)"
    )
    for case in CASES:
        unknown = set(case.differs) - set(FEATURES)
        if unknown:
            raise pytest.UsageError(
                f"case {case.name!r} lists unknown features {sorted(unknown)}; "
                f"known: {sorted(FEATURES)}"
            )


def _features(metafunc: pytest.Metafunc) -> set[str]:
    names: set[str] = set()
    for marker in metafunc.definition.iter_markers("feature"):
        names.update(marker.args)
    unknown = names - set(FEATURES)
    if unknown:
        raise pytest.UsageError(
            f"{metafunc.definition.nodeid} needs unknown features {sorted(unknown)}"
        )
    return names


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "harness" not in metafunc.fixturenames:
        return
    needed = _features(metafunc)
    cases = [case for case in CASES if not needed & set(case.differs)]
    if not cases:
        raise pytest.UsageError(
            f"{metafunc.definition.nodeid}: no backend case supports {sorted(needed)}"
        )
    metafunc.parametrize("backend_case", cases, ids=[case.name for case in cases], scope="session")


class _OpenCases:
    """Harnesses opened so far this session, closed together at its end."""

    def __init__(self, stack: ExitStack) -> None:
        self._stack = stack
        self._opened: dict[str, Harness] = {}

    def get(self, case: BackendCase) -> Harness:
        if case.name not in self._opened:
            self._opened[case.name] = self._stack.enter_context(case.open())
        return self._opened[case.name]


@pytest.fixture(scope="session")
def _open_cases() -> Iterator[_OpenCases]:
    with ExitStack() as stack:
        yield _OpenCases(stack)


@pytest.fixture
def harness(backend_case: BackendCase, _open_cases: _OpenCases) -> Harness:
    """The case's harness, opened once per session and shared by its tests (fresh queues each)."""
    return _open_cases.get(backend_case)
