"""What a worker runs: a per-task function `fn(task)`, or a per-batch one marked `@batch_handler`.

A per-task handler succeeds by returning and fails by raising; a batch handler gets the whole
leased batch (one tag's tasks with `group_by_tag`) and may say which of them it finished.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pullqueue.errors import ConfigurationError
from pullqueue.task import Task

TaskHandler = Callable[[Task], object]
"""Called once per task; return to have the task deleted, raise to have it released."""

BatchHandler = Callable[[Sequence[Task]], "Iterable[Task] | None"]
"""Called once per leased batch; return None to have every task deleted, or the tasks it
finished (only those are deleted, the others released); raise to release the whole batch."""

Handler = TaskHandler | BatchHandler
_MARK = "__pullqueue_batch_handler__"
F = TypeVar("F", bound=Callable[..., Any])


def batch_handler(fn: F) -> F:
    """Mark fn as a batch handler: the worker calls `fn(tasks)` once per leased batch."""
    setattr(fn, _MARK, True)
    return fn


def is_batch_handler(fn: Callable[..., Any]) -> bool:
    """True when fn was marked with `@batch_handler`."""
    return bool(getattr(fn, _MARK, False))


def load_handler(spec: str) -> Callable[..., Any]:
    """Import `package.module:function` (the current directory is importable, as for gunicorn).

    Raises ConfigurationError saying what is wrong: the form, the module, the name or its type.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(
            f"handler {spec!r} must be MODULE:FUNCTION, e.g. myservice.tasks:handle"
            " (the module is imported from the current directory or the installed packages)"
        )
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise ConfigurationError(
                f"cannot import module {module_name!r} for handler {spec!r}: no module named"
                f" {exc.name!r}; run from the directory that contains it or install its package"
            ) from exc
        raise ConfigurationError(
            f"module {module_name!r} imports {exc.name!r}, which is not installed: {exc}"
        ) from exc
    except SyntaxError as exc:
        where = f" ({exc.filename}, line {exc.lineno})" if exc.filename else ""
        raise ConfigurationError(
            f"cannot import module {module_name!r} for handler {spec!r}: SyntaxError:"
            f" {exc.msg}{where}"
        ) from exc
    except Exception as exc:
        raise ConfigurationError(
            f"cannot import module {module_name!r} for handler {spec!r}: it raised"
            f" {type(exc).__name__}: {exc}"
        ) from exc
    target: Any = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError as exc:
            public = sorted(n for n in dir(module) if not n.startswith("_"))
            raise ConfigurationError(
                f"module {module_name!r} has no {attr!r} for handler {spec!r}; it defines: "
                + (", ".join(public[:20]) or "nothing public")
            ) from exc
    if not callable(target):
        raise ConfigurationError(
            f"{spec!r} is a {type(target).__name__}, not a function: point at a callable"
            " taking a task (or, marked @batch_handler, a list of tasks)"
        )
    fn: Callable[..., Any] = target
    return fn
