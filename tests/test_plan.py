"""`pullqueue plan`: legacy queue.yaml files in, the Terraform module's variables out.

Runs the click command (CliRunner) on real-world shaped queue.yaml files in tests/data/queue_yaml
and checks what a user reads: the JSON on stdout, the notes and errors on stderr, the exit code.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import hcl2
import pytest
from click.testing import CliRunner, Result

from pullqueue.cli import cli
from pullqueue.plan import QueueYamlError, build_plan, read_queue_yaml

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "queue_yaml"
MODULE = ROOT / "terraform" / "modules" / "pullqueue"


def run_plan(*args: str, env: dict[str, str | None] | None = None) -> Result:
    environment: dict[str, str | None] = {"PULLQUEUE_PUBSUB_PREFIX": None}
    environment.update(env or {})
    return CliRunner().invoke(cli, ["plan", *args], env=environment)


def plan_json(result: Result) -> dict[str, Any]:
    assert result.exit_code == 0, result.output + result.stderr
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


def stderr_text(result: Result) -> str:
    """stderr with line wrapping undone, for substring checks."""
    return " ".join(result.stderr.split())


def module_variables() -> dict[str, Any]:
    """{name: body} of the variables terraform/modules/pullqueue declares (python-hcl2)."""
    declared: dict[str, Any] = {}
    for path in sorted(MODULE.glob("*.tf")):
        for block in hcl2.loads(path.read_text()).get("variable", []):
            declared.update(
                (name.strip('"'), body) for name, body in block.items() if name != "__is_block__"
            )
    return declared


def queue_attributes() -> set[str]:
    """The attributes of the queues variable's object type."""
    type_expression = module_variables()["queues"]["type"]
    return set(re.findall(r"(\w+) = optional\(", type_expression))


def test_mixed_queue_yaml_plans_only_the_pull_queues() -> None:
    result = run_plan(str(DATA / "mixed.yaml"), "--project", "my-project")
    variables = plan_json(result)

    assert variables["project_id"] == "my-project"
    assert variables["prefix"] == ""
    assert list(variables["queues"]) == ["report-jobs", "thumbnails", "audit-log", "reindex"]
    assert {name: q["max_delivery_attempts"] for name, q in variables["queues"].items()} == {
        "report-jobs": 12,
        "thumbnails": 5,
        "audit-log": 100,
        "reindex": 100,
    }
    assert all(q["declared_tags"] == [] for q in variables["queues"].values())
    assert "not handled: push queues default, mail-out, webhooks" in stderr_text(result)


def test_plan_says_what_to_set_for_task_names() -> None:
    result = run_plan(str(DATA / "mixed.yaml"), "--project", "my-project")
    plan_json(result)  # stdout stays the JSON alone
    stderr = stderr_text(result)
    assert "PULLQUEUE_DEDUPE_URL=firestore://my-project" in stderr
    assert "PULLQUEUE_ACCEPT_DUPLICATE_NAMES=1" in stderr


def test_every_printed_key_is_a_variable_the_module_declares() -> None:
    result = run_plan(
        str(DATA / "mixed.yaml"), "--project", "my-project", "--tag", "report-jobs=daily"
    )
    variables = plan_json(result)

    assert set(variables) <= set(module_variables())
    for queue in variables["queues"].values():
        assert set(queue) <= queue_attributes()


def test_retry_limits_outside_pubsubs_range_are_clamped_with_a_warning() -> None:
    result = run_plan(str(DATA / "mixed.yaml"), "--project", "my-project")
    stderr = stderr_text(result)

    assert re.search(
        r"queue 'thumbnails' \(line 32\): task_retry_limit 3 is below Pub/Sub's minimum of 5"
        r" delivery attempts; using 5",
        stderr,
    )
    assert re.search(
        r"queue 'reindex' \(line 41\): task_retry_limit 500 is above Pub/Sub's maximum of 100"
        r" delivery attempts; using 100",
        stderr,
    )
    assert "queue 'report-jobs' (line 24): task_retry_limit" not in stderr


def test_fields_that_do_not_carry_over_are_named() -> None:
    result = run_plan(str(DATA / "mixed.yaml"), "--project", "my-project")
    stderr = stderr_text(result)

    assert "queue 'thumbnails' (line 32): task_age_limit 6h has no Pub/Sub equivalent" in stderr
    assert "queue 'report-jobs' (line 24): acl is not carried over" in stderr
    assert "total_storage_limit 1.2G is not carried over" in stderr
    assert "queue 'audit-log' (line 38): no task_retry_limit" in stderr


def test_push_only_fields_on_a_pull_queue_are_ignored_with_a_warning() -> None:
    result = run_plan(str(DATA / "pull_fields_push_only.yaml"), "--project", "my-project")
    variables = plan_json(result)
    stderr = stderr_text(result)

    assert variables["queues"] == {
        "exports": {
            "declared_tags": [],
            "max_delivery_attempts": 20,
            "labels": {"pullqueue-min-backoff-ms": "5000", "pullqueue-max-doublings": "3"},
        }
    }
    for field in ("rate", "bucket_size", "target"):
        assert f"queue 'exports' (line 3): {field} applies to push queues only" in stderr
    assert "backoff" not in stderr and "doublings" not in stderr


