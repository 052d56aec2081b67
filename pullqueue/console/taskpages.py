"""The console's routes for one task and for finding tasks: a task's page, its payload, a search.

They sit beside the queue routes (pullqueue/console/app.py) and use the same rendering, queue
check and CSRF check; a search of a Pub/Sub queue is a POST, since each look costs a delivery
attempt per task, like the queue page's look.
"""

from __future__ import annotations

import base64
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from pullqueue.console import params
from pullqueue.console.taskview import (
    FIND_LOOK_LIMIT,
    find_task,
    find_tasks,
    is_pubsub,
    look_for,
    payload_view,
)
from pullqueue.inspection import TaskRow

if TYPE_CHECKING:
    from pullqueue.console.app import Console

_FILE_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def download_name(queue: str, name: str | None) -> str:
    """A file name for a payload download: only safe characters, never a path."""
    return _FILE_NAME_UNSAFE.sub("_", f"{queue}-{name or 'task'}")[:120] + ".bin"


def task_path(queue: str, name: str) -> str:
    """The address of a task's page."""
    return f"/queues/{quote(queue, safe='')}/task?name={quote(name, safe='')}"


def _field(form: FormData, field: str) -> str:
    value = form.get(field)
    return value if isinstance(value, str) else ""


class TaskPages:
    """The task and search routes of one console."""

    def __init__(self, console: Console) -> None:
        self.console = console
        console.env.globals["find_look_limit"] = FIND_LOOK_LIMIT

    def routes(self) -> list[Route]:
        return [
            Route("/queues/{queue}/task", self.task),
            Route("/queues/{queue}/task/payload", self.payload),
            Route("/queues/{queue}/find", self.find, methods=["GET", "POST"]),
        ]

    def _name(self, request: Request) -> str | Response:
        """The task's name from the query, read strictly (`params.task_name`)."""
        query = self.console.query(request, name=params.task_name)
        if isinstance(query, Response):
            return query
        if "name" not in query:
            return self.console.error(
                request, 400, "bad parameter 'name': give the task's name (?name=NAME)"
            )
        return str(query["name"])

    def _render_task(
        self, request: Request, queue: str, row: TaskRow, *, note: str | None, href: str
    ) -> Response:
        return self.console.render(
            request,
            "task.html",
            queue=queue,
            row=row,
            payload=payload_view(row.payload),
            note=note,
            now=self.console.backend.now(),
            download_name=download_name(queue, row.name),
            download_href=href,
        )

    async def task(self, request: Request) -> Response:
        """A task's own page: every attribute, the whole payload, its actions."""
        queue = await self.console.known_queue(request)
        if isinstance(queue, Response):
            return queue
        name = self._name(request)
        if isinstance(name, Response):
            return name
        backend = self.console.backend
        if is_pubsub(backend):
            return self.console.render(request, "pubsub_task.html", queue=queue, name=name)
        row = await run_in_threadpool(find_task, backend, queue, name)
        if row is None:
            return self.console.error(
                request, 404, f"queue {queue!r} has no task named {name!r} (done or deleted?)"
            )
        href = f"{task_path(queue, name)}".replace("/task?", "/task/payload?", 1)
        return self._render_task(request, queue, row, note=None, href=href)

    async def payload(self, request: Request) -> Response:
        """The payload as a download (never rendered by the browser)."""
        queue = await self.console.known_queue(request)
        if isinstance(queue, Response):
            return queue
        name = self._name(request)
        if isinstance(name, Response):
            return name
        row = await run_in_threadpool(find_task, self.console.backend, queue, name)
        if row is None:
            return self.console.error(request, 404, f"queue {queue!r} has no task named {name!r}")
        return Response(
            row.payload,
            media_type="application/octet-stream",
            headers={
                "Content-Disposition": f'attachment; filename="{download_name(queue, name)}"',
                "X-Content-Type-Options": "nosniff",
                "Cache-Control": "no-store",
            },
        )

    async def find(self, request: Request) -> Response:
        """Find by exact name or payload substring: GET where it costs nothing, POST (with the
        CSRF token) on Pub/Sub, where it is a look."""
        backend = self.console.backend
        pubsub = is_pubsub(backend)
        if request.method == "POST":
            posted = await self.console.posted(request)
            if isinstance(posted, Response):
                return posted
            queue, form = posted
            try:
                name = params.optional_task_name(_field(form, "name"))
            except ValueError as exc:
                return self.console.error(request, 400, f"bad field 'name': {exc}")
            try:
                text = params.payload_text(_field(form, "payload"))
            except ValueError as exc:
                return self.console.error(request, 400, f"bad field 'payload': {exc}")
        else:
            checked = await self.console.known_queue(request)
            if isinstance(checked, Response):
                return checked
            queue = checked
            query = self.console.query(
                request, name=params.optional_task_name, payload=params.payload_text
            )
            if isinstance(query, Response):
                return query
            name, text = query.get("name"), query.get("payload")
        context: dict[str, Any] = {
            "queue": queue,
            "find_name": name,
            "find_payload": text,
        }
        if name is None and text is None:
            return self.console.render(request, "found.html", found=None, **context)
        if name is not None and text is not None:
            return self.console.error(
                request,
                400,
                f"bad {'field' if request.method == 'POST' else 'parameter'} 'payload': give a"
                " task name or a payload substring, not both",
            )
        needle = text.encode("utf-8") if text is not None else None
        if pubsub and request.method != "POST":
            return self.console.render(request, "found.html", found=None, **context)
        if pubsub:
            found = await run_in_threadpool(look_for, backend, queue, name=name, needle=needle)
            if name is not None and len(found.rows) == 1:
                row = found.rows[0]
                href = "data:application/octet-stream;base64," + base64.b64encode(
                    row.payload
                ).decode("ascii")
                return self._render_task(request, queue, row, note=found.note, href=href)
            return self.console.render(request, "found.html", found=found, **context)
        result = await run_in_threadpool(find_tasks, backend, queue, name=name, needle=needle)
        if result is None:
            return self.console.error(request, 400, f"{backend.url} cannot search its tasks")
        if name is not None and result.rows:
            return RedirectResponse(task_path(queue, name), status_code=303)
        return self.console.render(request, "found.html", found=result, **context)
