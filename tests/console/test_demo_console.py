"""`pullqueue demo --console`: the web console serves the demo's destination while it runs and
after, so a new user sees the queue, the workers' completions and the backlog plot."""

from __future__ import annotations

import re
import signal
import subprocess
import time

import httpx2

from tests.cli.support import PULLQUEUE, clean_env, interruptible, run


def test_demo_serves_the_console_until_ctrl_c() -> None:
    proc = subprocess.Popen(
        [PULLQUEUE, "demo", "--tasks", "600", "--console", "--console-listen", "127.0.0.1:0"],
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    )
    assert proc.stderr is not None and proc.stdout is not None
    try:
        address = None
        line = proc.stderr.readline()
        while "Ctrl-C to end the demo" not in line:
            assert line, "the demo ended without lingering"
            found = re.search(r"console: open (http://127\.0\.0\.1:\d+/)", line)
            address = address or (found.group(1) if found else None)
            line = proc.stderr.readline()
        assert address is not None and address in line
        deadline = time.monotonic() + 10
        while True:  # the console reads once a second: the figures after the last reading
            figures = httpx2.get(address + "api/queues").json()
            demo = {q["queue"]: q for q in figures["queues"]}["pullqueue-demo"]
            if demo["backlog"]["value"] == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert demo["backlog"]["value"] == 0
        assert demo["completions_per_minute"]["value"] == 600  # every task, by the workers
        assert "pullqueue-demo" in httpx2.get(address).text
        history = httpx2.get(address + "api/backlog").json()["pullqueue-demo"]
        assert len(history[0]) >= 1
    finally:
        proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 15
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
    assert proc.returncode == 0
    assert "reconciled" in proc.stdout.read()


def test_demo_console_refuses_a_non_loopback_address() -> None:
    result = run("demo", "--console", "--console-listen", "0.0.0.0:8080")
    assert result.returncode == 2 and "loopback" in result.stderr


def test_demo_console_names_its_own_option_on_a_bad_address() -> None:
    result = run("demo", "--console", "--console-listen", "BAD")
    assert result.returncode == 2
    assert "'--console-listen'" in result.stderr and "'BAD' is not HOST:PORT" in result.stderr
    assert "Traceback" not in result.stderr
