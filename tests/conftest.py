"""Session-wide test hooks: the fault suite's figures are printed at the end of every run."""

from __future__ import annotations

import pytest

from tests.support.faultreport import FIGURES


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if FIGURES:
        terminalreporter.section("fault suite figures (docs/reliability.md)")
        for figure in FIGURES:
            terminalreporter.write_line(figure.line())
