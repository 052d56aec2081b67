"""A fleet of real `pullqueue work` processes on the Pub/Sub emulator, and what they handled.

Scenarios start workers, break something (a SIGKILL, a cut connection, a failing handler), and
then read the handlers' log (tests/faults/handlers.py) to count tasks lost and handled twice.
Sizes are parameters: PULLQUEUE_FAULTS_TASKS (default small enough for CI), PULLQUEUE_FAULTS_SEED.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from pullqueue import Queue, Task
from pullqueue.adapters.pubsub import PubSubBackend
from pullqueue.config import Settings

PULLQUEUE = str(Path(sys.executable).with_name("pullqueue"))
ROOT = Path(__file__).resolve().parents[2]
LEASE_SECONDS = 10
"""The workers' lease: a task a killed worker had leased comes back after this long..."""
ACK_DEADLINE = int(os.environ.get("PULLQUEUE_FAULTS_ACK_DEADLINE") or 10)
"""... or after the subscription's ack deadline, when the worker died with a pull in flight."""

SEED = int(os.environ.get("PULLQUEUE_FAULTS_SEED") or time.time_ns() % 1_000_000)


def size(variable: str, default: int) -> int:
    """A scenario size from the environment (full-size runs for the docs), else the CI default."""
    return int(os.environ.get(variable) or default)


def new_project() -> str:
    return f"pq-faults-{uuid.uuid4().hex[:10]}"


def fill(project: str, queue: str, count: int) -> list[str]:
    """Add `count` tasks with payloads t0..t<count-1> (auto-creating the queue); the payloads."""
    settings = Settings(pubsub_ack_deadline=ACK_DEADLINE)
    backend = PubSubBackend(project, settings=settings, auto_create=True)
    try:
        target = Queue(queue, backend)
        payloads = [f"t{i}" for i in range(count)]
        for start in range(0, count, 100):
            target.add([Task(p) for p in payloads[start : start + 100]])
        return payloads
    finally:
        backend.close()


@dataclass
class Handled:
    """The handlers' log: when each payload was handled, and the failed attempts."""

    done: list[tuple[float, str]]
    failed: list[tuple[float, str]]

    @property
    def counts(self) -> Counter[str]:
        return Counter(payload for _, payload in self.done)

    def lost(self, payloads: list[str]) -> list[str]:
        counts = self.counts
        return [p for p in payloads if counts[p] == 0]

    def duplicated(self) -> int:
        return sum(n - 1 for n in self.counts.values() if n > 1)


def read_log(path: Path) -> Handled:
    done: list[tuple[float, str]] = []
    failed: list[tuple[float, str]] = []
    if path.exists():
        for line in path.read_text().splitlines():
            stamp, kind, payload = line.split(" ", 2)
            (done if kind == "done" else failed).append((float(stamp), payload))
    return Handled(done, failed)


@dataclass
class Fleet:
    """`pullqueue work` processes on one queue, each with its own stderr log file."""

    project: str
    queue: str
    directory: Path
    emulator: str
    handler: str = "tests.faults.handlers:record"
    options: tuple[str, ...] = ()
    environment: dict[str, str] = field(default_factory=dict)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    started: int = 0
    log_files: dict[int, Path] = field(default_factory=dict)
    """Process id -> its stderr log."""

    @property
    def log(self) -> Path:
        return self.directory / "handled.log"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PULLQUEUE_")}
        env.update(
            PUBSUB_EMULATOR_HOST=self.emulator,
            PULLQUEUE_AUTO_CREATE="1",
            FAULTS_LOG=str(self.log),
            PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p),
        )
        env.update(self.environment)
        return env

    def start(self, count: int = 1) -> None:
        for _ in range(count):
            self.started += 1
            log_file = self.directory / f"worker-{self.started}.log"
            stderr = open(log_file, "wb")  # noqa: SIM115
            command = [PULLQUEUE, "work", self.queue, self.handler]
            command += ["--url", f"pubsub://{self.project}", "--lease-seconds", str(LEASE_SECONDS)]
            process = subprocess.Popen(
                [*command, *self.options],
                cwd=ROOT,
                env=self.env(),
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
            stderr.close()
            self.processes.append(process)
            self.log_files[process.pid] = log_file

    def alive(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.processes if p.poll() is None]

    def kill_one(self, rng: random.Random) -> bool:
        """SIGKILL a random worker that has leased tasks (at work, not starting up): it has no
        chance to give its leases back. False when no worker has leased anything yet."""
        working = [p for p in self.alive() if b"event=leased" in self.log_files[p.pid].read_bytes()]
        if not working:
            return False
        victim = rng.choice(working)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)
        return True

    def stop(self) -> None:
        """SIGTERM every live worker and wait for each to finish its tasks and exit."""
        for process in self.alive():
            process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def logs(self, tail: int | None = 3000) -> str:
        """The workers' logs (the last `tail` characters of each; all with tail=None)."""
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-(tail or 0) :]}"
            for path in sorted(self.directory.glob("worker-*.log"))
        )

    def handled(self) -> Handled:
        return read_log(self.log)

    def wait_for(self, payloads: list[str], timeout: float, quiet: float | None = None) -> Handled:
        """Wait until every payload was handled, then until nothing more comes for `quiet` s.

        The quiet time (by default a lease or an ack deadline, whichever is longer) catches
        redeliveries (duplicates) of tasks whose holder died or whose delete failed; without it
        they would be handed out after the count was taken.
        """
        quiet = max(LEASE_SECONDS, ACK_DEADLINE) + 2 if quiet is None else quiet
        end = time.monotonic() + timeout
        wanted = set(payloads)
        while True:
            handled = read_log(self.log)
            if wanted <= set(handled.counts):
                break
            assert time.monotonic() < end, (
                f"{len(handled.lost(payloads))} of {len(payloads)} tasks still not handled"
                f" after {timeout} s (seed {SEED})\n{self.logs()}"
            )
            time.sleep(0.2)
        quiet_until = time.monotonic() + quiet
        seen = len(handled.done)
        while time.monotonic() < min(quiet_until, end):
            time.sleep(0.5)
            handled = read_log(self.log)
            if len(handled.done) != seen:
                seen = len(handled.done)
                quiet_until = time.monotonic() + quiet
        return handled
