"""The Terraform module creates exactly the ids and filters the Pub/Sub adapter looks for.

terraform/modules/pullqueue/layout.tf is evaluated by Terraform itself (it needs no provider, so
it runs offline) for sample queues, prefixes and declared tags, and every id and filter is
compared with `QueueLayout`; python-hcl2 reads main.tf and iam.tf to check that the resources
take their names from those locals and carry the subscription settings the adapter relies on.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import hcl2
import pytest

from pullqueue.adapters.pubsub.claims import CLAIM_DEADLINE
from pullqueue.adapters.pubsub.layout import LABEL_SHARDS, SHARDS, QueueLayout
from pullqueue.config import Settings
from pullqueue.errors import ConfigurationError
from pullqueue.plan import MAX_DELIVERY_ATTEMPTS, build_plan, read_queue_yaml, render

ROOT = Path(__file__).resolve().parent.parent
MODULE = ROOT / "terraform" / "modules" / "pullqueue"
EXAMPLE = ROOT / "terraform" / "examples" / "basic"
QUEUE_YAML = ROOT / "tests" / "data" / "queue_yaml"

SERVICE_ACCOUNTS = {
    "publisher_service_account": "producer@my-project.iam.gserviceaccount.com",
    "worker_service_account": "my-project@appspot.gserviceaccount.com",
}

LAYOUT_OUTPUTS = """
output "layout" { value = local.layout }
output "pull_subscriptions" { value = local.pull_subscriptions }
output "worker_environment" { value = local.worker_environment }
"""


def terraform(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run terraform offline in workdir, with no user configuration leaking in."""
    binary = shutil.which("terraform")
    assert binary, "terraform is not on PATH; install Terraform >= 1.9 (CI needs it too)"
    cli_config = workdir / "empty.tfrc"
    cli_config.touch()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_")}
    env.update(
        CHECKPOINT_DISABLE="1",
        TF_IN_AUTOMATION="1",
        TF_INPUT="0",
        TF_CLI_CONFIG_FILE=str(cli_config),
    )
    return subprocess.run(
        [binary, *args, "-no-color"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def run_layout(workdir: Path, variables: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """Apply the module's variables.tf and layout.tf (no provider) to variables."""
    workdir.mkdir(parents=True, exist_ok=True)
    for name in ("variables.tf", "layout.tf"):
        shutil.copy(MODULE / name, workdir / name)
    (workdir / "outputs.tf").write_text(LAYOUT_OUTPUTS)
    (workdir / "test.auto.tfvars.json").write_text(json.dumps({**SERVICE_ACCOUNTS, **variables}))
    init = terraform(workdir, "init", "-input=false")
    assert init.returncode == 0, init.stdout + init.stderr
    return terraform(workdir, "apply", "-auto-approve", "-input=false")


def evaluate_layout(workdir: Path, variables: dict[str, Any]) -> dict[str, Any]:
    """The layout locals Terraform computes for variables."""
    applied = run_layout(workdir, variables)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    shown = terraform(workdir, "output", "-json")
    assert shown.returncode == 0, shown.stderr
    return {name: output["value"] for name, output in json.loads(shown.stdout).items()}


def expected_layouts(variables: dict[str, Any]) -> dict[str, QueueLayout]:
    return {
        name: QueueLayout(
            variables["project_id"],
            name,
            variables.get("prefix", ""),
            tuple(queue.get("declared_tags", ())),
            queue.get("shards", SHARDS),
        )
        for name, queue in variables["queues"].items()
    }


SAMPLES = {
    "no prefix, several queues": {
        "project_id": "my-project",
        "queues": {
            "report-jobs": {},
            "thumbnails": {"declared_tags": ["small", "large", "small"], "shards": 64},
            "audit": {"declared_tags": ["security"], "shards": 1},
            "wide": {"shards": 256},
        },
    },
    "prefix for names Pub/Sub refuses alone": {
        "project_id": "example.com:my-project",
        "prefix": "pq-",
        "queues": {
            "2nd-pass": {"declared_tags": ["weekly", "daily", "hourly", "Monthly"]},
            "ab": {},
            "Jobs": {"declared_tags": ["a.b~c+d%e-f_g"]},
        },
    },
    "prefix with every allowed character": {
        "project_id": "other-project-1",
        "prefix": "team.a~b+c%d_",
        "queues": {"x": {"declared_tags": ["0", "Z", "_", "-", "z9"]}},
    },
}


@pytest.mark.parametrize("sample", list(SAMPLES), ids=list(SAMPLES))
def test_terraform_ids_and_filters_equal_the_adapters(sample: str, tmp_path: Path) -> None:
    variables = SAMPLES[sample]
    outputs = evaluate_layout(tmp_path, variables)
    layouts = expected_layouts(variables)

    assert set(outputs["layout"]) == set(layouts)
    expected_pull: dict[str, dict[str, str]] = {}
    for name, layout in layouts.items():
        got = outputs["layout"][name]
        assert got["topic_id"] == layout.topic_id
        assert got["worker_subscription_id"] == layout.worker_subscription_id
        assert got["dead_letter_topic_id"] == layout.dead_letter_topic_id
        assert got["dead_letter_subscription_id"] == layout.dead_letter_subscription_id
        assert got["worker_filter"] == layout.worker_filter
        tags = sorted(set(layout.declared_tags))
        assert got["tag_subscription_ids"] == {t: layout.tag_subscription_id(t) for t in tags}
        assert got["tag_filters"] == {t: f'attributes.tag = "{t}"' for t in tags}
        assert got["shards"] == layout.shards
        shards = range(layout.shards)
        assert got["shard_topic_ids"] == [layout.shard_topic_id(k) for k in shards]
        assert got["shard_subscription_ids"] == [layout.shard_subscription_id(k) for k in shards]
        assert got["claims_topic_id"] == layout.claims_topic_id
        assert got["claims_subscription_id"] == layout.claims_subscription_id
        expected_pull[layout.worker_subscription_id] = {
            "queue": name,
            "filter": layout.worker_filter,
            "topic_id": layout.topic_id,
        }
        for tag in tags:
            expected_pull[layout.tag_subscription_id(tag)] = {
                "queue": name,
                "filter": f'attributes.tag = "{tag}"',
                "topic_id": layout.topic_id,
            }
        for k in shards:
            expected_pull[layout.shard_subscription_id(k)] = {
                "queue": name,
                "filter": "",
                "topic_id": layout.shard_topic_id(k),
            }
    # The subscriptions main.tf creates with exactly-once and dead-lettering, one per id.
    pulled = {
        sub["id"]: {"queue": sub["queue"], "filter": sub["filter"], "topic_id": sub["topic_id"]}
        for sub in outputs["pull_subscriptions"].values()
    }
    assert pulled == expected_pull
    assert len(outputs["pull_subscriptions"]) == len(expected_pull)


def test_worker_filter_with_several_tags_is_byte_identical(tmp_path: Path) -> None:
    variables = {
        "project_id": "my-project",
        "queues": {"q-many": {"declared_tags": ["zeta", "alpha", "Mid", "alpha", "beta"]}},
    }
    outputs = evaluate_layout(tmp_path, variables)
    got = outputs["layout"]["q-many"]["worker_filter"]
    assert got.encode() == (
        b'NOT attributes:tag OR (attributes.tag != "Mid" AND attributes.tag != "alpha"'
        b' AND attributes.tag != "beta" AND attributes.tag != "zeta")'
    )
    assert (
        got
        == QueueLayout("my-project", "q-many", "", ("zeta", "alpha", "Mid", "beta")).worker_filter
    )


def test_worker_environment_points_settings_at_the_same_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    variables = SAMPLES["prefix for names Pub/Sub refuses alone"]
    outputs = evaluate_layout(tmp_path, variables)
    for key, value in outputs["worker_environment"].items():
        monkeypatch.setenv(key, value)
    settings = Settings()

    assert settings.url == "pubsub://example.com:my-project"
    for name, layout in expected_layouts(variables).items():
        from_env = QueueLayout(
            "example.com:my-project",
            name,
            settings.pubsub_prefix,
            tuple(settings.pubsub_declared_tags.get(name, ())),
        )
        assert from_env == QueueLayout(
            layout.project, name, layout.prefix, tuple(sorted(set(layout.declared_tags)))
        )
        assert from_env.worker_filter == layout.worker_filter


def test_worker_environment_never_overstates_a_subscriptions_limits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that may not read its subscriptions assumes the smallest value of any queue."""
    variables = {
        "project_id": "my-project",
        "queues": {
            "fast": {"ack_deadline_seconds": 20, "message_retention_duration": "86400s"},
            "slow": {"max_delivery_attempts": 12, "ack_deadline_seconds": 300},
            "defaults": {},
        },
    }
    outputs = evaluate_layout(tmp_path, variables)
    for key, value in outputs["worker_environment"].items():
        monkeypatch.setenv(key, value)
    settings = Settings()

    assert settings.pubsub_ack_deadline == 20
    assert settings.pubsub_max_delivery_attempts == 12
    assert settings.pubsub_retention_seconds == 86400


def test_worker_environment_of_no_queue_is_still_valid_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outputs = evaluate_layout(tmp_path, {"project_id": "my-project", "queues": {}})
    for key, value in outputs["worker_environment"].items():
        monkeypatch.setenv(key, value)
    settings = Settings()

    assert settings.pubsub_declared_tags == {}
    assert settings.pubsub_ack_deadline == 600
    assert settings.pubsub_retention_seconds == 31 * 24 * 3600


REJECTED = {
    "name starting with a digit, no prefix": ("", {"2nd-pass": {}}, "Set prefix"),
    "two-letter name, no prefix": ("", {"ab": {}}, "Set prefix"),
    "name starting with goog": ("", {"google-jobs": {}}, "Set prefix"),
    "prefix starting with goog": ("goog-", {"jobs": {}}, "prefix must be empty"),
    "declared tag with a space": ("", {"jobs": {"declared_tags": ["a b"]}}, "Declared tags"),
    "no shard": ("", {"jobs": {"shards": 0}}, "shards must be a whole number from 1 to 256"),
    "more shards than allowed": ("", {"jobs": {"shards": 257}}, "shards must be a whole number"),
    "a fraction of a shard": ("", {"jobs": {"shards": 2.5}}, "shards must be a whole number"),
    "worker filter over 256 bytes": (
        "",
        {"jobs": {"declared_tags": [f"tag-number-{i}" for i in range(9)]}},
        "at most 256 bytes",
    ),
}


@pytest.mark.parametrize("case", list(REJECTED), ids=list(REJECTED))
def test_terraform_rejects_what_the_adapter_rejects(case: str, tmp_path: Path) -> None:
    prefix, queues, message = REJECTED[case]
    with pytest.raises(ConfigurationError):
        for name, queue in queues.items():
            QueueLayout(
                "my-project",
                name,
                prefix,
                tuple(queue.get("declared_tags", ())),
                queue.get("shards", SHARDS),
            )

    applied = run_layout(tmp_path, {"project_id": "my-project", "prefix": prefix, "queues": queues})

    assert applied.returncode != 0
    assert message in " ".join((applied.stdout + applied.stderr).split())


def test_terraform_refuses_two_queues_sharing_an_id(tmp_path: Path) -> None:
    applied = run_layout(
        tmp_path,
        {"project_id": "my-project", "queues": {"jobs": {}, "jobs-dead-letter": {}}},
    )
    assert applied.returncode != 0
    assert "Two queues map to the same topic id" in " ".join(applied.stderr.split())


def test_plan_output_is_accepted_by_the_module_and_names_the_same_ids(tmp_path: Path) -> None:
    plan = build_plan(
        read_queue_yaml((QUEUE_YAML / "mixed.yaml").read_text(), "mixed.yaml"),
        project="my-project",
        prefix="pq-",
        declared_tags={"report-jobs": ["weekly", "daily"]},
        shards={"thumbnails": 64, None: 32},
    )
    outputs = evaluate_layout(tmp_path, json.loads(render(plan)))
    assert {name: queue["shards"] for name, queue in outputs["layout"].items()} == {
        "report-jobs": 32,
        "thumbnails": 64,
        "audit-log": 32,
        "reindex": 32,
    }

    assert set(outputs["layout"]) == {"report-jobs", "thumbnails", "audit-log", "reindex"}
    for layout in plan.layouts:
        got = outputs["layout"][layout.queue]
        assert got["topic_id"] == layout.topic_id
        assert got["worker_filter"] == layout.worker_filter
        assert set(got["tag_subscription_ids"].values()) == {
            layout.tag_subscription_id(t) for t in layout.declared_tags
        }


def test_example_tfvars_are_what_plan_makes_of_the_example_queue_yaml() -> None:
    committed = json.loads((EXAMPLE / "queues.auto.tfvars.json").read_text())
    plan = build_plan(
        read_queue_yaml((EXAMPLE / "queue.yaml").read_text(), "queue.yaml"),
        project=committed["project_id"],
        prefix=committed["prefix"],
        declared_tags={"report-jobs": ["priority"]},
    )
    assert plan.variables == committed


# --- the HCL of the resources, read with python-hcl2 -------------------------------------


def unquote(value: Any) -> Any:
    """python-hcl2 keeps string literals quoted and expressions as ${...}; strip both."""
    if isinstance(value, str):
        if value.startswith("${") and value.endswith("}"):
            return value[2:-1]
        if len(value) >= 2 and value[0] == value[-1] == '"':
            return value[1:-1]
    return value


def load_hcl(path: Path) -> dict[str, Any]:
    parsed = dict(hcl2.loads(path.read_text()))
    parsed.pop("__comments__", None)
    return parsed


def variables(*paths: Path) -> dict[str, dict[str, Any]]:
    """{name: body} of every variable block in the files."""
    return {
        unquote(name): body
        for path in paths
        for block in load_hcl(path).get("variable", [])
        for name, body in block.items()
        if name != "__is_block__"
    }


def resources(*paths: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """{(type, name): body} of every resource in the files."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for path in paths:
        for block in load_hcl(path).get("resource", []):
            for rtype, named in block.items():
                for rname, body in named.items():
                    found[(unquote(rtype), unquote(rname))] = body
    return found


def module_resources() -> dict[tuple[str, str], dict[str, Any]]:
    return resources(*sorted(MODULE.glob("*.tf")))


def test_resources_take_their_names_from_the_layout_locals() -> None:
    found = module_resources()
    names = {key: unquote(body["name"]) for key, body in found.items() if "name" in body}
    assert names == {
        ("google_pubsub_topic", "queue"): "each.value.topic_id",
        ("google_pubsub_topic", "shard"): "each.value.id",
        ("google_pubsub_topic", "claims"): "each.value.claims_topic_id",
        ("google_pubsub_subscription", "claims"): "each.value.claims_subscription_id",
        ("google_pubsub_topic", "dead_letter"): "each.value.dead_letter_topic_id",
        ("google_pubsub_subscription", "dead_letter"): "each.value.dead_letter_subscription_id",
        ("google_pubsub_subscription", "pull"): "each.value.id",
    }
    assert unquote(found["google_pubsub_topic", "queue"]["for_each"]) == "local.layout"
    assert unquote(found["google_pubsub_topic", "dead_letter"]["for_each"]) == "local.layout"
    assert unquote(found["google_pubsub_topic", "shard"]["for_each"]) == "local.shard_topics"
    pull = found["google_pubsub_subscription", "pull"]
    assert unquote(pull["for_each"]) == "local.pull_subscriptions"
    assert unquote(pull["filter"]) == 'each.value.filter == "" ? null : each.value.filter'
    # Shard subscriptions (keyed like their topic) read their shard topic, the others the queue's.
    assert unquote(pull["topic"]) == (
        "lookup(google_pubsub_topic.shard, each.key,"
        " google_pubsub_topic.queue[each.value.queue]).id"
    )


def test_queue_topic_carries_the_shard_count_label_the_adapter_reads() -> None:
    found = module_resources()
    labels = unquote(found["google_pubsub_topic", "queue"]["labels"])
    assert f'"{LABEL_SHARDS}" = tostring(each.value.shards)' in labels
    viewers = {
        unquote(body["member"])
        for key, body in found.items()
        if key[0] == "google_pubsub_topic_iam_member"
        and unquote(body["role"]) == "roles/pubsub.viewer"
        and unquote(body["topic"]) == "google_pubsub_topic.queue[each.key].name"
    }
    assert viewers == {
        "serviceAccount:${var.publisher_service_account}",
        "serviceAccount:${var.worker_service_account}",
    }


def test_pull_subscriptions_have_the_settings_the_adapter_needs() -> None:
    pull = module_resources()["google_pubsub_subscription", "pull"]

    assert pull["enable_exactly_once_delivery"] is True
    assert pull["retain_acked_messages"] is False
    (dead_letter,) = pull["dead_letter_policy"]
    assert unquote(dead_letter["dead_letter_topic"]) == (
        "google_pubsub_topic.dead_letter[each.value.queue].id"
    )
    assert "max_delivery_attempts" in unquote(dead_letter["max_delivery_attempts"])
    (expiration,) = pull["expiration_policy"]
    assert unquote(expiration["ttl"]) == "", "subscriptions must never expire"
    assert "retry_policy" not in pull, "a fixed retry policy would delay released leases"
    (retry,) = pull["dynamic"]
    ((block_name, block),) = retry.items()
    assert unquote(block_name) == "retry_policy"
    assert "minimum_backoff == null ? []" in unquote(block["for_each"])
    assert "ack_deadline_seconds" in unquote(pull["ack_deadline_seconds"])
    assert "message_retention_duration" in unquote(pull["message_retention_duration"])

    dead_letter_sub = module_resources()["google_pubsub_subscription", "dead_letter"]
    (expiration,) = dead_letter_sub["expiration_policy"]
    assert unquote(expiration["ttl"]) == ""


def test_the_claims_subscription_holds_tokens_without_dead_lettering() -> None:
    found = module_resources()
    claims = found["google_pubsub_subscription", "claims"]
    assert claims["enable_exactly_once_delivery"] is True
    assert claims["ack_deadline_seconds"] == CLAIM_DEADLINE
    assert "dead_letter_policy" not in claims, "tokens are redelivered forever, by design"
    (expiration,) = claims["expiration_policy"]
    assert unquote(expiration["ttl"]) == ""
    worker = "serviceAccount:${var.worker_service_account}"
    assert unquote(found["google_pubsub_subscription_iam_member", "worker_claims"]["member"]) == (
        worker
    )
    publisher = found["google_pubsub_topic_iam_member", "worker_claims_publisher"]
    assert unquote(publisher["role"]) == "roles/pubsub.publisher"


def queue_variable_defaults() -> dict[str, str]:
    """{attribute: default} of the scalar optional(...) attributes of the queues variable."""
    type_expression = unquote(variables(MODULE / "variables.tf")["queues"]["type"])
    return dict(re.findall(r'(\w+) = optional\(\w+, ("[^"]*"|[0-9]+)\)', type_expression))


def test_queue_defaults_hold_legacy_etas_and_the_legacy_retry_count() -> None:
    defaults = queue_variable_defaults()
    # Legacy ETAs reach 30 days ahead: messages are retained 31 days, Pub/Sub's maximum.
    assert defaults["message_retention_duration"] == '"2678400s"'
    # No task_retry_limit leased without limit: the closest Pub/Sub allows is 100.
    assert defaults["max_delivery_attempts"] == str(MAX_DELIVERY_ATTEMPTS)
    assert 10 <= int(defaults["ack_deadline_seconds"]) <= 600


def test_queue_defaults_agree_with_the_adapters_auto_create() -> None:
    """Terraform's subscriptions keep tasks at least as long as auto_create's and lease alike."""
    defaults = queue_variable_defaults()
    fields = Settings.model_fields
    assert int(defaults["ack_deadline_seconds"]) == fields["pubsub_ack_deadline"].default
    assert int(defaults["max_delivery_attempts"]) == fields["pubsub_max_delivery_attempts"].default
    retention = int(defaults["message_retention_duration"].strip('"s'))
    assert retention >= fields["pubsub_retention_seconds"].default


def test_iam_is_least_privilege() -> None:
    found = module_resources()
    iam = {key: body for key, body in found.items() if "iam" in key[0]}
    grants = {
        key: (unquote(body["role"]), unquote(body["member"]), unquote(body.get("topic")))
        for key, body in iam.items()
    }
    # Nothing project-wide, nothing authoritative (binding/policy would clobber others' grants).
    assert all(key[0].endswith("_iam_member") for key in iam)
    assert not any(key[0].startswith("google_project_iam") for key in found)
    publisher = iam["google_pubsub_topic_iam_member", "publisher"]
    assert unquote(publisher["role"]) == "roles/pubsub.publisher"
    assert unquote(publisher["member"]) == "serviceAccount:${var.publisher_service_account}"
    assert unquote(publisher["topic"]) == "google_pubsub_topic.queue[each.key].name"
    worker = iam["google_pubsub_subscription_iam_member", "worker"]
    assert unquote(worker["role"]) == "roles/pubsub.subscriber"
    assert unquote(worker["member"]) == "serviceAccount:${var.worker_service_account}"
    assert unquote(worker["subscription"]) == "google_pubsub_subscription.pull[each.key].name"
    assert unquote(worker["for_each"]) == "local.pull_subscriptions"
    agent_publish = iam["google_pubsub_topic_iam_member", "dead_letter_publisher"]
    assert unquote(agent_publish["role"]) == "roles/pubsub.publisher"
    assert unquote(agent_publish["member"]) == "local.pubsub_service_agent"
    assert unquote(agent_publish["topic"]) == "google_pubsub_topic.dead_letter[each.key].name"
    agent_ack = iam["google_pubsub_subscription_iam_member", "dead_letter_source"]
    assert unquote(agent_ack["role"]) == "roles/pubsub.subscriber"
    assert unquote(agent_ack["member"]) == "local.pubsub_service_agent"
    assert unquote(agent_ack["subscription"]) == "google_pubsub_subscription.pull[each.key].name"
    viewer = iam["google_pubsub_subscription_iam_member", "worker_viewer"]
    assert unquote(viewer["role"]) == "roles/pubsub.viewer"
    assert "if var.grant_worker_subscription_viewer" in unquote(viewer["for_each"])
    assert unquote(viewer["subscription"]) == "google_pubsub_subscription.pull[each.key].name"
    # Workers publish only to their own queue's topics (republishing a task deferred to a far
    # ETA to the topic it came from), its dead-letter topic (setting aside a message they cannot
    # serve) and its claims topic (a missing shard token), never elsewhere.
    worker_publish = {
        key: (unquote(body["topic"]), unquote(body["for_each"]))
        for key, body in iam.items()
        if unquote(body["member"]) == "serviceAccount:${var.worker_service_account}"
        and unquote(body["role"]) == "roles/pubsub.publisher"
    }
    assert worker_publish == {
        ("google_pubsub_topic_iam_member", "worker_republish"): (
            "google_pubsub_topic.queue[each.key].name",
            "var.grant_worker_publisher ? local.layout : {}",
        ),
        ("google_pubsub_topic_iam_member", "worker_republish_shard"): (
            "google_pubsub_topic.shard[each.key].name",
            "var.grant_worker_publisher ? local.shard_topics : {}",
        ),
        ("google_pubsub_topic_iam_member", "worker_set_aside"): (
            "google_pubsub_topic.dead_letter[each.key].name",
            "var.grant_worker_publisher ? local.layout : {}",
        ),
        ("google_pubsub_topic_iam_member", "worker_claims_publisher"): (
            "google_pubsub_topic.claims[each.key].name",
            "local.layout",
        ),
    }
    worker_roles = {
        (key[0], unquote(body["role"]))
        for key, body in iam.items()
        if "var.worker_service_account" in unquote(body["member"])
    }
    assert worker_roles == {
        ("google_pubsub_subscription_iam_member", "roles/pubsub.subscriber"),
        ("google_pubsub_subscription_iam_member", "roles/pubsub.viewer"),
        ("google_pubsub_topic_iam_member", "roles/pubsub.publisher"),
        # On the queue topic alone, to read its shard count label.
        ("google_pubsub_topic_iam_member", "roles/pubsub.viewer"),
    }
    granted = variables(MODULE / "variables.tf")["grant_worker_publisher"]
    assert unquote(granted["type"]) == "bool"
    assert granted["default"] is True
    assert {role for role, _, _ in grants.values()} == {
        "roles/pubsub.publisher",
        "roles/pubsub.subscriber",
        "roles/pubsub.viewer",
        "roles/cloudkms.cryptoKeyEncrypterDecrypter",
    }


def test_layout_file_needs_no_provider() -> None:
    """The evaluation above is honest only if layout.tf is the whole naming logic."""
    parsed = load_hcl(MODULE / "layout.tf")
    assert set(parsed) == {"locals", "resource"}
    assert [(t, n) for t, n in resources(MODULE / "layout.tf")] == [
        ("terraform_data", "layout_checks")
    ]


def test_every_variable_is_typed_and_described() -> None:
    for path in (*sorted(MODULE.glob("*.tf")), EXAMPLE / "variables.tf"):
        for name, body in variables(path).items():
            assert "type" in body, f"{path.name}: variable {name} has no type"
            assert unquote(body.get("description", "")), f"{path.name}: {name} undescribed"
    validated = {
        name for name, body in variables(MODULE / "variables.tf").items() if body.get("validation")
    }
    assert validated >= {"project_id", "prefix", "queues", "kms_key_name", "labels", "alerts"}


def test_example_root_calls_the_module_with_plans_variables() -> None:
    parsed = load_hcl(EXAMPLE / "main.tf")
    (call,) = [body for block in parsed["module"] for body in block.values()]
    assert unquote(call["source"]) == "../../modules/pullqueue"
    for variable in ("project_id", "prefix", "queues"):
        assert unquote(call[variable]) == f"var.{variable}"
