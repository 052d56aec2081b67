"""Start Google's emulators (Pub/Sub, Firestore) from the gcloud SDK on a free loopback port.

Tests use the real servers, never mocks; when one cannot start the session fails with the
emulator's own output rather than skipping.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass

from pullqueue.listen import free_port
from tests.support import stallwatch


@dataclass
class Emulator:
    """A running emulator process and the host:port it listens on."""

    kind: str
    host: str
    process: subprocess.Popen[bytes]
    log_path: str

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


_COMMANDS = {
    "pubsub": ["beta", "emulators", "pubsub", "start"],
    "firestore": ["emulators", "firestore", "start"],
    "datastore": ["emulators", "firestore", "start", "--database-mode=datastore-mode"],
}
_READY = {
    "pubsub": b"Server started",
    "firestore": b"Dev App Server is now running",
    "datastore": b"Dev App Server is now running",
}


def start_emulator(kind: str, project: str = "pullqueue-test", timeout: float = 90.0) -> Emulator:
    """Start the `kind` emulator and wait until it listens; RuntimeError with its log if not."""
    gcloud = shutil.which("gcloud")
    if gcloud is None:
        raise RuntimeError(
            "gcloud is not on PATH: the Google Cloud SDK with its emulators is needed"
        )
    port = free_port()
    host = f"127.0.0.1:{port}"
    fd, log_path = tempfile.mkstemp(prefix=f"{kind}-emulator-", suffix=".log")
    args = [gcloud, *_COMMANDS[kind], f"--host-port={host}", f"--project={project}", "--quiet"]
    with os.fdopen(fd, "wb") as log:
        process = subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    emulator = Emulator(kind, host, process, log_path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(log_path, "rb") as handle:
            output = handle.read()
        if _READY[kind] in output and _listening(port):
            return emulator
        if process.poll() is not None:
            break
        time.sleep(0.3)
    emulator.stop()
    with open(log_path, "rb") as handle:
        tail = handle.read()[-4000:].decode(errors="replace")
    raise RuntimeError(f"the {kind} emulator did not start on {host} ({' '.join(args)}):\n{tail}")


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


_ENV = {
    "pubsub": "PUBSUB_EMULATOR_HOST",
    "firestore": "FIRESTORE_EMULATOR_HOST",
    "datastore": "DATASTORE_EMULATOR_HOST",
}
_shared: dict[str, Emulator] = {}


def shared_emulator_host(kind: str) -> str:
    """host:port of the session's `kind` emulator: $<KIND>_EMULATOR_HOST, else one started now.

    The started emulator is shared by every test of the session and stopped at exit; the
    environment variable is set so the Google clients in this process connect to it.
    """
    env = _ENV[kind]
    if kind not in _shared and os.environ.get(env):
        return os.environ[env]
    if kind not in _shared:
        emulator = start_emulator(kind)
        _shared[kind] = emulator
        atexit.register(emulator.stop)
        os.environ[env] = emulator.host
        stallwatch.EMULATORS.append(emulator.process.pid)
        if kind == "pubsub":
            stallwatch.watch(emulator.host, emulator.process.pid)
    return _shared[kind].host
