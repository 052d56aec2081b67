"""A watch on the test host and the session's Pub/Sub emulator, printed with a failing test.

CI has seen calls to the emulator go unanswered for 10 s while the same tests pass here: a failing
test's report says whether the host froze, the emulator answered a probe late, and which other
processes were using the emulator, so such a failure can be told from a defect.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from dataclasses import dataclass

import grpc
import psutil
from google.api_core import exceptions as gexc
from google.pubsub_v1 import PublisherClient
from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport

PERIOD = 1.0
"""Seconds between two probes of the emulator (and two looks at the host)."""
NOTABLE = 1.0
"""A probe answered after this many seconds, or a sleep overshooting it, is recorded."""
PROBE_TIMEOUT = 60.0
"""Seconds a probe waits for the emulator's answer."""
KEPT = 2000
"""Events kept (the oldest go first)."""
PROBED = "projects/stall-watch/topics/none"
"""The topic a probe asks for (none such: the emulator answers NOT_FOUND)."""


@dataclass(frozen=True)
class Event:
    """Something notable the watch saw: `at` (wall clock) it began and lasted `seconds`."""

    at: float
    seconds: float
    what: str

    def line(self) -> str:
        stamp = time.strftime("%H:%M:%S", time.gmtime(self.at))
        return f"{stamp} UTC +{self.seconds:.1f} s: {self.what}"


class StallWatch:
    """A daemon thread probing the emulator at `host` with a call of its own connection, and
    timing its own sleeps (a host that froze overshoots them)."""

    def __init__(self, host: str, emulator_pid: int | None) -> None:
        self.host = host
        self._emulator = psutil.Process(emulator_pid) if emulator_pid else None
        self._events: deque[Event] = deque(maxlen=KEPT)
        self._probing: float | None = None
        self._lock = threading.Lock()
        # A connection of its own (not shared with the tests' clients through gRPC's global
        # subchannel pool): a stall of the tests' connection alone shows as the tests' failure,
        # not here.
        channel = grpc.insecure_channel(host, options=[("grpc.use_local_subchannel_pool", 1)])
        self._client = PublisherClient(transport=PublisherGrpcTransport(channel=channel))
        threading.Thread(target=self._run, name="stall-watch", daemon=True).start()

    def _probe(self, timeout: float) -> str:
        """One call to the emulator (a topic that does not exist): "answered", or what failed."""
        try:
            self._client.get_topic(topic=PROBED, timeout=timeout, retry=None)
        except gexc.NotFound:
            pass
        except Exception as exc:  # any failure is what the watch reports
            return f"failed ({type(exc).__name__}: {str(exc)[:120]})"
        return "answered"

    def _run(self) -> None:
        while True:
            began, wall = time.monotonic(), time.time()
            cpu = self._emulator_cpu()
            with self._lock:
                self._probing = wall
            outcome = self._probe(PROBE_TIMEOUT)
            took = time.monotonic() - began
            with self._lock:
                self._probing = None
            if took >= NOTABLE or outcome != "answered":
                used = self._emulator_cpu()
                busy = (
                    f", the emulator used {used - cpu:.1f} s of CPU meanwhile"
                    if used is not None and cpu is not None
                    else ""
                )
                self._add(Event(wall, took, f"an emulator probe {outcome}{busy}"))
            rest = max(PERIOD - took, 0.05)
            slept_from, wall = time.monotonic(), time.time()
            time.sleep(rest)
            over = time.monotonic() - slept_from - rest
            if over >= NOTABLE:
                self._add(Event(wall, over, f"a sleep of {rest:.2f} s overshot (the host froze)"))

    def _emulator_cpu(self) -> float | None:
        if self._emulator is None:
            return None
        try:
            total = 0.0
            for process in [self._emulator, *self._emulator.children(recursive=True)]:
                times = process.cpu_times()
                total += times.user + times.system
            return total
        except psutil.Error:
            return None

    def _add(self, event: Event) -> None:
        with self._lock:
            self._events.append(event)

    def responsive(self, timeout: float) -> float:
        """Seconds spent waiting (at most `timeout`) until a probe is answered within NOTABLE
        seconds: a test run again after a failure starts on an emulator that answers."""
        began = time.monotonic()
        while time.monotonic() - began < timeout:
            sent = time.monotonic()
            if self._probe(NOTABLE) != "answered":  # unanswered in time, or refused
                time.sleep(0.2)
                continue
            if time.monotonic() - sent < NOTABLE:
                break
        return time.monotonic() - began

    def between(self, start: float, stop: float) -> list[str]:
        """Lines for the events that overlapped [start, stop] (wall clock), and a probe still
        unanswered."""
        with self._lock:
            events = list(self._events)
            probing = self._probing
        lines = [e.line() for e in events if e.at <= stop and e.at + e.seconds >= start]
        if probing is not None and time.time() - probing >= NOTABLE:
            lines.append(f"a probe unanswered for {time.time() - probing:.1f} s so far")
        return lines

    def worst(self) -> list[str]:
        """The five longest events of the session."""
        with self._lock:
            events = sorted(self._events, key=lambda e: -e.seconds)[:5]
        return [e.line() for e in events]


WATCHES: list[StallWatch] = []
"""The watches of this process (one per emulator it started)."""
EMULATORS: list[int] = []
"""Processes of the emulators this process started (theirs are not listed as users)."""


def watch(host: str, emulator_pid: int | None) -> None:
    """Start watching the emulator at `host` (its process, when this process started it)."""
    WATCHES.append(StallWatch(host, emulator_pid))


def describe(start: float, stop: float) -> str:
    """What the watches saw between start and stop, the load, and the processes using each
    watched emulator (this process's children or not: one left running by an earlier test, its
    parent gone, still pulls)."""
    lines: list[str] = []
    for w in WATCHES:
        seen = w.between(start, stop)
        lines.append(f"emulator {w.host}: " + ("nothing notable" if not seen else ""))
        lines += [f"  {line}" for line in seen]
        users = _users(w.host)
        lines.append(f"  other processes using it ({len(users)}):")
        lines += [f"    {user}" for user in users]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    lines.append(f"load average: {load}")
    return "\n".join(lines)


def _users(host: str) -> list[str]:
    """The processes but this one whose PUBSUB_EMULATOR_HOST is `host`: pid, age, command."""
    skipped = {os.getpid()}
    for pid in EMULATORS:
        try:
            root = psutil.Process(pid)
            skipped |= {root.pid, *(c.pid for c in root.children(recursive=True))}
        except psutil.Error:
            continue
    now, found = time.time(), []
    for process in psutil.process_iter(["pid", "create_time"]):
        try:
            if process.pid in skipped or process.environ().get("PUBSUB_EMULATOR_HOST") != host:
                continue
            age = now - process.info["create_time"]
            command = " ".join(process.cmdline())[:160]
            found.append(f"{process.pid} ({age:.0f} s old) {command}")
        except psutil.Error:
            continue
    return found


RESPONSIVE_WAIT = 120.0
"""Seconds a test run again waits at most for its emulators to answer promptly."""


def await_responsive() -> float:
    """Wait until every watched emulator answers a probe within NOTABLE seconds (at most
    RESPONSIVE_WAIT each): the seconds waited."""
    return sum(w.responsive(RESPONSIVE_WAIT) for w in WATCHES)
