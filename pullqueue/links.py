"""Where the project's files live on the web, for messages and help that point at them.

A pip install has no `terraform/` or `docs/` directory, so what the command line names is a URL
built here (pyproject.toml's Project-URLs give the same repository).
"""

from __future__ import annotations

REPOSITORY = "https://github.com/pullqueue/pullqueue"
"""The project's source repository (Project-URL Source)."""


def source_url(path: str) -> str:
    """The URL of a file or directory of the repository, e.g. source_url('docs/migration.md')."""
    kind = "blob" if "." in path.rsplit("/", 1)[-1] else "tree"
    return f"{REPOSITORY}/{kind}/main/{path.strip('/')}"


TERRAFORM_MODULE = source_url("terraform/modules/pullqueue")
"""The Terraform module that provisions a queue's Pub/Sub side."""
TERRAFORM_EXAMPLE = source_url("terraform/examples/basic")
"""A root module that uses TERRAFORM_MODULE with `pullqueue plan`'s output."""
