"""What every `pullqueue` subcommand shares: exit codes, common options and error handling.

A command module declares its click command with `cls=Command`; an error the command does not
handle itself then ends as one line on stderr and a documented exit code, with the traceback
only under `--debug`, so every command fails the same way.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

from pullqueue.errors import ConfigurationError, Error

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
        except Exception as exc:
            fail(
                f"unexpected {type(exc).__name__}: {exc} (run again with --debug for the"
                " traceback)",
                EXIT_FAILED,
            )


class Group(click.Group):
    """The `pullqueue` group: `--debug` accepted before the subcommand too."""

    command_class = Command

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.append(debug_option())


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
