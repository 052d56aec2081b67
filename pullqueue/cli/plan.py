"""The `pullqueue plan` command: a legacy queue.yaml in, the Terraform module's variables out.

It prints JSON a root module loads as `*.auto.tfvars.json`, keeps stdout for that JSON alone and
reports on stderr the push queues it leaves out and every setting that does not carry over.
"""

from __future__ import annotations

from pathlib import Path

import click

from pullqueue.cli.base import EXIT_STATUS_HELP, EXIT_USAGE, Command, OutputFile, fail
from pullqueue.errors import Error
from pullqueue.links import TERRAFORM_EXAMPLE, TERRAFORM_MODULE, source_url
from pullqueue.plan import (
    build_plan,
    parse_shard_options,
    parse_tag_options,
    read_queue_yaml,
    render,
)


def names_note(project: str) -> str:
    """What producers and workers set so task names stay unique on Pub/Sub (docs/dedupe.md)."""
    return (
        f"set: PULLQUEUE_DEDUPE_URL=firestore://{project} in producers and workers (task names"
        " stay unique as on the legacy queue; enable_dedupe_ttl = true in the module), or"
        " PULLQUEUE_ACCEPT_DUPLICATE_NAMES=1 to add named tasks unchecked: without either, a"
        f" named add fails ({source_url('docs/dedupe.md')})"
    )


@click.command(
    "plan",
    cls=Command,
    epilog=f"""\b
Examples:
  pullqueue plan queue.yaml --project my-app > queues.auto.tfvars.json
  pullqueue plan queue.yaml --project my-app --tag counters=hot --out queues.auto.tfvars.json
  pullqueue plan queue.yaml --project my-app --shards counters=64

\b
The Terraform module: {TERRAFORM_MODULE}
A root module using it: {TERRAFORM_EXAMPLE}

"""
    + EXIT_STATUS_HELP,
)
@click.argument(
    "queue_yaml", type=click.Path(exists=True, dir_okay=False, readable=True, path_type=Path)
)
@click.option("--project", required=True, metavar="ID", help="GCP project of the topics.")
@click.option(
    "--tag",
    "tags",
    multiple=True,
    metavar="QUEUE=TAG",
    help="Declare a tag of a pull queue: it gets its own filtered subscription (repeatable).",
)
@click.option(
    "--prefix",
    default="",
    envvar="PULLQUEUE_PUBSUB_PREFIX",
    show_envvar=True,
    metavar="P",
    help="Prefix of every topic and subscription id; workers need the same value.",
)
@click.option(
    "--shards",
    "shards",
    multiple=True,
    metavar="[QUEUE=]N",
    help="Shard topics of every pull queue (N) or of one (QUEUE=N), 1-256, default 16: at least"
    " the worker processes leasing by tag at once. Fixed once the queue holds tasks.",
)
@click.option(
    "--out",
    type=OutputFile(),
    help="Write the JSON to this file (e.g. queues.auto.tfvars.json) instead of stdout.",
)
def plan(
    queue_yaml: Path,
    project: str,
    tags: tuple[str, ...],
    prefix: str,
    shards: tuple[str, ...],
    out: Path | None,
) -> None:
    """Print the Terraform variables for every pull queue of QUEUE_YAML.

    The JSON sets project_id, prefix and queues of the Terraform module (its source below);
    save it as *.auto.tfvars.json beside your root module (the example below shows one).
    """
    try:
        text = queue_yaml.read_text(encoding="utf-8")
        result = build_plan(
            read_queue_yaml(text, source=str(queue_yaml)),
            project=project,
            prefix=prefix,
            declared_tags=parse_tag_options(tags),
            shards=parse_shard_options(shards),
        )
    except (Error, UnicodeDecodeError) as exc:
        fail(str(exc), EXIT_USAGE)

    if result.push_queues:
        click.echo(
            "not handled: push queues "
            + ", ".join(result.push_queues)
            + " (pullqueue moves pull queues; push queues stay on Cloud Tasks)",
            err=True,
        )
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    if result.variables["queues"]:
        click.echo(names_note(project), err=True)

    text = render(result)
    if out is None:
        click.echo(text, nl=False)
        return
    out.write_text(text, encoding="utf-8")
    count = len(result.variables["queues"])
    click.echo(f"wrote {out} ({count} pull queue{'s' if count != 1 else ''})", err=True)
    if not (out.name.endswith(".auto.tfvars.json") or out.name == "terraform.tfvars.json"):
        click.echo(
            f"note: Terraform loads *.auto.tfvars.json files on its own; pass {out} with -var-file",
            err=True,
        )
