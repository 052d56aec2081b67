"""Python 2.7 workers through the bridge: calls per second of the 1.9.88 SDK's remote_api_stub
to a `pullqueue bridge` process, against the same SDK on its own taskqueue stub in-process.

Both runs are tests/bridge/py27/worker.py's `bench` scenario (add(1) + lease(1) + delete, then
add(100) + lease(100) + delete), on the Python 2.7 virtualenv of tests/bridge/python27.py:

    python benchmarks/bridge_py27.py --runs 3 --seconds 3 --threads 1 4
    python benchmarks/bridge_py27.py --url emulator --runs 3 --seconds 5 --threads 1 4

`--url emulator` serves a new project on the Pub/Sub emulator (PUBSUB_EMULATOR_HOST, else one
started from the gcloud SDK), with a name registry in the bridge's process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pullqueue.listen import free_port  # noqa: E402
from tests.bridge.python27 import interpreter  # noqa: E402

PULLQUEUE = [sys.executable, "-c", "from pullqueue.cli import main; main()"]
WORKER = ROOT / "tests" / "bridge" / "py27" / "worker.py"


def run(python27: str, side: str, seconds: float, threads: int, port: int) -> dict[str, float]:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", ""),
        "BENCH_SECONDS": str(seconds),
        "BENCH_THREADS": str(threads),
        "API_HOST": "127.0.0.1",
        "API_PORT": str(port),
    }
    done = subprocess.run(
        [python27, str(WORKER), side, "bench"], capture_output=True, text=True, env=env, check=True
    )
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    result: dict[str, float] = lines[-1]["result"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--url", default="memory://", help="the bridge's backend")
    options = parser.parse_args()
    python27 = str(interpreter())
    port = free_port()
    url, env = options.url, dict(os.environ)
    if url == "emulator":
        from tests.support.emulators import shared_emulator_host

        env["PUBSUB_EMULATOR_HOST"] = shared_emulator_host("pubsub")
        env.update(PULLQUEUE_AUTO_CREATE="1", PULLQUEUE_DEDUPE_URL="memory://")
        url = f"pubsub://bench27-{os.getpid()}"
    bridge = subprocess.Popen(
        [*PULLQUEUE, "bridge", "--url", url, "--listen", f"127.0.0.1:{port}"],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert bridge.stderr is not None
        line = bridge.stderr.readline()
        assert "serving taskqueue" in line, line
        via = f"via bridge ({options.url})"
        print(f"| threads | calls | SDK stub in-process calls/s | {via} | ratio |")
        print("| ---: | --- | ---: | ---: | ---: |")
        for threads in options.threads:
            stub: dict[str, list[float]] = {"single": [], "batch": []}
            bridged: dict[str, list[float]] = {"single": [], "batch": []}
            for _ in range(options.runs):
                for kind, value in run(python27, "stub", options.seconds, threads, port).items():
                    stub[kind].append(value)
                for kind, value in run(python27, "bridge", options.seconds, threads, port).items():
                    bridged[kind].append(value)
            for kind, label in (
                ("single", "add(1)+lease(1)+delete"),
                ("batch", "add(100)+lease(100)+delete"),
            ):
                a, b = statistics.median(stub[kind]), statistics.median(bridged[kind])
                print(f"| {threads} | {label} | {a:,.0f} | {b:,.0f} | {b / a:.2f} |")
    finally:
        bridge.terminate()
        bridge.wait(60)


if __name__ == "__main__":
    main()