def test_push_and_target_fields_of_push_queues_never_reach_the_output() -> None:
    result = run_plan(str(DATA / "push_only.yaml"), "--project", "my-project")
    variables = plan_json(result)

    assert variables == {"project_id": "my-project", "prefix": "", "queues": {}}
    assert "not handled: push queues default, emails" in stderr_text(result)
    assert "declares no pull queue" in stderr_text(result)


def test_declared_tags_are_sorted_and_deduplicated() -> None:
    result = run_plan(
        str(DATA / "mixed.yaml"),
        "--project",
        "my-project",
        *("--tag", "report-jobs=weekly", "--tag", "report-jobs=daily"),
        *("--tag", "report-jobs=weekly", "--tag", "thumbnails=large"),
    )
    queues = plan_json(result)["queues"]

    assert queues["report-jobs"]["declared_tags"] == ["daily", "weekly"]
    assert queues["thumbnails"]["declared_tags"] == ["large"]
    assert queues["audit-log"]["declared_tags"] == []


@pytest.mark.parametrize(
    ("tag", "message"),
    [
        (
            "report-jobs=has space",
            "must match ^[a-zA-Z0-9._~+%-]{1,100}$; leave this tag undeclared",
        ),
        ("report-jobs=" + "t" * 101, "must match"),
        ("report-jobs", "must look like QUEUE=TAG"),
        ("=daily", "must look like QUEUE=TAG"),
        ("webhooks=daily", "queue 'webhooks': --tag declares a tag on a push queue in"),
        ("nosuch=daily", "queue 'nosuch': --tag declares a tag on a queue that is not declared"),
    ],
)
def test_bad_tag_options_fail_with_the_rule(tag: str, message: str) -> None:
    result = run_plan(str(DATA / "mixed.yaml"), "--project", "my-project", "--tag", tag)

    assert result.exit_code == 2
    assert message in stderr_text(result)
    assert result.stdout == ""


def test_too_many_declared_tags_overflow_the_filter() -> None:
    tags = [arg for i in range(10) for arg in ("--tag", f"report-jobs=tag-number-{i}")]
    result = run_plan(str(DATA / "mixed.yaml"), "--project", "my-project", *tags)

    assert result.exit_code == 2
    assert "over Pub/Sub's 256; declare fewer --tag values" in stderr_text(result)


def test_names_pubsub_refuses_need_a_prefix() -> None:
    refused = run_plan(str(DATA / "needs_prefix.yaml"), "--project", "my-project")
    assert refused.exit_code == 2
    stderr = stderr_text(refused)
    assert "queue '2nd-pass'" in stderr
    assert "(line 4)" in stderr
    assert "rerun with --prefix (e.g. --prefix pq-)" in stderr

    accepted = run_plan(
        str(DATA / "needs_prefix.yaml"), "--project", "my-project", "--prefix", "pq-"
    )
    variables = plan_json(accepted)
    assert variables["prefix"] == "pq-"
    assert list(variables["queues"]) == ["jobs", "2nd-pass"]


def test_prefix_defaults_to_the_workers_environment() -> None:
    result = run_plan(
        str(DATA / "needs_prefix.yaml"),
        "--project",
        "my-project",
        env={"PULLQUEUE_PUBSUB_PREFIX": "team-"},
    )
    assert plan_json(result)["prefix"] == "team-"


@pytest.mark.parametrize("prefix", ["goog-", "1x-", "with space"])
def test_a_prefix_pubsub_refuses_is_an_error(prefix: str) -> None:
    result = run_plan(str(DATA / "mixed.yaml"), "--project", "my-project", "--prefix", prefix)
    assert result.exit_code == 2
    assert f"--prefix {prefix!r} must start with a letter" in stderr_text(result)


@pytest.mark.parametrize("project", ["My_Project", "123456789", "ab"])
def test_a_project_name_or_number_is_refused(project: str) -> None:
    result = run_plan(str(DATA / "mixed.yaml"), "--project", project)
    assert result.exit_code == 2
    assert "is not a GCP project id" in stderr_text(result)


