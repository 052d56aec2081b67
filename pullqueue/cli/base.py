"""What every `pullqueue` subcommand shares: exit codes, common options and error handling.

A command module declares its click command with `cls=Command`; an error the command does not
handle itself then ends as one line on stderr and a documented exit code, with the traceback
only under `--debug`, so every command fails the same way.
"""

from __future__ import annotations

import importlib
import math
import os
import socket
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click
import pydantic

from pullqueue.adapters.base import Backend
from pullqueue.config import Settings
from pullqueue.errors import ConfigurationError, Error
from pullqueue.registry import connect, default_backend

if TYPE_CHECKING:
    from pullqueue.metrics import PrometheusEndpoint

EXIT_OK = 0
"""The command did what it was asked."""
EXIT_FAILED = 1
"""The command ran and failed, or left work it cannot account for (the message says what)."""
EXIT_USAGE = 2
"""Bad usage (an option, an argument, a URL, a path): nothing was changed."""
EXIT_INTERRUPTED = 130
"""SIGINT or SIGTERM cut the command short (128 + SIGINT); the work left is reported."""

EXIT_STATUS_HELP = (
    "\b\nExit status: 0 done, 1 failed (the message says what), 2 usage error (nothing was"
    "\nchanged), 130 interrupted (the work left is reported; run it again to finish)."
)

DEBUG_KEY = "pullqueue.debug"

F = TypeVar("F", bound=Callable[..., Any])


def debug_enabled(ctx: click.Context | None = None) -> bool:
    """Whether --debug (or env PULLQUEUE_DEBUG=1) asked for tracebacks."""
    ctx = ctx or click.get_current_context(silent=True)
    if ctx is not None and ctx.meta.get(DEBUG_KEY):
        return True
    return os.environ.get("PULLQUEUE_DEBUG", "").lower() in {"1", "true", "yes"}


