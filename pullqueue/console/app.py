"""The console's web application: Starlette routes over one backend, rendered with Jinja2.

Pages are server-rendered and work without JavaScript; htmx refreshes the figures in place and a
few lines of glue draw the backlog plots (uPlot), both served from this package, never a CDN.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from pullqueue import __version__
from pullqueue.adapters.base import Backend
from pullqueue.console import actions, params
from pullqueue.console.figures import Figure
from pullqueue.console.listing import (
    LOOK_LIMIT,
    PAGE_SIZE,
    TaskPage,
    can_page,
    dead_letters,
    is_pubsub,
    pubsub_look,
    task_page,
)
from pullqueue.console.operations import OPERATIONS
from pullqueue.console.sampler import Sampler
from pullqueue.console.security import CSRF_FIELD, CsrfGuard, TokenGate
from pullqueue.console.taskpages import TaskPages
from pullqueue.console.workers import WorkerMetrics
from pullqueue.errors import Error
from pullqueue.inspection import iso, pause_state, preview, safe
from pullqueue.listen import LOOPBACK_HOSTS
from pullqueue.monitoring import BacklogReader
from pullqueue.queue import validate_queue_name

log = logging.getLogger(__name__)

HERE = Path(__file__).parent
POLL_SECONDS = 5
"""How often an open page asks for fresh figures."""


def _age(seconds: float) -> str:
    ahead = seconds < 0
    seconds = abs(seconds)
    if seconds < 120:
        text = f"{seconds:,.0f} s"
    elif seconds < 7200:
        text = f"{seconds / 60:,.1f} min"
    elif seconds < 172800:
        text = f"{seconds / 3600:,.1f} h"
    else:
        text = f"{seconds / 86400:,.1f} d"
    return f"in {text}" if ahead else text


def show(figure: Figure, kind: str = "count") -> str:
    """A figure as text: its value, or 'unknown' (the template shows the reason beside it)."""
    if figure.value is None:
        return "unknown"
    if kind == "age":
        text = _age(float(figure.value))
    elif kind == "rate":
        text = f"{figure.value:,.0f}/min"
    else:
        text = f"{figure.value:,.0f}"
    return text if figure.exact else f"~{text}"


class Notes:
    """The reasons for a table's unknown figures, each said once under it: a cell shows the
    reason's number (and the whole reason on hover), however many cells share it."""

    def __init__(self) -> None:
        self._numbers: dict[str, int] = {}

    def mark(self, reason: str) -> int:
        return self._numbers.setdefault(reason, len(self._numbers) + 1)

    def items(self) -> list[tuple[int, str]]:
        return [(number, reason) for reason, number in self._numbers.items()]


def queue_path(queue: str) -> str:
    return "/queues/" + quote(queue, safe="")


def _templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters.update(show=show, iso=iso, preview=preview, safe_text=safe, queue_path=queue_path)
    env.globals.update(version=__version__, poll_seconds=POLL_SECONDS, age=_age, Notes=Notes)
    return env


