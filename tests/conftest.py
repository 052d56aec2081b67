"""Session-wide test hooks: which tests share one xdist worker, the fault suite's figures printed
at the end of every run (sent from the workers with each test's report), and what the stall watch
saw, with each failure and at the end."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import asdict

import pytest

from tests.support import stallwatch
from tests.support.faultreport import FIGURES, Figure

ONE_AT_A_TIME = (
    "tests/pubsub/",
    "tests/faults/",
    "tests/outbox/test_crash.py",
    "tests/migrate/test_crash.py",
    "tests/ops/test_deadletters.py",
    "tests/ops/test_metrics.py",
    "tests/bridge/test_go_pause.py",
    "tests/dedupe/test_pubsub_named.py",
    "tests/dedupe/test_delete_by_name_processes.py",
)
"""Tests that run worker processes (up to 32) or bound the Pub/Sub adapter's calls in time: they
run one after another on one xdist worker (`--dist loadgroup`), never two of them at once on a
2-core machine, while the other worker runs the rest (README, "Two workers")."""

_FIGURE = "fault-figure"
REPORTED: list[Figure] = []
"""Figures of the run, as the reports brought them (from the xdist workers, or this process)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        if path.startswith(ONE_AT_A_TIME):
            item.add_marker(pytest.mark.xdist_group("one-at-a-time"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if call.when == "setup":
        item.stash[_BEGAN] = call.start
    if report.failed:
        # Whether the host froze or the emulator answered late while the test ran (CI has seen
        # emulator calls unanswered for 10 s): printed with the failure.
        began = item.stash.get(_BEGAN, call.start)
        report.sections.append(("stall watch", stallwatch.describe(began, call.stop)))
    # A figure recorded in this phase travels with its report (xdist sends user_properties).
    for figure in FIGURES[_sent[0] :]:
        report.user_properties.append((_FIGURE, asdict(figure)))
    _sent[0] = len(FIGURES)
    return report


_sent = [0]
"""How many of this process's FIGURES a report has carried."""
_BEGAN = pytest.StashKey[float]()
"""When (wall clock) the test's setup began."""
STALLS: list[str] = []
"""The stall watch's longest events, per process that watched an emulator (xdist workers send
theirs when they finish)."""


def pytest_runtest_setup(item: pytest.Item) -> None:
    # A test run again (pytest-rerunfailures counts its runs) starts once the emulator answers
    # promptly: CI saw a stall outlast a test, its rerun two seconds later, and the next test.
    if getattr(item, "execution_count", 1) > 1:
        waited = stallwatch.await_responsive()
        if waited >= stallwatch.NOTABLE:
            STALLS.append(f"{item.nodeid}: its rerun waited {waited:.1f} s for the emulator")


def pytest_sessionfinish(session: pytest.Session) -> None:
    worst = STALLS + [line for w in stallwatch.WATCHES for line in w.worst()]
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["stalls"] = worst
    else:
        STALLS[:] = worst


def pytest_testnodedown(node: object, error: object) -> None:
    """(pytest-xdist) A worker finished: keep what its stall watch saw."""
    STALLS.extend(getattr(node, "workeroutput", {}).get("stalls", []))


RERUNS: list[pytest.TestReport] = []
"""Reports of the attempts pytest-rerunfailures ran again: their failure is printed at the end
(its own summary names the test only), so a rerun in a CI log can be followed up."""
RERUN_LINES = 80
"""Last lines of each rerun attempt's failure printed."""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for name, value in report.user_properties:
        if name == _FIGURE:
            REPORTED.append(Figure(**value))
    if report.outcome == "rerun":  # type: ignore[comparison-overlap]
        RERUNS.append(report)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if REPORTED:
        terminalreporter.section("fault suite figures (docs/reliability.md)")
        for figure in REPORTED:
            terminalreporter.write_line(figure.line())
    if RERUNS:
        terminalreporter.section(
            "first failures of the tests run again (README, tests on a loaded host)"
        )
        for report in RERUNS:
            terminalreporter.write_sep("_", f"{report.nodeid} ({report.when})")
            for line in report.longreprtext.splitlines()[-RERUN_LINES:]:
                terminalreporter.write_line(line)
            for name, content in report.sections:
                if name == "stall watch":
                    terminalreporter.write_line(f"-- {name} --")
                    terminalreporter.write_line(content)
    terminalreporter.section("stall watch (the longest waits on the host and the emulator)")
    for line in STALLS or ["nothing over a second"]:
        terminalreporter.write_line(line)
