"""The connection between the workers and Pub/Sub cut mid-run, then restored: nothing is lost.

The workers reach the emulator through a loopback proxy (tests/support/tcpproxy.py). While the
line is down their lease, delete and lease-extension calls fail; they back off, keep running,
and pick up where they were once it is back. Tasks handled but not deleted during the cut are
handled again after their leases end (the duplicates). PULLQUEUE_FAULTS_OUTAGE sets the cut's
length in seconds (10 by default; 20 for the figures in docs/reliability.md).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.harness import Fleet, fill, new_project, size
from tests.support.faultreport import record
from tests.support.tcpproxy import Mode, TcpProxy

pytestmark = pytest.mark.faults

WORKERS = 2


@pytest.fixture
def proxy(emulator: str) -> Iterator[TcpProxy]:
    with TcpProxy(emulator) as proxy:
        yield proxy


@pytest.mark.parametrize("mode", ["refuse", "blackhole"])
def test_a_cut_connection_loses_no_task_and_work_resumes(
    mode: Mode, proxy: TcpProxy, tmp_path: Path
) -> None:
    tasks = size("PULLQUEUE_FAULTS_CUT_TASKS", 600)
    outage = size("PULLQUEUE_FAULTS_OUTAGE", 10)
    project = new_project()
    payloads = fill(project, "cut", tasks)
    fleet = Fleet(
        project,
        "cut",
        tmp_path,
        proxy.address,
        handler="tests.faults.handlers:slow",
        options=("--batch-size", "20", "--concurrency", "4"),
        environment={"FAULTS_HANDLER_SECONDS": "0.02"},
    )
    fleet.start(WORKERS)
    try:
        deadline = time.monotonic() + 120
        while len(fleet.handled().done) < tasks // 4:
            assert time.monotonic() < deadline, f"no progress before the cut\n{fleet.logs()}"
            time.sleep(0.05)
        proxy.cut(mode)
        cut_at = time.time()
        time.sleep(outage)
        assert fleet.alive() == fleet.processes, f"a worker died in the cut\n{fleet.logs()}"
        before = len(fleet.handled().done)
        proxy.restore()
        restored_at = time.time()
        handled = fleet.wait_for(payloads, timeout=300)
        assert fleet.alive() == fleet.processes, f"a worker died\n{fleet.logs()}"
    finally:
        fleet.stop()

    resumed = min(stamp for stamp, _ in handled.done if stamp > restored_at)
    during = sum(1 for stamp, _ in handled.done if cut_at < stamp < restored_at)
    lost = handled.lost(payloads)
    figure = record(
        f"connection to Pub/Sub cut for {outage} s ({mode})",
        tasks=tasks,
        lost=len(lost),
        duplicated=handled.duplicated(),
        recovery_seconds=round(resumed - restored_at, 1),
        handled_during_cut=during,
        left_at_cut=tasks - before,
    )
    assert not lost, f"lost {lost[:5]}\n{fleet.logs()}"
    # What was leased when the line went down: at most a few batches per worker come back.
    assert figure.duplicated <= WORKERS * 4 * 20
    if mode == "refuse":
        # A refused connection is an error the worker reports; a silent line (blackhole) looks
        # like an empty queue to a pull until the connection is reset.
        assert "event=lease_retry" in fleet.logs(), "the workers did not say why they waited"
