"""`pullqueue console`: the web console for a backend's pull queues, served until Ctrl-C.

The command checks the listen address and the token, binds the port itself (so a port in use is
one line, not a server's traceback) and serves with `pullqueue.console.server`.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from types import FrameType

import click

from pullqueue import listen as listen_module
from pullqueue.cli.base import (
    EXIT_STATUS_HELP,
    EXIT_USAGE,
    Command,
    bind_listen,
    connect_backend,
    fail,
    listen_address,
    url_option,
)

DEFAULT_LISTEN = "127.0.0.1:8080"
INSTALL_HINT = "the console needs its extra: pip install 'pullqueue[console]'"


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGTERM ends the console as Ctrl-C does (uvicorn shuts down first, then re-raises it)."""
    raise KeyboardInterrupt


def read_token(token_file: Path | None) -> str | None:
    """The token from --token-file, else env PULLQUEUE_CONSOLE_TOKEN; refuses a short one."""
    from pullqueue.console.security import TOKEN_ENV

    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise click.BadParameter(
                f"cannot read {str(token_file)!r}: {exc.strerror}", param_hint="'--token-file'"
            ) from exc
        where = "'--token-file'"
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
        where = TOKEN_ENV
    if not token:
        return None
    if len(token) < 16:
        raise click.BadParameter(
            "the token must be at least 16 characters (make one with `openssl rand -hex 24`)",
            param_hint=where,
        )
    return token


@click.command(
    "console",
    cls=Command,
    epilog="""\b
Examples:
  pullqueue console --url pubsub://my-project
  pullqueue console --url pubsub://my-project --read-only
  pullqueue console --url pubsub://my-project --metrics http://worker-1:9464/metrics
  pullqueue console --url pubsub://my-project --listen 0.0.0.0:8080 --token-file token.txt

\b
On a non-loopback address the console needs a token (--token-file, or env
PULLQUEUE_CONSOLE_TOKEN); open it once as http://HOST:PORT/?token=TOKEN.

"""
    + EXIT_STATUS_HELP
    + "\nHere 0 is also how the console ends on SIGTERM or Ctrl-C, once it has shut down.",
)
@url_option()
@click.option(
    "--listen",
    default=DEFAULT_LISTEN,
    show_default=True,
    metavar="HOST:PORT",
    help="Address to serve on; anything but loopback needs a token.",
)
@click.option(
    "--read-only", is_flag=True, help="Show everything, change nothing: no delete or purge."
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="File holding the token each request must carry [default: PULLQUEUE_CONSOLE_TOKEN].",
)
@click.option(
    "--metrics",
    "metrics",
    multiple=True,
    metavar="URL",
    help="A worker's Prometheus endpoint (pullqueue work --metrics-port), for leases and"
    " completions per minute where the backend counts none (Pub/Sub); repeat per worker.",
)
def console(
    url: str | None,
    listen: str,
    read_only: bool,
    token_file: Path | None,
    metrics: tuple[str, ...],
) -> None:
    """Serve a web console of the backend's pull queues: every queue with its backlog, oldest
    task, dead letters, leases and completions per minute and an hour's backlog plot; a page per
    queue with its tasks by tag, its dead letters, and delete, purge and redrive behind a typed
    confirmation.

    Figures are the ones `pullqueue stats` prints and refresh every few seconds. On Pub/Sub a look
    at the tasks costs each shown task a delivery attempt, so the task list refreshes only when
    asked.
    """
    host, port = listen_address(listen, "--listen", DEFAULT_LISTEN)
    token = read_token(token_file)
    for endpoint in metrics:
        if not endpoint.startswith(("http://", "https://")):
            raise click.BadParameter(
                f"{endpoint!r} is not an http(s) URL, for example http://10.0.0.5:9464/metrics",
                param_hint="'--metrics'",
            )
    try:
        from pullqueue.console import create_app
        from pullqueue.console.app import loopback_hosts
        from pullqueue.console.server import serve
    except ImportError as exc:
        fail(f"{INSTALL_HINT} ({exc})", EXIT_USAGE)
    loopback = listen_module.is_loopback(host)
    if not loopback and token is None:
        raise click.UsageError(
            f"--listen {listen} is reachable from other machines: give a token with --token-file"
            " FILE or env PULLQUEUE_CONSOLE_TOKEN (or listen on 127.0.0.1)"
        )
    sock = bind_listen(host, port)
    backend = connect_backend(url, memory_warning=True)
    try:
        app = create_app(
            backend,
            read_only=read_only,
            token=token,
            allowed_hosts=loopback_hosts() if loopback else None,
            metrics=list(metrics),
        )
        url_shown = listen_module.http_url(sock)
        click.echo(
            f"pullqueue console for {backend.url} at {url_shown}"
            + (" (read-only)" if read_only else "")
            + (f" - open it once as {url_shown}?token=TOKEN" if token else "")
            + "; Ctrl-C to stop",
            err=True,
        )
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            serve(app, sock)
        except KeyboardInterrupt:
            pass  # uvicorn has shut down: a signal is the console's normal end (exit 0)
        finally:
            signal.signal(signal.SIGTERM, previous)
    finally:
        sock.close()
        backend.close()
