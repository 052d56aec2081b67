"""The connection between the workers and Pub/Sub cut mid-run, then restored: nothing is lost.

The workers reach the emulator through a loopback proxy (tests/support/tcpproxy.py), and the
line is cut twice in one run: first refused (a dead host: connections reset and refused), then
silent (a blackhole: nothing answers, nothing is reset). While it is down, lease, delete and
lease-extension calls fail or time out; the workers back off, keep running, and pick up where
they were once it is back. Tasks handled but not deleted during a cut are handled again after
their leases end: the duplicates. PULLQUEUE_FAULTS_OUTAGE sets each cut's length in seconds (10
by default; 20 for the figures in docs/reliability.md).
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
BATCH = 20
CONCURRENCY = 4


@pytest.fixture
def proxy(emulator: str) -> Iterator[TcpProxy]:
    with TcpProxy(emulator) as proxy:
        yield proxy


def cut_and_restore(proxy: TcpProxy, fleet: Fleet, mode: Mode, outage: float) -> float:
    """Cut the line for `outage` s and mend it; the time it was mended (time.time())."""
    proxy.cut(mode)
    time.sleep(outage)
    assert fleet.alive() == fleet.processes, f"a worker died in the cut\n{fleet.logs()}"
    proxy.restore()
    return time.time()


def first_done_after(fleet: Fleet, moment: float, timeout: float = 120) -> float:
    deadline = time.monotonic() + timeout
    while True:
        after = [stamp for stamp, _ in fleet.handled().done if stamp > moment]
        if after:
            return min(after)
        assert time.monotonic() < deadline, (
            f"no task handled since the line came back\n{fleet.logs()}"
        )
        time.sleep(0.05)


def test_a_cut_connection_loses_no_task_and_work_resumes(proxy: TcpProxy, tmp_path: Path) -> None:
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
        options=("--batch-size", str(BATCH), "--concurrency", str(CONCURRENCY)),
        environment={"FAULTS_HANDLER_SECONDS": "0.02"},
    )
    fleet.start(WORKERS)
    recovered: dict[str, float] = {}
    try:
        deadline = time.monotonic() + 120
        while len(fleet.handled().done) < tasks // 4:
            assert time.monotonic() < deadline, f"no progress before the cut\n{fleet.logs()}"
            time.sleep(0.05)
        for mode in ("refuse", "blackhole"):
            left = tasks - len(set(fleet.handled().counts))
            assert left > tasks // 4, "too few tasks left to see the cut; raise the size"
            restored = cut_and_restore(proxy, fleet, mode, outage)
            recovered[mode] = first_done_after(fleet, restored) - restored
        handled = fleet.wait_for(payloads, timeout=300)
        assert fleet.alive() == fleet.processes, f"a worker died\n{fleet.logs()}"
    finally:
        fleet.stop()

    lost = handled.lost(payloads)
    figure = record(
        f"connection to Pub/Sub cut twice for {outage} s (refused, then silent)",
        tasks=tasks,
        lost=len(lost),
        duplicated=handled.duplicated(),
        recovery_seconds=round(max(recovered.values()), 1),
        refused_recovery=round(recovered["refuse"], 1),
        silent_recovery=round(recovered["blackhole"], 1),
    )
    assert not lost, f"lost {lost[:5]}\n{fleet.logs()}"
    # Only what was leased when a cut came can come back: a few batches per worker per cut.
    assert figure.duplicated <= 2 * WORKERS * CONCURRENCY * BATCH
    # A refused connection is an error the worker reports; a silent line looks like an empty
    # queue to a pull until the connection is reset.
    assert "event=lease_retry" in fleet.logs(tail=None), "the workers did not say why they waited"