@pytest.mark.parametrize(
    ("fixture", "line", "message"),
    [
        ("bad_indent.yaml", 4, "not valid YAML: mapping values are not allowed here"),
        ("bad_retry_limit.yaml", 5, "queue 'jobs': task_retry_limit must be a whole number"),
        ("duplicate_queue.yaml", 6, "queue 'jobs': declared twice (first on line 2)"),
    ],
)
def test_malformed_queue_yaml_names_the_line(fixture: str, line: int, message: str) -> None:
    result = run_plan(str(DATA / fixture), "--project", "my-project")

    assert result.exit_code == 2
    assert f"{DATA / fixture}, line {line}: {message}" in stderr_text(result)
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("queue:\n- name: a-b\n  mode: pull\n  ratee: 5/s\n", 4, "unknown field 'ratee'"),
        ("queue:\n- name: jobs\n  mode: lease\n", 3, "mode must be 'pull' or 'push'"),
        ("queue:\n- mode: pull\n", 2, "queue entry has no name"),
        ("queue:\n- name: bad_name\n  mode: pull\n", 2, "not a legacy queue name"),
        ("queue:\n- name: jobs\n  name: jobs2\n", 3, "'name' appears twice"),
        (
            "queue:\n- name: jobs\n  mode: pull\n  retry_parameters:\n    task_retry_limit: -1\n",
            5,
            "task_retry_limit must not be less than zero",
        ),
        (
            "queue:\n- name: jobs\n  mode: pull\n  retry_parameters:\n    task_age_limit: 2w\n",
            5,
            "task_age_limit '2w' must be a positive number",
        ),
        ("queue: {name: jobs}\n", 1, "'queue:' must be a list"),
        ("- name: jobs\n", 1, "a queue.yaml is a mapping"),
        (
            "queue:\n- name: 'jobs\n",
            3,
            "not valid YAML: found unexpected end of stream (while scanning a quoted scalar that"
            " starts on line 2)",
        ),
    ],
)
def test_schema_errors_name_the_line(text: str, line: int, message: str) -> None:
    with pytest.raises(QueueYamlError) as raised:
        read_queue_yaml(text, "queue.yaml")

    assert raised.value.line == line
    assert message in str(raised.value)


def test_queues_whose_ids_would_collide_are_refused() -> None:
    result = run_plan(str(DATA / "colliding_names.yaml"), "--project", "my-project")

    assert result.exit_code == 2
    assert (
        "queues 'jobs' and 'jobs-dead-letter' both need the topic id 'jobs-dead-letter'"
        in stderr_text(result)
    )


def test_empty_queue_yaml_plans_nothing_and_says_so(tmp_path: Path) -> None:
    empty = tmp_path / "queue.yaml"
    empty.write_text("# no queues yet\n")
    result = run_plan(str(empty), "--project", "my-project")

    assert plan_json(result)["queues"] == {}
    assert "declares no pull queue" in stderr_text(result)


def test_out_writes_the_file_and_keeps_stdout_empty(tmp_path: Path) -> None:
    out = tmp_path / "queues.auto.tfvars.json"
    result = run_plan(str(DATA / "mixed.yaml"), "--project", "my-project", "--out", str(out))

    assert result.exit_code == 0
    assert result.stdout == ""
    assert f"wrote {out} (4 pull queues)" in stderr_text(result)
    assert list(json.loads(out.read_text())["queues"]) == [
        "report-jobs",
        "thumbnails",
        "audit-log",
        "reindex",
    ]


def test_out_with_a_name_terraform_does_not_load_gets_a_note(tmp_path: Path) -> None:
    out = tmp_path / "queues.json"
    result = run_plan(str(DATA / "mixed.yaml"), "--project", "my-project", "--out", str(out))

    assert result.exit_code == 0
    assert f"pass {out} with -var-file" in stderr_text(result)


def test_missing_file_and_missing_project_are_usage_errors(tmp_path: Path) -> None:
    missing = run_plan(str(tmp_path / "nope.yaml"), "--project", "my-project")
    assert missing.exit_code == 2
    assert "does not exist" in missing.stderr

    no_project = run_plan(str(DATA / "mixed.yaml"))
    assert no_project.exit_code == 2
    assert "--project" in no_project.stderr


def test_build_plan_keeps_the_layouts_it_validated() -> None:
    plan = build_plan(
        read_queue_yaml((DATA / "mixed.yaml").read_text()),
        project="my-project",
        prefix="pq-",
        declared_tags={"thumbnails": ["large"]},
    )
    by_queue = {layout.queue: layout for layout in plan.layouts}
    assert by_queue["thumbnails"].tag_subscription_id("large") == "pq-thumbnails-tag-large"
    assert by_queue["reindex"].topic_path == "projects/my-project/topics/pq-reindex"
    assert plan.push_queues == ["default", "mail-out", "webhooks"]


def test_plan_runs_as_the_installed_console_script(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("pullqueue")
    assert script.exists(), f"{script} is missing: pip install -e . installs the console script"
    completed = subprocess.run(
        [str(script), "plan", str(DATA / "mixed.yaml"), "--project", "my-project"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": str(script.parent), "HOME": str(tmp_path)},
    )

    assert completed.returncode == 0, completed.stderr
    assert list(json.loads(completed.stdout)["queues"]) == [
        "report-jobs",
        "thumbnails",
        "audit-log",
        "reindex",
    ]
    assert "not handled: push queues default, mail-out, webhooks" in completed.stderr

    failed = subprocess.run(
        [str(script), "plan", str(DATA / "bad_indent.yaml"), "--project", "my-project"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": str(script.parent), "HOME": str(tmp_path)},
    )
    assert failed.returncode == 2
    assert "line 4" in failed.stderr
