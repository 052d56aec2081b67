"""Who may use the console: loopback by default, a token elsewhere, CSRF checks on every action.

A console that can purge queues must not be reachable by a web page the operator happens to
visit (CSRF, DNS rebinding) nor by anyone on the network without the token.
"""

from __future__ import annotations

import hmac
import secrets
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

CSRF_COOKIE = "pullqueue_console_csrf"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
TOKEN_COOKIE = "pullqueue_console_token"
TOKEN_ENV = "PULLQUEUE_CONSOLE_TOKEN"
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1", "[::1]")


def same_secret(given: str | None, expected: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


class TokenGate:
    """ASGI middleware: every request must carry the token (Bearer header or the cookie set when
    the page was first opened with ?token=...), else 401 and nothing is done."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        bearer = request.headers.get("authorization", "")
        if bearer.lower().startswith("bearer ") and same_secret(bearer[7:].strip(), self.token):
            await self.app(scope, receive, send)
            return
        if same_secret(request.cookies.get(TOKEN_COOKIE), self.token):
            await self.app(scope, receive, send)
            return
        given = request.query_params.get("token")
        if request.method == "GET" and same_secret(given, self.token):
            # Trade the token in the address bar for a cookie, and drop it from the address.
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            location = request.url.path + (f"?{urlencode(rest)}" if rest else "")
            response: Response = RedirectResponse(location, status_code=303)
            response.set_cookie(
                TOKEN_COOKIE, self.token, httponly=True, samesite="strict", path="/"
            )
            await response(scope, receive, send)
            return
        response = PlainTextResponse(
            "401: this console needs its token: open it as /?token=TOKEN (the token the console"
            " was started with), or send Authorization: Bearer TOKEN",
            status_code=401,
        )
        await response(scope, receive, send)


def csrf_token(request: Request) -> str:
    """The browser's CSRF token: its cookie, or a new one the response will set."""
    token = request.cookies.get(CSRF_COOKIE)
    if token and len(token) >= 32:
        return token
    fresh: str | None = request.scope.get("pullqueue.csrf")
    if fresh is None:
        fresh = secrets.token_urlsafe(32)
        request.scope["pullqueue.csrf"] = fresh
    return fresh


def remember_csrf(request: Request, response: Response) -> Response:
    """Set the CSRF cookie on a page's response when the browser had none."""
    fresh = request.scope.get("pullqueue.csrf")
    if fresh is not None:
        response.set_cookie(CSRF_COOKIE, fresh, httponly=True, samesite="strict", path="/")
    return response


def csrf_problem(request: Request, form_token: str | None) -> str | None:
    """Why a POST fails the CSRF check (None: it passes): the token sent in the form or header
    must equal the browser's cookie, and a cross-site Origin is refused outright."""
    origin = request.headers.get("origin")
    if origin and origin != "null":
        own = f"{request.url.scheme}://{request.headers.get('host', '')}"
        if origin.rstrip("/") != own:
            return f"cross-site request from {origin} refused"
    cookie = request.cookies.get(CSRF_COOKIE)
    sent = form_token or request.headers.get(CSRF_HEADER)
    if not cookie or not same_secret(sent, cookie):
        return "missing or wrong CSRF token: reload the page and try again"
    return None
