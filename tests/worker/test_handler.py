"""Loading MODULE:FUNCTION handlers, and the errors a user sees when the spec is wrong."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pullqueue import ConfigurationError
from pullqueue.worker import batch_handler, is_batch_handler, load_handler


@pytest.fixture
def service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    package = tmp_path / "svc_handlers"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tasks.py").write_text(
        "from pullqueue.worker import batch_handler\n"
        "LIMIT = 3\n"
        "def handle(task):\n    return task\n"
        "@batch_handler\n"
        "def count(tasks):\n    return None\n"
        "class Jobs:\n    @staticmethod\n    def run(task):\n        return task\n"
    )
    (package / "broken.py").write_text("import not_installed_dependency_xyz\n")
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("svc_handlers")]:
        del sys.modules[name]


def test_a_function_is_found_from_the_current_directory(service: Path) -> None:
    handle = load_handler("svc_handlers.tasks:handle")
    assert handle("x") == "x"
    assert not is_batch_handler(handle)


def test_a_batch_handler_keeps_its_mark_and_dotted_names_resolve(service: Path) -> None:
    assert is_batch_handler(load_handler("svc_handlers.tasks:count"))
    assert load_handler("svc_handlers.tasks:Jobs.run")(7) == 7


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("svc_handlers.tasks", "must be MODULE:FUNCTION"),
        (":handle", "must be MODULE:FUNCTION"),
        ("svc_handlers.nope:handle", "cannot import module 'svc_handlers.nope'"),
        ("svc_handlers.broken:run", "imports 'not_installed_dependency_xyz', which is not"),
        ("svc_handlers.tasks:hadle", "has no 'hadle'.*it defines: Jobs, LIMIT, batch_handler"),
        ("svc_handlers.tasks:LIMIT", "is a int, not a function"),
    ],
)
def test_a_wrong_spec_says_what_to_fix(service: Path, spec: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        load_handler(spec)


def test_batch_handler_marks_without_wrapping() -> None:
    def fn(tasks: object) -> None:
        return None

    assert batch_handler(fn) is fn
    assert is_batch_handler(fn)
