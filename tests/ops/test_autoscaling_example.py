"""examples/autoscaling reads the figures pullqueue documents: the metric names `stats` reads,
and the `stats --json` fields a script scales on, unknown kept apart from zero."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
from pathlib import Path

import yaml

from pullqueue.monitoring import (
    OLDEST_UNACKED_AGE,
    UNDELIVERED,
    Backlog,
    Subscription,
    SubscriptionBacklog,
)
from pullqueue.task import QueueStats

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "autoscaling"
stats_command = importlib.import_module("pullqueue.cli.stats")


class _Backend:
    url = "pubsub://my-project"


def scale(tmp_path: Path, backlog: Backlog, *args: str) -> subprocess.CompletedProcess[str]:
    """Run scale-on-stats.sh with a `pullqueue` on PATH that prints this backlog's stats --json."""
    stats = QueueStats(queue="counters", tasks=0, approximate=True, whole_queue=False)
    out = tmp_path / "stats.json"
    out.write_text(json.dumps(stats_command.stats_json(_Backend(), stats, backlog)))  # type: ignore[arg-type]
    stub = tmp_path / "pullqueue"
    stub.write_text(f"#!/bin/sh\ncat {out}\n")
    stub.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        [str(EXAMPLE / "scale-on-stats.sh"), "counters", "my-project", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


def backlog(undelivered: int | None, age: float | None, reason: str | None = None) -> Backlog:
    row = SubscriptionBacklog(
        Subscription("counters-workers", "workers"), undelivered, age, 0, 1000.0
    )
    return Backlog("my-project", "counters", 1060.0, 600, [row] if reason is None else [], reason)


def test_workers_follow_the_backlog(tmp_path: Path) -> None:
    assert scale(tmp_path, backlog(2500, 30)).stdout.strip() == "3"
    assert scale(tmp_path, backlog(0, None)).stdout.strip() == "0"
    assert scale(tmp_path, backlog(10, 400), "1000").stdout.strip() == "1"  # a few, but waiting
    assert scale(tmp_path, backlog(10**6, 30), "1000", "20").stdout.strip() == "20"


def test_an_unknown_backlog_is_not_zero(tmp_path: Path) -> None:
    done = scale(tmp_path, backlog(None, None, "no permission to read Cloud Monitoring"))
    assert done.returncode == 3 and done.stdout == ""
    assert "no permission" in done.stderr


def test_the_manifests_name_the_metrics_stats_reads() -> None:
    keda = list(yaml.safe_load_all((EXAMPLE / "keda-scaledobject.yaml").read_text()))
    scaled = next(doc for doc in keda if doc["kind"] == "ScaledObject")
    modes = {t["metadata"]["mode"] for t in scaled["spec"]["triggers"]}
    # KEDA's modes are the camel-cased Monitoring metric names.
    assert modes == {"SubscriptionSize", "OldestUnackedMessageAge"}
    assert OLDEST_UNACKED_AGE.endswith("oldest_unacked_message_age")
    (hpa,) = yaml.safe_load_all((EXAMPLE / "gke-hpa.yaml").read_text())
    (metric,) = hpa["spec"]["metrics"]
    assert metric["external"]["metric"]["name"] == UNDELIVERED.replace("/", "|")