class Console:
    """The routes, bound to one backend, its sampler and the console's options."""

    def __init__(
        self, backend: Backend, sampler: Sampler, *, read_only: bool, token_gate: bool = False
    ) -> None:
        self.backend = backend
        self.sampler = sampler
        self.read_only = read_only
        self.ignored_params = ("token",) if token_gate else ()
        self.csrf = CsrfGuard()
        self.env = _templates()

    # Rendering

    def render(
        self, request: Request, template: str, status_code: int = 200, **context: Any
    ) -> Response:
        context.update(
            backend_url=self.backend.url,
            read_only=self.read_only,
            csrf=self.csrf.token(request),
            csrf_field=CSRF_FIELD,
            pubsub=is_pubsub(self.backend),
        )
        html = self.env.get_template(template).render(**context)
        return self.csrf.remember(request, HTMLResponse(html, status_code=status_code))

    def error(self, request: Request, status: int, message: str) -> Response:
        return self.render(request, "message.html", status, title=str(status), message=message)

    def query(
        self, request: Request, json: bool = False, **readers: params.Reader
    ) -> dict[str, Any] | Response:
        """The request's query parameters read strictly (see `params`), or the 400 to answer:
        a page naming the parameter, or for JSON {"error", "parameter"}."""
        try:
            return params.read_query(
                request.scope.get("query_string", b""), readers, ignored=self.ignored_params
            )
        except params.BadParameter as exc:
            if json:
                return JSONResponse({"error": str(exc), "parameter": exc.parameter}, 400)
            return self.error(request, 400, f"{exc}; nothing was changed")

    async def known_queue(self, request: Request) -> str | Response:
        """The queue named in the path, or an error page when the backend has no such queue."""
        queue = str(request.path_params["queue"])
        try:
            validate_queue_name(queue)
        except Error as exc:
            return self.error(request, 404, str(exc))
        if self.sampler.can_list:
            await run_in_threadpool(self.sampler.fresh)
            if queue not in self.sampler.queues():
                await run_in_threadpool(self.sampler.read)
            if queue not in self.sampler.queues():
                return self.error(request, 404, f"{self.backend.url} has no queue named {queue!r}")
        elif queue not in self.sampler.queues():
            # A backend that cannot list: the queue is watched from its first visit on.
            self.sampler.watch(queue)
            await run_in_threadpool(self.sampler.read)
        return queue

    # Pages

    async def posted(self, request: Request) -> tuple[str, FormData] | Response:
        """A POST to a queue's page: the queue and the form once the queue is known and the
        CSRF check passed, else the error page to answer with."""
        queue = await self.known_queue(request)
        if isinstance(queue, Response):
            return queue
        query = self.query(request)
        if isinstance(query, Response):
            return query
        form = await request.form()
        problem = self.csrf.problem(request, _text(form.get(CSRF_FIELD)))
        if problem is not None:
            return self.error(request, 403, problem)
        return queue, form

    async def queues(self, request: Request) -> Response:
        query = self.query(request)
        if isinstance(query, Response):
            return query
        await run_in_threadpool(self.sampler.fresh)
        return self.render(request, "queues.html", **self._queue_rows())

    async def go(self, request: Request) -> Response:
        """The "open a queue by name" form: on to that queue's page."""
        query = self.query(request, q=params.queue_name)
        if isinstance(query, Response):
            return query
        if "q" not in query:
            return self.error(request, 400, "bad parameter 'q': give a queue's name")
        return RedirectResponse(queue_path(query["q"]), status_code=303)

    async def queue_rows(self, request: Request) -> Response:
        query = self.query(request)
        if isinstance(query, Response):
            return query
        await run_in_threadpool(self.sampler.fresh)
        return self.render(request, "_queue_rows.html", **self._queue_rows())

    def _queue_rows(self) -> dict[str, Any]:
        names = self.sampler.queues()
        return {
            "rows": [(q, self.sampler.latest(q)) for q in names],
            "can_list": self.sampler.can_list,
            "listing_error": self.sampler.listing_error,
        }

    async def queue(self, request: Request) -> Response:
        queue = await self.known_queue(request)
        if isinstance(queue, Response):
            return queue
        query = self.query(request, tag=params.tag, after=params.cursor)
        if isinstance(query, Response):
            return query
        tag: str | None = query.get("tag")
        after: tuple[float, str] | None = query.get("after")
        if after is not None and not can_page(self.backend):
            return self.error(
                request, 400, f"bad parameter 'after': {self.backend.url} lists no pages of tasks"
            )
        page: TaskPage = await run_in_threadpool(
            task_page, self.backend, queue, tag=tag, after=after
        )
        await run_in_threadpool(self.sampler.fresh)
        paused, paused_since = await run_in_threadpool(pause_state, self.backend, queue)
        return self.render(
            request,
            "queue.html",
            queue=queue,
            paused=paused,
            paused_since=paused_since,
            figures=self.sampler.latest(queue),
            page=page,
            tag=tag,
            after=after,
            page_size=PAGE_SIZE,
            look_limit=LOOK_LIMIT,
        )

    async def queue_figures(self, request: Request) -> Response:
        queue = await self.known_queue(request)
        if isinstance(queue, Response):
            return queue
        query = self.query(request, part=params.one_of("subscriptions"))
        if isinstance(query, Response):
            return query
        await run_in_threadpool(self.sampler.fresh)
        part = "_subscriptions.html" if query.get("part") else "_figures.html"
        return self.render(request, part, queue=queue, figures=self.sampler.latest(queue))

    async def dead_letters(self, request: Request) -> Response:
        queue = await self.known_queue(request)
        if isinstance(queue, Response):
            return queue
        query = self.query(request)
        if isinstance(query, Response):
            return query
        found = await run_in_threadpool(dead_letters, self.backend, queue)
        return self.render(request, "_dead_letters.html", queue=queue, dead=found)

    async def look(self, request: Request) -> Response:
        """A look at a Pub/Sub queue's tasks: a POST, since each look costs a delivery attempt."""
        posted = await self.posted(request)
        if isinstance(posted, Response):
            return posted
        queue, form = posted
        if not is_pubsub(self.backend):
            return self.error(
                request,
                404,
                f"a look is for Pub/Sub, which lists no tasks; {self.backend.url} shows them on"
                " the queue's page",
            )
        try:
            tag = params.tag(_text(form.get("tag")))
        except ValueError as exc:
            return self.error(request, 400, f"bad field 'tag': {exc}")
        page = await run_in_threadpool(pubsub_look, self.backend, queue, tag=tag, limit=LOOK_LIMIT)
        return self.render(request, "_tasks.html", queue=queue, page=page, tag=tag, after=None)

    # API (JSON, for scripts and tests)

    async def api_queues(self, request: Request) -> Response:
        query = self.query(request, json=True)
        if isinstance(query, Response):
            return query
        await run_in_threadpool(self.sampler.fresh)
        return JSONResponse(
            {
                "backend": self.backend.url,
                "queues": [
                    f.as_dict()
                    for f in (self.sampler.latest(q) for q in self.sampler.queues())
                    if f is not None
                ],
            }
        )

    async def api_queue(self, request: Request) -> Response:
        queue = await self.known_queue(request)
        if isinstance(queue, Response):
            return JSONResponse({"error": f"no queue {request.path_params['queue']!r}"}, 404)
        query = self.query(request, json=True)
        if isinstance(query, Response):
            return query
        await run_in_threadpool(self.sampler.fresh)
        figures = self.sampler.latest(queue)
        return JSONResponse(None if figures is None else figures.as_dict())

    async def api_backlog(self, request: Request) -> Response:
        """Each queue's backlog over the last hour: {queue: [[times], [backlogs or null]]}."""
        query = self.query(request, json=True)
        if isinstance(query, Response):
            return query
        out: dict[str, list[list[float | None]]] = {}
        for queue in self.sampler.queues():
            points = self.sampler.history(queue)
            out[queue] = [[p[0] for p in points], [p[1] for p in points]]
        return JSONResponse(out)

    # Actions

    async def act(self, request: Request) -> Response:
        """Delete a task, purge the queue, redrive or purge dead letters: after the CSRF check
        and the typed queue name, never under --read-only."""
        if self.read_only:
            return self.error(request, 403, "this console is read-only: actions are disabled")
        posted = await self.posted(request)
        if isinstance(posted, Response):
            return posted
        queue, form = posted
        confirm = _text(form.get("confirm"))
        if confirm != queue:
            return self.error(
                request,
                400,
                f"type the queue's name ({queue!r}) to confirm; nothing was changed",
            )
        action = request.path_params["action"]
        work: Callable[[], str]
        if action == "delete-task":
            name = _text(form.get("name"))
            sub = _text(form.get("subscription")) or None
            mid = _text(form.get("message_id")) or None
            work = lambda: actions.delete_task(  # noqa: E731
                self.backend, queue, name, subscription=sub, message_id=mid
            )
        elif action == "purge":
            work = lambda: actions.purge_queue(self.backend, queue)  # noqa: E731
        elif action == "redrive-dead-letters":
            work = lambda: actions.redrive_dead_letters(self.backend, queue)  # noqa: E731
        elif action == "purge-dead-letters":
            work = lambda: actions.purge_dead_letters(self.backend, queue)  # noqa: E731
        elif action in OPERATIONS:
            fields = {key: _text(value) for key, value in form.items()}
            work = lambda: OPERATIONS[action](self.backend, queue, fields)  # noqa: E731
        else:
            return self.error(request, 404, f"no action {action!r}")
        try:
            said = await run_in_threadpool(work)
        except Error as exc:
            return self.error(request, 409, str(exc))
        log.info("console action %s on queue %r: %s", action, queue, said)
        await run_in_threadpool(self.sampler.read)
        return self.render(request, "done.html", queue=queue, message=said)


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def create_app(
    backend: Backend,
    *,
    read_only: bool = False,
    token: str | None = None,
    allowed_hosts: list[str] | None = None,
    period: float | None = None,
    reader: Callable[[str], BacklogReader] = BacklogReader,
    metrics: list[str] | None = None,
    sample_in_background: bool = True,
) -> Starlette:
    """The console for `backend`. `token`: required on every request when set; `allowed_hosts`:
    the Host headers accepted (default: any); `period`: seconds between figure readings;
    `metrics`: the workers' Prometheus endpoints, for leases and completions on backends that
    count neither."""
    workers = WorkerMetrics(metrics, backend.url) if metrics else None
    sampler = Sampler(backend, period=period, reader=reader, workers=workers)
    console = Console(backend, sampler, read_only=read_only, token_gate=token is not None)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        if sample_in_background:
            sampler.start()
        try:
            yield
        finally:
            sampler.stop()

    routes = [
        Route("/", console.queues),
        Route("/go", console.go),
        Route("/fragments/queues", console.queue_rows),
        Route("/api/queues", console.api_queues),
        Route("/api/backlog", console.api_backlog),
        Route("/api/queues/{queue}", console.api_queue),
        Route("/queues/{queue}", console.queue),
        Route("/queues/{queue}/figures", console.queue_figures),
        Route("/queues/{queue}/dead-letters", console.dead_letters),
        Route("/queues/{queue}/look", console.look, methods=["POST"]),
        *TaskPages(console).routes(),
        Route("/queues/{queue}/{action}", console.act, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    middleware = []
    if allowed_hosts is not None:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts))
    if token is not None:
        middleware.append(Middleware(TokenGate, token=token))
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.console = console
    return app


def loopback_hosts() -> list[str]:
    """The Host headers a loopback console accepts (a DNS-rebinding page sends its own)."""
    return list(LOOPBACK_HOSTS)
