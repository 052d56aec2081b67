"""Stand-ins for the web frameworks and app modules the ported clients import.

The clients are kept as their projects wrote them; what they need besides the taskqueue API
(webapp2 and flask handlers, jinja2 templates, the apps' own helper modules) is provided here,
small and recording, and installed under the import names the clients use. A handler is then
called directly with the request parameters a test gives, as the framework would call it.
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

View = Callable[..., Any]


class Request:
    """The request a handler reads: `get(name, default)` as webapp2's, `args`, `remote_addr`
    and `user_agent` as flask's."""

    def __init__(self, params: dict[str, Any] | None = None, **fields: Any) -> None:
        self.params = dict(params or {})
        self.args = self.params
        for key, value in fields.items():
            setattr(self, key, value)

    def get(self, name: str, default: Any = "") -> Any:
        return self.params.get(name, default)


class _Output:
    def __init__(self) -> None:
        self.written: list[str] = []

    def write(self, text: str) -> None:
        self.written.append(text)


class Response:
    """What a webapp2 handler writes and the status it sets."""

    def __init__(self) -> None:
        self.status = 200
        self.out = _Output()
        self.headers: dict[str, str] = {}

    def set_status(self, status: int) -> None:
        self.status = status

    def write(self, text: str) -> None:
        self.out.write(text)


class RequestHandler:
    """webapp2.RequestHandler: a test builds it with a Request and calls get() or post()."""

    def __init__(self, request: Request | None = None) -> None:
        self.request = request or Request()
        self.response = Response()
        self.redirected_to: str | None = None

    def redirect(self, uri: str) -> None:
        self.redirected_to = uri

    def error(self, status: int) -> None:
        self.response.set_status(status)


def _webapp2() -> types.ModuleType:
    module = types.ModuleType("webapp2")
    module.RequestHandler = RequestHandler  # type: ignore[attr-defined]
    module.WSGIApplication = lambda *args, **kwargs: ("wsgi-app", args)  # type: ignore[attr-defined]
    return module


class _Template:
    def __init__(self, name: str) -> None:
        self.name = name

    def render(self, values: dict[str, Any]) -> str:
        return f"<{self.name}>"


class _Environment:
    def __init__(self, loader: Any = None) -> None:
        self.loader = loader

    def get_template(self, name: str) -> _Template:
        return _Template(name)


def _jinja2() -> types.ModuleType:
    module = types.ModuleType("jinja2")
    module.Environment = _Environment  # type: ignore[attr-defined]
    module.FileSystemLoader = lambda path: ("loader", path)  # type: ignore[attr-defined]
    return module


class _Flask:
    def __init__(self, name: str) -> None:
        self.name = name
        self.routes: dict[str, View] = {}

    def route(self, rule: str, **options: Any) -> Callable[[View], View]:
        def register(view: View) -> View:
            self.routes[rule] = view
            return view

        return register


def _flask() -> types.ModuleType:
    module = types.ModuleType("flask")
    module.Flask = _Flask  # type: ignore[attr-defined]
    module.render_template = lambda name, **context: (name, context)  # type: ignore[attr-defined]
    module.request = Request(remote_addr="127.0.0.1", user_agent="test")  # type: ignore[attr-defined]
    return module


class SubscriptionController:
    """The Blue Alliance's subscription controller: records each call and answers from a
    script of outcomes (True, False, or an exception to raise), True once it runs out."""

    outcomes: ClassVar[list[Any]] = []
    calls: ClassVar[list[tuple[str, Any, Any]]] = []

    @classmethod
    def _next(cls, call: str, user_id: Any, token: Any) -> bool:
        cls.calls.append((call, user_id, token))
        outcome = cls.outcomes.pop(0) if cls.outcomes else True
        if isinstance(outcome, BaseException):
            raise outcome
        return bool(outcome)

    @classmethod
    def update_token(cls, user_id: Any, token: Any) -> bool:
        return cls._next("update_token", user_id, token)

    @classmethod
    def update_subscriptions(cls, user_id: Any) -> bool:
        return cls._next("update_subscriptions", user_id, None)


def _validate_is_string(**kwargs: Any) -> None:
    for name, value in kwargs.items():
        if not isinstance(value, str) or not value:
            raise ValueError(f"{name} must be a non-empty string")


def _tbans() -> dict[str, types.ModuleType]:
    names = (
        "tbans",
        "tbans.utils",
        "tbans.utils.validation_utils",
        "tbans.controllers",
        "tbans.controllers.subscription_controller",
    )
    modules = {name: types.ModuleType(name) for name in names}
    validation = modules["tbans.utils.validation_utils"]
    validation.validate_is_string = _validate_is_string  # type: ignore[attr-defined]
    controller = modules["tbans.controllers.subscription_controller"]
    controller.SubscriptionController = SubscriptionController  # type: ignore[attr-defined]
    return modules


def _chunk_generator(iterable: Any, chunk_size: int = 1000) -> Iterator[Any]:
    # titan/common/utils.py chunk_generator (Apache-2.0), xrange read as range.
    for i in range(0, len(iterable), chunk_size):
        yield iterable[i : i + chunk_size]


def _split_path(path: str) -> list[str]:
    # titan/common/utils.py split_path (Apache-2.0).
    if path == "/":
        return []
    path = os.path.split(path)[0]
    return [*_split_path(path), path]


def _titan() -> dict[str, types.ModuleType]:
    names = ("titan", "titan.common", "titan.common.utils")
    modules = {name: types.ModuleType(name) for name in names}
    utils = modules["titan.common.utils"]
    utils.chunk_generator = _chunk_generator  # type: ignore[attr-defined]
    utils.split_path = _split_path  # type: ignore[attr-defined]
    modules["titan.common"].utils = utils  # type: ignore[attr-defined]
    return modules


@contextmanager
def installed() -> Iterator[None]:
    """The stand-ins importable under the clients' module names, for the duration."""
    modules = {"webapp2": _webapp2(), "jinja2": _jinja2(), "flask": _flask()}
    modules |= _tbans() | _titan()
    saved = {name: sys.modules.get(name) for name in modules}
    sys.modules.update(modules)
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
