"""The Terraform module's alerts watch exactly the series `pullqueue stats` reads, and its
alert variables refuse what Cloud Monitoring would refuse; everything here runs offline."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from pullqueue.adapters.pubsub.layout import QueueLayout
from pullqueue.monitoring import (
    OLDEST_UNACKED_AGE,
    UNDELIVERED,
    layout_subscriptions,
    series_filter,
)
from tests.test_terraform_layout import (
    MODULE,
    SAMPLES,
    SERVICE_ACCOUNTS,
    module_resources,
    terraform,
    unquote,
)

OUTPUTS = 'output "monitoring_filters" { value = local.monitoring_filters }\n'


def apply(workdir: Path, variables: dict[str, Any]) -> Any:
    workdir.mkdir(parents=True, exist_ok=True)
    for name in ("variables.tf", "layout.tf"):
        shutil.copy(MODULE / name, workdir / name)
    (workdir / "outputs.tf").write_text(OUTPUTS)
    (workdir / "test.auto.tfvars.json").write_text(json.dumps({**SERVICE_ACCOUNTS, **variables}))
    init = terraform(workdir, "init", "-input=false")
    assert init.returncode == 0, init.stdout + init.stderr
    return terraform(workdir, "apply", "-auto-approve", "-input=false")


def test_alert_filters_are_the_filters_stats_reads(tmp_path: Path) -> None:
    variables = SAMPLES["prefix for names Pub/Sub refuses alone"]
    applied = apply(tmp_path, {**variables, "alerts": {}})
    assert applied.returncode == 0, applied.stdout + applied.stderr
    shown = terraform(tmp_path, "output", "-json")
    filters = json.loads(shown.stdout)["monitoring_filters"]["value"]
    assert set(filters) == set(variables["queues"])
    for name, queue in variables["queues"].items():
        layout = QueueLayout(
            variables["project_id"],
            name,
            variables["prefix"],
            tuple(queue.get("declared_tags", ())),
        )
        subs = layout_subscriptions(layout)
        working = [s.subscription_id for s in subs if s.role != "dead-letter"]
        dead = [s.subscription_id for s in subs if s.role == "dead-letter"]
        assert filters[name]["oldest_unacked_age"] == series_filter(OLDEST_UNACKED_AGE, working)
        assert filters[name]["dead_letters"] == series_filter(UNDELIVERED, dead)


@pytest.mark.parametrize(
    ("alerts", "message"),
    [
        ({"oldest_unacked_age_seconds": 30}, "at least 60"),
        ({"oldest_unacked_age_seconds": 90.5}, "whole seconds"),
        ({"dead_letters": -1}, "0 or more"),
        ({"duration": "5m"}, "whole minutes"),
        ({"duration": "90s"}, "whole minutes"),
        ({"notification_channels": ["email:me@example.com"]}, "notificationChannels"),
    ],
)
def test_bad_alert_settings_are_refused(
    alerts: dict[str, Any], message: str, tmp_path: Path
) -> None:
    variables = {"project_id": "my-project", "queues": {"jobs": {}}, "alerts": alerts}
    applied = apply(tmp_path, variables)
    assert applied.returncode != 0
    assert message in " ".join((applied.stdout + applied.stderr).split())


def test_alert_policies_watch_the_layout_and_are_off_by_default() -> None:
    found = module_resources()
    for name in ("oldest_unacked_age", "dead_letters"):
        policy = found["google_monitoring_alert_policy", name]
        assert unquote(policy["for_each"]) == "var.alerts == null ? {} : local.monitoring_filters"
        (condition,) = policy["conditions"]
        (threshold,) = condition["condition_threshold"]
        assert unquote(threshold["filter"]) == f"each.value.{name}"
        assert unquote(threshold["comparison"]) == "COMPARISON_GT"
        assert unquote(threshold["duration"]) == "var.alerts.duration"
        assert "pullqueue" in unquote(policy["documentation"][0]["content"])
    age = found["google_monitoring_alert_policy", "oldest_unacked_age"]
    threshold = age["conditions"][0]["condition_threshold"][0]
    assert unquote(threshold["threshold_value"]) == "var.alerts.oldest_unacked_age_seconds"
    dead = found["google_monitoring_alert_policy", "dead_letters"]
    threshold = dead["conditions"][0]["condition_threshold"][0]
    assert unquote(threshold["threshold_value"]) == "var.alerts.dead_letters"


def test_the_module_is_formatted(tmp_path: Path) -> None:
    checked = terraform(MODULE, "fmt", "-check", "-diff")
    assert checked.returncode == 0, checked.stdout + checked.stderr
