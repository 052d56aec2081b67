"""URL-scheme registry: `connect(url)` turns a URL into a backend, as fsspec's protocols do.

Built-in schemes load their adapter lazily so an optional backend's dependencies are needed only
when it is used; `register()` lets a user plug in their own scheme.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import SplitResult, urlsplit

from pullqueue.adapters.base import Backend
from pullqueue.config import Settings
from pullqueue.errors import ConfigurationError

BackendFactory = Callable[[SplitResult, dict[str, Any]], Backend]

_BUILTIN: dict[str, tuple[str, str]] = {
    "memory": ("pullqueue.adapters.memory", ""),
    "pubsub": ("pullqueue.adapters.pubsub", "pubsub"),
    "cloudtasks": ("pullqueue.adapters.cloudtasks", "cloudtasks"),
    "appengine": ("pullqueue.adapters.appengine", "appengine"),
}
_registered: dict[str, BackendFactory] = {}
_plugins: set[str] = set()
_defaults: dict[str, Backend] = {}
_by_variable: dict[str | None, Backend] = {}
"""Value of PULLQUEUE_URL (None when unset) -> the process-wide backend it selected."""
_URL_VARIABLE = "PULLQUEUE_URL"
_lock = threading.Lock()


def register(scheme: str, factory: BackendFactory) -> None:
    """Make `connect('SCHEME://...')` build a backend with factory(parsed_url, options)."""
    _registered[scheme] = factory


def known_schemes() -> list[str]:
    """Every scheme connect() accepts, built-in and registered."""
    return sorted(set(_BUILTIN) | set(_registered))


def load_plugins(modules: str) -> None:
    """Import each comma-separated module once (env PULLQUEUE_PLUGINS); a plugin module calls
    register() when imported, so its schemes work in every command, subprocesses included."""
    for name in (part.strip() for part in modules.split(",")):
        if name and name not in _plugins:
            try:
                importlib.import_module(name)
            except ImportError as exc:
                raise ConfigurationError(
                    f"plugin module {name!r} (PULLQUEUE_PLUGINS) cannot be imported: {exc}"
                ) from exc
            _plugins.add(name)


def _factory(scheme: str) -> BackendFactory:
    if scheme in _registered:
        return _registered[scheme]
    if scheme not in _BUILTIN:
        raise ConfigurationError(
            f"unknown URL scheme {scheme!r}; known schemes: "
            + ", ".join(f"{s}://" for s in known_schemes())
        )
    module_name, extra = _BUILTIN[scheme]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(
            f"the {scheme}:// backend needs extra dependencies: pip install 'pullqueue[{extra}]'"
            f" ({exc})"
        ) from exc
    factory: BackendFactory = module.from_url
    return factory


def connect(url: str | None = None, **options: Any) -> Backend:
    """A new backend for url (default: Settings().url, env PULLQUEUE_URL, else memory://)."""
    settings = Settings()
    url = url or settings.url
    if not isinstance(url, str) or "://" not in url:
        raise ConfigurationError(
            f"malformed backend URL {url!r}: expected SCHEME://..., known schemes: "
            + ", ".join(f"{s}://" for s in known_schemes())
        )
    load_plugins(settings.plugins)
    parsed = urlsplit(url)
    options.setdefault("settings", settings)
    return _factory(parsed.scheme)(parsed, options)


def default_backend() -> Backend:
    """The process-wide backend for the configured URL, created on first use.

    Legacy workers build a Queue per request, so this is on their hot path: the backend is
    looked up by the value of `PULLQUEUE_URL` as the environment holds it now (one dictionary
    read), and Settings are parsed only the first time a value is seen.
    """
    key = os.environ.get(_URL_VARIABLE)
    backend = _by_variable.get(key)
    if backend is not None:
        return backend
    url = Settings().url
    with _lock:
        if url not in _defaults:
            _defaults[url] = connect(url)
        backend = _by_variable[key] = _defaults[url]
        return backend


def reset_default_backends() -> None:
    """Close and forget process-wide backends (tests, and services that change PULLQUEUE_URL)."""
    with _lock:
        for backend in _defaults.values():
            backend.close()
        _defaults.clear()
        _by_variable.clear()
