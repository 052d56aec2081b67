"""The sweep handler an App Engine app mounts for cron.yaml or Cloud Scheduler; its Terraform."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import hcl2
import pytest
from google.appengine.ext import ndb, testbed

from pullqueue.compat import taskqueue as compat
from pullqueue.outbox.wsgi import sweep_app
from pullqueue.registry import default_backend, reset_default_backends
from tests.outbox.conftest import Order
from tests.outbox.test_compat import FailingAdds, staged_entities

MODULE = Path(__file__).resolve().parents[2] / "terraform" / "modules" / "outbox-sweeper"


def call(headers: dict[str, str]) -> tuple[str, bytes]:
    seen: list[str] = []

    def start_response(status: str, _headers: Any) -> None:
        seen.append(status)

    body = b"".join(sweep_app({"REQUEST_METHOD": "GET", **headers}, start_response))
    return seen[0], body


def test_cron_runs_a_sweep_and_outsiders_are_refused(
    bed: testbed.Testbed, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PULLQUEUE_URL", "memory://")
    monkeypatch.setenv("PULLQUEUE_SWEEP_GRACE_SECONDS", "0.001")
    reset_default_backends()
    try:
        failing = FailingAdds(default_backend())

        def place() -> None:
            compat.Queue("pulls", backend=failing).add(
                compat.Task(payload=b"late", method="PULL"), transactional=True
            )
            Order(number=1).put()

        ndb.transaction(place)
        assert call({})[0].startswith("403") and len(staged_entities()) == 1
        status, body = call({"HTTP_X_APPENGINE_CRON": "true"})
        assert status == "200 OK"
        assert json.loads(body)["published"] == 1
        assert [t.payload for t in compat.Queue("pulls").lease_tasks(60, 10)] == [b"late"]
        assert staged_entities() == []
    finally:
        reset_default_backends()


def test_the_scheduler_job_calls_the_handler_path_on_its_schedule() -> None:
    parsed = hcl2.loads((MODULE / "main.tf").read_text())
    variables = {
        name.strip('"'): body for block in parsed["variable"] for name, body in block.items()
    }
    assert variables["sweep_path"]["default"].strip('"') == "/_pullqueue/sweep"
    assert variables["schedule"]["default"].strip('"') == "*/5 * * * *"
    [job] = [block['"google_cloud_scheduler_job"'] for block in parsed["resource"]]
    target = job['"outbox_sweep"']["app_engine_http_target"][0]
    assert target["relative_uri"] == "${var.sweep_path}"
    assert target["http_method"].strip('"') == "GET"