def _set_debug(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.meta[DEBUG_KEY] = True


def debug_option() -> click.Option:
    """`--debug`: print the traceback of an error instead of one line."""
    return click.Option(
        ["--debug"],
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=_set_debug,
        help="On an error, print the full traceback (env PULLQUEUE_DEBUG=1 does the same).",
    )


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    """Print `Error: message` on stderr (with the traceback being handled under --debug) and
    exit with code."""
    if debug_enabled():
        trace = traceback.format_exc()
        if not trace.startswith("NoneType: None"):
            click.echo(trace, err=True, nl=False)
    click.echo(f"Error: {one_line(message)}", err=True)
    raise click.exceptions.Exit(code)


def one_line(text: str) -> str:
    """text on one line: the first line, or the lines joined when they continue a sentence."""
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


class Command(click.Command):
    """A click command with `--debug` and pullqueue's error handling: a pullqueue error is one
    line and exit 1 (2 for configuration), Ctrl-C is exit 130, anything else is one line naming
    the exception and pointing at --debug."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.append(debug_option())

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except KeyboardInterrupt:
            click.echo("\ninterrupted", err=True)
            raise click.exceptions.Exit(EXIT_INTERRUPTED) from None
        except ConfigurationError as exc:
            fail(str(exc), EXIT_USAGE)
        except Error as exc:
            fail(str(exc), EXIT_FAILED)
        except pydantic.ValidationError as exc:
            if exc.title != Settings.__name__:
                raise
            fail(_bad_setting(exc), EXIT_USAGE)
        except Exception as exc:
            fail(
                f"unexpected {type(exc).__name__}: {exc} (run again with --debug for the"
                " traceback)",
                EXIT_FAILED,
            )


def _bad_setting(exc: pydantic.ValidationError) -> str:
    """The environment variables Settings refused, each with its value and the rule it broke."""
    parts = []
    for error in exc.errors():
        name = f"PULLQUEUE_{str(error['loc'][0]).upper()}" if error["loc"] else "PULLQUEUE_*"
        parts.append(f"{name}={error.get('input')!r}: {error['msg']}")
    return f"bad environment variable {'; '.join(parts)}; fix or unset it"


class Group(click.Group):
    """The `pullqueue` group: `--debug` accepted before the subcommand too, and subcommands
    imported when named (`lazy`: name -> "module:attribute"), so a command imports only what
    it uses (`pullqueue work` none of the migration, demo or plan modules)."""

    command_class = Command

    def __init__(self, *args: Any, lazy: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.append(debug_option())
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            module, _, attribute = self.lazy[cmd_name].partition(":")
            command = getattr(importlib.import_module(module), attribute)
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)

    def every_command(self) -> dict[str, click.Command]:
        """Every subcommand by name, imported."""
        with click.Context(self) as ctx:
            found = {name: self.get_command(ctx, name) for name in self.list_commands(ctx)}
        return {name: command for name, command in found.items() if command is not None}


def url_option(help_text: str | None = None) -> Callable[[F], F]:
    """`--url URL`: the backend to talk to (default: env PULLQUEUE_URL, else memory://)."""
    return click.option(
        "--url",
        metavar="URL",
        help=help_text
        or "Backend URL: memory://, pubsub://PROJECT, cloudtasks://PROJECT/LOCATION, appengine://"
        " [default: env PULLQUEUE_URL, else memory://].",
    )


def json_option(help_text: str = "Print one JSON object instead of a table.") -> Callable[[F], F]:
    """`--json`: machine-readable output on stdout, for scripts."""
    return click.option("--json", "as_json", is_flag=True, help=help_text)


def _refuse_bool(
    kind: click.FloatRange | click.IntRange, value: Any, param: click.Parameter | None, ctx: Any
) -> None:
    if isinstance(value, bool):
        kind.fail(f"{value!r} is a boolean, not a number", param, ctx)


class FiniteFloat(click.FloatRange):
    """A finite number (seconds, a rate) within bounds: nan, inf and booleans are refused by the
    parser, naming the flag, before the command starts."""

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        _refuse_bool(self, value, param, ctx)
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return super().convert(number, param, ctx)


class Count(click.IntRange):
    """A whole number within bounds (tasks, threads, a port): booleans are refused too."""

    name = "integer"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        _refuse_bool(self, value, param, ctx)
        return super().convert(value, param, ctx)


class AliasedOption(click.Option):
    """An option with old spellings kept working but left out of --help and error messages:
    `@click.option("--batch-size", "--batch", cls=AliasedOption, aliases=["--batch"])`."""

    def __init__(self, *args: Any, aliases: tuple[str, ...] | list[str] = (), **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.aliases = frozenset(aliases)

    def _shown(self) -> list[str]:
        return [opt for opt in self.opts if opt not in self.aliases]

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        opts = self.opts
        self.opts = self._shown()
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = opts

    def get_error_hint(self, ctx: click.Context | None) -> str:
        return " / ".join(f"'{opt}'" for opt in self._shown())


def batch_size_option(default: int, help_text: str) -> Callable[[F], F]:
    """`--batch-size N` (old spelling `--batch`): tasks per lease call, 1 to 1000."""
    return click.option(
        "--batch-size",
        "--batch",
        "batch_size",
        cls=AliasedOption,
        aliases=["--batch"],
        type=Count(1, 1000),
        default=default,
        show_default=True,
        help=help_text,
    )


def lease_seconds_option(default: float, help_text: str) -> Callable[[F], F]:
    """`--lease-seconds S` (old spelling `--lease`): a lease, above 0 and at most one week."""
    return click.option(
        "--lease-seconds",
        "--lease",
        "lease_seconds",
        cls=AliasedOption,
        aliases=["--lease"],
        type=FiniteFloat(0, 604800, min_open=True),
        default=default,
        show_default=True,
        help=help_text,
    )


EMULATOR_PROBE_SECONDS = 5.0
"""How long a command waits for the Pub/Sub emulator to accept a connection before saying so."""


def connect_backend(
    url: str | None,
    *,
    option: str = "--url",
    memory_warning: bool = False,
    shared: bool = False,
    **options: Any,
) -> Backend:
    """connect(url) for a command (with `shared` and no url: the process-wide backend a handler
    module's own Queue() also uses): a bad URL is a usage error naming `option`; a Pub/Sub
    emulator that does not answer is one line saying so (not a hang, not gRPC's wording); with
    memory_warning, memory:// is pointed out as living in this process only."""
    try:
        backend = default_backend() if shared and not url else connect(url, **options)
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc), param_hint=f"'{option}'") from exc
    try:
        if backend.url.startswith("pubsub:"):
            check_emulator()
    except BaseException:
        backend.close()
        raise
    if memory_warning and backend.url.startswith("memory:"):
        click.echo(
            "Warning: memory:// lives in this process only: this command sees a queue of its own"
            " (empty unless this process fills it), not the one another process uses. Pass --url"
            " pubsub://PROJECT (or set PULLQUEUE_URL) to use a shared backend.",
            err=True,
        )
    return backend


def check_emulator(timeout: float = EMULATOR_PROBE_SECONDS) -> None:
    """With PUBSUB_EMULATOR_HOST set, fail in one line unless the emulator accepts a TCP
    connection within timeout seconds."""
    target = os.environ.get("PUBSUB_EMULATOR_HOST", "").strip()
    if not target:
        return
    host, _, port = target.rpartition(":")
    host = host.strip("[]") or "localhost"
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        fail(
            f"cannot reach the Pub/Sub emulator at {target}; is it running? ({reason}; start it"
            f" with `gcloud beta emulators pubsub start --host-port={target}`, or unset"
            " PUBSUB_EMULATOR_HOST to use Pub/Sub itself)",
            EXIT_FAILED,
        )


def check_writable_file(path: Path, option: str) -> None:
    """Refuse (usage error, nothing done yet) a file path the command could not write: a
    missing or read-only directory, or a directory where the file should be."""
    parent = path.parent if str(path.parent) else Path(".")
    problem = None
    if path.is_dir():
        problem = "is a directory"
    elif not parent.is_dir():
        problem = f"directory {str(parent)!r} does not exist"
    elif not os.access(parent, os.W_OK | os.X_OK):
        problem = f"directory {str(parent)!r} is not writable"
    elif path.exists() and not os.access(path, os.W_OK):
        problem = "is not writable"
    if problem is not None:
        raise click.BadParameter(f"{str(path)!r} {problem}", param_hint=f"'{option}'")


class OutputFile(click.Path):
    """A file the command will write: its directory must exist and be writable, checked by the
    parser so a bad path fails before anything moves."""

    def __init__(self) -> None:
        super().__init__(dir_okay=False, path_type=Path)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        path = super().convert(value, param, ctx)
        assert isinstance(path, Path)
        try:
            check_writable_file(path, param.opts[0] if param is not None else "PATH")
        except click.BadParameter as exc:
            self.fail(exc.message, param, ctx)
        return path


def serve_metrics(port: int) -> PrometheusEndpoint:
    """`--metrics-port`: Prometheus metrics on `port`, or a usage error saying what to do."""
    from pullqueue.metrics import serve_prometheus

    try:
        return serve_prometheus(port)
    except ImportError as exc:
        raise click.BadParameter(str(exc), param_hint="--metrics-port") from exc
    except OSError as exc:
        raise click.BadParameter(
            f"cannot serve metrics on port {port}: {exc.strerror or exc}; pick a free port",
            param_hint="--metrics-port",
        ) from exc


def listen_address(
    text: str, option: str = "--listen", example: str = "127.0.0.1:8080"
) -> tuple[str, int]:
    """A server's HOST:PORT option (--listen, --console-listen, --upstream) as (host, port), or a
    usage error naming the option."""
    from pullqueue.listen import parse_listen

    try:
        return parse_listen(text, example)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=f"'{option}'") from None


def bind_listen(host: str, port: int, option: str = "--listen") -> socket.socket:
    """The server's listening socket, or a usage error (exit 2) saying the address cannot be had,
    as the bridge, the console and --metrics-port all say it."""
    from pullqueue.listen import bind, shown

    try:
        return bind(host, port)
    except OSError as exc:
        raise click.BadParameter(
            f"cannot listen on {shown(host, port)}: {exc.strerror or exc}; pick a free address",
            param_hint=f"'{option}'",
        ) from None
