"""`pullqueue bridge`: serve the App Engine taskqueue API to unmodified apps, on any backend.

The command parses options, checks the listen address and the ticket, connects the backend and
runs `pullqueue.bridge.serve` until SIGTERM; the bridge itself lives in `pullqueue.bridge`.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import click

from pullqueue.cli.base import (
    EXIT_STATUS_HELP,
    EXIT_USAGE,
    Command,
    Count,
    FiniteFloat,
    bind_listen,
    connect_backend,
    fail,
    listen_address,
    serve_metrics,
    url_option,
)
from pullqueue.config import Settings
from pullqueue.listen import is_loopback

TICKET_ENV = "PULLQUEUE_BRIDGE_TICKET"


@click.command(
    "bridge",
    cls=Command,
    epilog="""\b
Examples:
  pullqueue bridge --url pubsub://my-project
  API_HOST=127.0.0.1 API_PORT=10001 python main.py      # the app, unchanged
  pullqueue bridge --url pubsub://my-project --upstream appengine.googleapis.internal:10001
  pullqueue bridge --listen 0.0.0.0:10001 --ticket-file /secrets/ticket --metrics-port 9464
  pullqueue bridge --url pubsub://my-project --app-id my-app --default-deadline 10

"""
    + EXIT_STATUS_HELP
    + """
Here 0 means it stopped cleanly on SIGTERM or SIGINT (calls in flight finished, the
backend closed), 1 that it could not serve (the message says why).""",
)
@url_option()
@click.option(
    "--listen",
    metavar="HOST:PORT",
    default="127.0.0.1:10001",
    show_default=True,
    help="Address to serve /rpc_http and /healthz on; an address other than loopback needs a"
    f" ticket (--ticket-file or env {TICKET_ENV}).",
)
@click.option(
    "--upstream",
    metavar="HOST:PORT",
    help="Forward calls to other services (datastore, memcache, ...) unchanged to this service"
    " bridge, e.g. appengine.googleapis.internal:10001 [default: answer them with an error].",
)
@click.option(
    "--sweep-period",
    type=FiniteFloat(0, 86400),
    metavar="SECONDS",
    help="With --upstream: sweep the transactional outbox of the app through it this often; 0"
    " turns it off [default: env PULLQUEUE_SWEEP_PERIOD_SECONDS, else 300].",
)
@click.option(
    "--ticket-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help=f"File holding the security ticket every call must carry [default: env {TICKET_ENV},"
    " else none (loopback only)].",
)
@click.option(
    "--metrics-port",
    type=Count(0, 65535),
    metavar="PORT",
    help="Serve Prometheus metrics on this port at /metrics; needs the metrics extra: pip"
    " install 'pullqueue[metrics]'.",
)
@click.option(
    "--default-deadline",
    type=FiniteFloat(0, 3600, min_open=True),
    default=60.0,
    show_default=True,
    metavar="SECONDS",
    help="Deadline of a call whose request names none (Python 2.7's remote_api_stub never"
    " does; the other SDKs always do): past it the call fails with DeadlineExceededError.",
)
@click.option(
    "--app-id",
    default=lambda: os.environ.get("GOOGLE_CLOUD_PROJECT") or "pullqueue-bridge",
    show_default="env GOOGLE_CLOUD_PROJECT, else pullqueue-bridge",
    help="App id answered to remote_api_stub.ConfigureRemoteApi(None, ...) (Python 2.7).",
)
def bridge(
    url: str | None,
    listen: str,
    upstream: str | None,
    sweep_period: float | None,
    ticket_file: Path | None,
    metrics_port: int | None,
    default_deadline: float,
    app_id: str,
) -> None:
    """Serve the App Engine taskqueue API at http://HOST:PORT/rpc_http, on a pullqueue backend.

    Apps keep their code and their SDK (Python appengine-python-standard, Go
    google.golang.org/appengine; Python 2.7's 1.9.x SDK through its remote_api_stub at
    /_ah/remote_api or /rpc_http): point API_HOST and API_PORT at the bridge and their
    lease_tasks / LeaseByTag / delete calls reach the backend, with the legacy semantics and
    errors. One bridge per worker instance (a sidecar) is the intended shape.

    With --upstream, transactional adds are staged in the app's datastore transaction and
    published when it commits; the bridge then sweeps what a crash left staged every
    --sweep-period.
    """
    try:
        from pullqueue.bridge import Bridge, serve
    except ImportError as exc:
        fail(f"the bridge needs its extra: pip install 'pullqueue[bridge]' ({exc})", EXIT_USAGE)
    host, port = listen_address(listen, "--listen", "127.0.0.1:10001")
    if upstream is not None:
        listen_address(upstream, "--upstream", "appengine.googleapis.internal:10001")
    ticket = _ticket(ticket_file)
    if ticket is None and not is_loopback(host):
        raise click.UsageError(
            f"--listen {listen} is reachable from other machines: give a ticket every call must"
            f" carry (--ticket-file FILE or env {TICKET_ENV}), or listen on 127.0.0.1"
        )
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    sock = bind_listen(host, port)
    try:
        endpoint = serve_metrics(metrics_port) if metrics_port is not None else None
    except click.UsageError:
        sock.close()
        raise
    backend = connect_backend(url, shared=True)
    try:
        if sweep_period is None:
            sweep_period = Settings().sweep_period_seconds
        server = Bridge(
            backend,
            ticket=ticket,
            upstream=upstream,
            sweep_period=sweep_period,
            default_deadline=default_deadline,
            app_id=app_id,
        )

        def ready(bound: int) -> None:
            shown = f"[{host}]" if ":" in host else host
            click.echo(
                f"pullqueue bridge: serving taskqueue at http://{shown}:{bound}/rpc_http on"
                f" {backend.url} (apps: API_HOST={host} API_PORT={bound})"
                + (f"; metrics at :{endpoint.port}/metrics" if endpoint is not None else ""),
                err=True,
            )

        drained = serve(server, sock, on_ready=ready)
    finally:
        sock.close()
        backend.close()
        if endpoint is not None:
            endpoint.close()
    if not drained:
        fail("calls still in flight after the 30 s grace period were cut off; backend closed")
    click.echo("pullqueue bridge: stopped (calls in flight finished, backend closed)", err=True)


def _ticket(path: Path | None) -> str | None:
    """The ticket from --ticket-file, else env PULLQUEUE_BRIDGE_TICKET, else None."""
    if path is not None:
        try:
            text = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise click.BadParameter(
                f"cannot read {str(path)!r}: {exc}", param_hint="'--ticket-file'"
            ) from None
        if not text:
            raise click.BadParameter(f"{str(path)!r} is empty", param_hint="'--ticket-file'")
        return text
    text = os.environ.get(TICKET_ENV, "").strip()
    return text or None
