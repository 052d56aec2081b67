"""The built wheel as a pip user gets it: license, metadata, and no repository path named by
the command line that the wheel does not ship."""

from __future__ import annotations

import ast
import email
import re
import shutil
import subprocess
import sys
import zipfile
from email.message import Message

import pytest

from pullqueue import links
from tests.cli.support import ROOT

REPO_PATH = re.compile(r"(?<![\w/.:-])(terraform|docs|examples|benchmarks|tests)/\w")
"""A path into the repository (not into a URL): a pip install has none of these."""


# Both tests on one pytest worker, so the wheel is built once.
pytestmark = pytest.mark.xdist_group("wheel")

NOT_SHIPPED = shutil.ignore_patterns(
    ".git", ".venv*", ".ci", "build", "*.egg-info", "__pycache__", ".*_cache", "tests", "benchmarks"
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    # Built from a copy: setuptools writes build/ and *.egg-info into the tree it builds, and two
    # builds of one tree at once (CI saw it: the two tests on two workers) break each other.
    source = tmp_path_factory.mktemp("source") / "pullqueue"
    shutil.copytree(ROOT, source, ignore=NOT_SHIPPED)
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-q", "-w", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, f"pip wheel exited {built.returncode}: {built.stderr[-2000:]}"
    (built,) = out.glob("pullqueue-*.whl")
    return zipfile.ZipFile(built)


def metadata(wheel: zipfile.ZipFile) -> Message:
    name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    return email.message_from_bytes(wheel.read(name))


def test_the_wheel_carries_the_apache_license_and_its_text(wheel: zipfile.ZipFile) -> None:
    meta = metadata(wheel)
    assert meta["License-Expression"] == "Apache-2.0"
    license_files = [n for n in wheel.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
    assert license_files, wheel.namelist()
    text = wheel.read(license_files[0]).decode()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert text == (ROOT / "LICENSE").read_text()


def test_the_metadata_names_pythons_urls_and_the_command(wheel: zipfile.ZipFile) -> None:
    meta = metadata(wheel)
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert meta["Requires-Python"] == ">=3.10"
    assert 'requires-python = ">=3.10"' in pyproject
    classifiers = meta.get_all("Classifier") or []
    for minor in range(10, 14):
        assert f"Programming Language :: Python :: 3.{minor}" in classifiers
    assert "Typing :: Typed" in classifiers
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
    assert {"Homepage", "Documentation", "Source", "Issues", "Changelog"} <= set(urls)
    assert urls["Source"] == links.REPOSITORY
    entry_points = next(n for n in wheel.namelist() if n.endswith("entry_points.txt"))
    assert "pullqueue = pullqueue.cli:main" in wheel.read(entry_points).decode()
    names = wheel.namelist()
    assert "pullqueue/py.typed" in names and "pullqueue/cli/base.py" in names
    assert not [n for n in names if n.startswith("tests/")]


def test_no_message_in_the_wheel_names_a_repository_path(wheel: zipfile.ZipFile) -> None:
    """Strings the code prints (not docstrings, not source_url() arguments) that name
    terraform/, docs/ or examples/ would point a pip user at files they do not have."""
    found = []
    for name in wheel.namelist():
        if not name.endswith(".py"):
            continue
        tree = ast.parse(wheel.read(name))
        skip = {id(node) for node in _docstrings(tree)} | {id(n) for n in _url_arguments(tree)}
        for node in ast.walk(tree):
            text = node.value if isinstance(node, ast.Constant) else None
            if isinstance(text, str) and id(node) not in skip and REPO_PATH.search(text):
                found.append(f"{name}:{getattr(node, 'lineno', 0)}: {text.strip()[:80]}")
    assert not found, "\n".join(found)


def _docstrings(tree: ast.AST) -> list[ast.AST]:
    out: list[ast.AST] = []
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            for index, statement in enumerate(body):
                documents = index == 0 or isinstance(body[index - 1], ast.Assign | ast.AnnAssign)
                if isinstance(statement, ast.Expr) and documents:
                    out.append(statement.value)
    return out


def _url_arguments(tree: ast.AST) -> list[ast.AST]:
    return [
        arg
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", getattr(node.func, "attr", None)) == "source_url"
        for arg in node.args
    ]


def test_the_project_urls_point_where_the_command_line_points() -> None:
    assert links.TERRAFORM_MODULE.startswith(links.REPOSITORY + "/tree/main/")
    assert (ROOT / links.TERRAFORM_MODULE.split("/tree/main/", 1)[1]).is_dir()
    assert (ROOT / links.TERRAFORM_EXAMPLE.split("/tree/main/", 1)[1]).is_dir()
    assert (ROOT / "CHANGELOG.md").is_file() and (ROOT / "LICENSE").is_file()
