"""The Go SDK's transactional adds through the bridge (google.golang.org/appengine, unchanged).

datastore.RunInTransaction with taskqueue.Add (one task: the Add call) and AddMulti (BulkAdd)
inside; the bridge's upstream is the SDK's own datastore stub over /rpc_http. Committed tasks are
delivered, a rolled-back one never, a sixth task in a transaction fails the add.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pullqueue.adapters.memory import MemoryBackend
from pullqueue.outbox.layout import KIND
from tests.bridge.support import running_bridge
from tests.bridge.test_go_sdk import APPENGINE_PACKAGE, GAE_ENV, GO_SOURCES, GOPATH_PACKAGES
from tests.support.datastore_server import DatastoreServer, ids_of

GO_APP = "s~my-app"
"""The app id the Go app names in its keys and transactions (GAE_APPLICATION: partition too)."""


@pytest.fixture(scope="module")
def txn_program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    go = shutil.which("go")
    if go is None or not APPENGINE_PACKAGE.is_dir():
        pytest.fail(
            "the Go SDK tests need Go and google.golang.org/appengine from the OS packages:"
            " apt-get install -y golang-go golang-google-appengine-dev"
        )
    root = tmp_path_factory.mktemp("go-txn")
    env = {
        **os.environ,
        "GO111MODULE": "off",
        "GOPATH": f"{root / 'gopath'}:{GOPATH_PACKAGES}",
        "GOCACHE": str(root / "cache"),
        "GOFLAGS": "",
    }
    binary = root / "txn"
    subprocess.run(
        [go, "build", "-o", str(binary), "."],
        cwd=GO_SOURCES / "txn",
        env=env,
        check=True,
        timeout=300,
    )
    return binary


@pytest.fixture
def upstream() -> Iterator[DatastoreServer]:
    server = DatastoreServer(app_id=GO_APP).start()
    try:
        yield server
    finally:
        server.stop()


def test_go_transactions_commit_their_tasks_and_roll_them_back(
    txn_program: Path, upstream: DatastoreServer
) -> None:
    backend = MemoryBackend()
    with running_bridge(backend, upstream=upstream.host) as bridge:
        env = {
            **os.environ,
            **GAE_ENV,
            "GAE_APPLICATION": GO_APP,
            "API_HOST": "127.0.0.1",
            "API_PORT": str(bridge.port),
        }
        done = subprocess.run(
            [str(txn_program)], env=env, capture_output=True, text=True, timeout=300, check=False
        )
    assert done.returncode == 0, done.stderr
    seen: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert (seen["add"], seen["add_multi"], seen["rolled_back"]) == ("<nil>", "<nil>", "roll back")
    assert seen["six"].startswith("API error 10001 ") and "maximum allowed 5" in seen["six"]
    assert len(seen["names"]) == 3 and all(name.startswith("tx-") for name in seen["names"])
    leased = backend.lease("pulls", 60, 100)
    assert sorted((t.payload, t.tag) for t in leased) == [
        (b"go-1", None),
        (b"go-2a", "t"),
        (b"go-2b", None),
    ]
    assert sorted(t.name for t in leased) == sorted(seen["names"])
    assert ids_of(upstream, "Order", GO_APP) == {1, 2}
    assert ids_of(upstream, KIND, GO_APP) == set()
