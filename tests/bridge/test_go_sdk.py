"""The Go SDK (google.golang.org/appengine 1.6.7, from the OS packages), unchanged, through the
bridge on memory://, on the Pub/Sub emulator and on the emulator behind the realistic layer.

The legacy documentation's Go samples run as written with `appengine.BackgroundContext()`, then
a Go worker drains 2,000 tasks over 50 tags with 4 goroutines (600 over 20 through the layer),
and the benchmark's pairs program leases and deletes. The programs are built offline in
GOPATH mode against /usr/share/gocode; without Go the tests fail, saying what to install.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.bridge.conftest import KINDS, make_backend
from tests.bridge.support import running_bridge

GO_SOURCES = Path(__file__).parent / "go"
GOPATH_PACKAGES = Path("/usr/share/gocode")
APPENGINE_PACKAGE = GOPATH_PACKAGES / "src/google.golang.org/appengine"
# What appengine.BackgroundContext() reads to build its security ticket outside App Engine.
GAE_ENV = {
    "GOOGLE_CLOUD_PROJECT": "my-app",
    "GAE_SERVICE": "default",
    "GAE_VERSION": "v1",
    "GAE_DEPLOYMENT_ID": "1",
    "GAE_INSTANCE": "instance-1",
}
GO_TICKET = "my-app/default.v1.instance-1"


@pytest.fixture(scope="module")
def go_programs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The Go programs under tests/bridge/go, built (fails, not skips, without Go)."""
    go = shutil.which("go")
    if go is None or not APPENGINE_PACKAGE.is_dir():
        pytest.fail(
            "the Go SDK tests need Go and google.golang.org/appengine from the OS packages:"
            " apt-get install -y golang-go golang-google-appengine-dev"
        )
    root = tmp_path_factory.mktemp("go")
    env = {
        **os.environ,
        "GO111MODULE": "off",
        "GOPATH": f"{root / 'gopath'}:{GOPATH_PACKAGES}",
        "GOCACHE": str(root / "cache"),
        "GOFLAGS": "",
    }
    built = {}
    for program in ("samples", "drain", "pairs"):
        binary = root / program
        subprocess.run(
            [go, "build", "-o", str(binary), "."],
            cwd=GO_SOURCES / program,
            env=env,
            check=True,
            timeout=300,
        )
        built[program] = binary
    return built


def _run(binary: Path, port: int, *args: str) -> dict[str, Any]:
    env = {**os.environ, **GAE_ENV, "API_HOST": "127.0.0.1", "API_PORT": str(port)}
    done = subprocess.run(
        [str(binary), *args], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture(params=KINDS)
def bridge_port(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("PULLQUEUE_DEDUPE_URL", "memory://")
    backend = make_backend(request.param)
    try:
        with running_bridge(backend, ticket=GO_TICKET) as server:
            yield server.port, backend, request.param
    finally:
        backend.close()


def test_the_legacy_docs_go_samples(go_programs: dict[str, Path], bridge_port: Any) -> None:
    port, _, _ = bridge_port
    seen = _run(go_programs["samples"], port)
    assert seen["add"] == seen["add_named"] == "ok"
    assert seen["add_named_again"] == "ErrTaskAlreadyAdded"
    assert "INVALID_QUEUE_MODE" in seen["add_push_task"]
    assert seen["lease_by_tag_tasks"] == [
        {
            "name": seen["lease_by_tag_tasks"][0]["name"],
            "payload": "hello world",
            "tag": "render",
            "retry_count": 1,
        }
    ]
    oldest = seen["lease_oldest_tag_tasks"]
    assert sorted(t["payload"] for t in oldest) == ["other 0", "other 1", "other 2"]
    assert {t["tag"] for t in oldest} == {"other"}
    assert [(t["name"], t["payload"], t["tag"]) for t in seen["lease_tasks"]] == [
        ("job-1", "untagged", "")
    ]
    assert seen["modify_lease"] == "ok"
    assert 3500 < seen["modify_lease_moved_seconds"] < 3600
    assert "TASK_LEASE_EXPIRED" in seen["modify_stale_lease"]
    assert seen["delete_multi"] == "ok"
    # Deleted before, on backends that keep names (memory, Pub/Sub with a registry): as the service.
    assert "TOMBSTONED_TASK" in seen["delete_again"]
    assert seen["queue_stats"] == "ok"


def test_a_go_worker_drains_2000_tasks_over_50_tags_with_4_goroutines(
    go_programs: dict[str, Path], bridge_port: Any
) -> None:
    port, backend, kind = bridge_port
    # Through the layer (10 ms round trips, held empty pulls) a smaller queue of the same shape
    # keeps the run short: the check is that nothing is lost, doubled or mixed.
    tasks, tags = (600, 20) if kind == "layer" else (2000, 50)
    seen = _run(
        go_programs["drain"], port, "-tasks", str(tasks), "-tags", str(tags), "-workers", "4"
    )
    assert seen["failures"] is None
    assert seen["distinct"] == tasks
    assert seen["twice"] == 0
    assert seen["mixed"] == 0
    assert backend.lease("drain", 60, 1000) == []


def test_a_go_app_with_another_ticket_is_refused(go_programs: dict[str, Path]) -> None:
    from pullqueue.adapters.memory import MemoryBackend

    backend = MemoryBackend()
    with running_bridge(backend, ticket="not-the-apps-ticket") as server:
        seen = _run(go_programs["samples"], server.port)
    assert "PERMISSION_DENIED" in seen["add"]
    assert backend.stats("pull-queue").tasks == 0


def test_the_go_pairs_program_of_the_benchmark_leases_and_deletes(
    go_programs: dict[str, Path],
) -> None:
    """benchmarks/bridge_service.py times the Go client with tests/bridge/go/pairs."""
    from pullqueue import Queue, Task
    from pullqueue.adapters.memory import MemoryBackend

    backend = MemoryBackend()
    Queue("pairs", backend).add([Task(b"x", tag=f"tag-{i % 5}") for i in range(50)])
    with running_bridge(backend, ticket=GO_TICKET) as server:
        plain = _run(go_programs["pairs"], server.port, "-n", "2", "-max", "10")
        named = _run(
            go_programs["pairs"], server.port, "-mode", "tag", "-tags", "tag-1,tag-2", "-n", "2"
        )
        oldest = _run(go_programs["pairs"], server.port, "-mode", "oldest", "-n", "5")
    assert plain["leased"] == 20 and named["leased"] > 0
    assert plain["leased"] + named["leased"] + oldest["leased"] == 50
    assert len(plain["lease_ms"]) == len(plain["delete_ms"]) == 2
    assert backend.stats("pairs").tasks == 0  # every batch deleted
