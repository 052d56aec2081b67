"""Who may use the console: loopback by default, a token elsewhere, a CSRF check on every action.

A console that can purge queues must not be reachable by a web page the operator happens to
visit (CSRF, DNS rebinding) nor by anyone on the network without the token.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from urllib.parse import urlencode, urlsplit

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

SESSION_COOKIE = "pullqueue_console_session"
SECURE_SESSION_COOKIE = "__Host-pullqueue_console_session"
"""The session cookie over HTTPS: `__Host-` makes the browser take it only from this very
host over HTTPS, with Path=/ and no Domain, so no other host or port can set it."""
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
TOKEN_COOKIE = "pullqueue_console_token"
TOKEN_ENV = "PULLQUEUE_CONSOLE_TOKEN"
_SESSION = re.compile(r"[A-Za-z0-9_-]{43}")


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


class CsrfGuard:
    """The CSRF check every action passes, after Django's: the request must come from the
    console's own origin (Origin, or Referer where a browser sends no Origin; `null` and absent
    are refused), and carry a token bound to this browser's session by a secret only this
    process knows.

    The session is a random cookie (`__Host-` prefixed over HTTPS, so no sibling host or plain
    HTTP page can set it); the token is an HMAC of it under the process's secret. A page on
    another port of the host can toss a session cookie into the browser (cookies do not isolate
    ports) but cannot make the token that goes with it, and its posts fail the origin check
    anyway. A console restart makes a new secret: an open page is told to reload.
    """

    def __init__(self, secret: bytes | None = None) -> None:
        self.secret = secret if secret is not None else secrets.token_bytes(32)

    @staticmethod
    def cookie_name(request: Request) -> str:
        return SECURE_SESSION_COOKIE if request.url.scheme == "https" else SESSION_COOKIE

    def session(self, request: Request) -> str:
        """The browser's session id: its cookie, or a new one the response will set."""
        given = request.cookies.get(self.cookie_name(request), "")
        if _SESSION.fullmatch(given):
            return given
        fresh: str | None = request.scope.get("pullqueue.session")
        if fresh is None:
            fresh = secrets.token_urlsafe(32)
            request.scope["pullqueue.session"] = fresh
        return fresh

    def token(self, request: Request) -> str:
        """The CSRF token the console's pages carry for this browser's session."""
        return self._token_of(self.session(request))

    def _token_of(self, session: str) -> str:
        digest = hmac.new(self.secret, session.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    def remember(self, request: Request, response: Response) -> Response:
        """Set the session cookie on a page's response when the browser had none."""
        fresh = request.scope.get("pullqueue.session")
        if fresh is not None:
            secure = request.url.scheme == "https"
            response.set_cookie(
                self.cookie_name(request),
                fresh,
                httponly=True,
                samesite="strict",
                secure=secure,
                path="/",
            )
        return response

    def problem(self, request: Request, form_token: str | None) -> str | None:
        """Why a POST fails the check (None: it passes); each answer says nothing changed."""
        refused = origin_problem(request)
        if refused is not None:
            return f"refused: {refused}; nothing was changed"
        given = request.cookies.get(self.cookie_name(request), "")
        sent = form_token or request.headers.get(CSRF_HEADER)
        if not _SESSION.fullmatch(given) or not same_secret(sent, self._token_of(given)):
            return (
                "refused: the form's CSRF token does not belong to this browser's session (the"
                " page is older than the console, or was not the console's): reload the page and"
                " try again; nothing was changed"
            )
        return None


def _origin_of(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an absolute http(s) URL, default ports filled in; None if not."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return parts.scheme, parts.hostname.lower(), port or (443 if parts.scheme == "https" else 80)


def origin_problem(request: Request) -> str | None:
    """Why the request does not come from the console's own origin (None: it does).

    A browser that sends Sec-Fetch-Site says it outright; Origin (else Referer) decides the rest.
    """
    fetched_from = request.headers.get("sec-fetch-site")
    if fetched_from is not None and fetched_from not in ("same-origin", "none"):
        return (
            f"the browser says another site sent this request (Sec-Fetch-Site: {fetched_from});"
            " actions come only from the console's own pages"
        )
    own_url = f"{request.url.scheme}://{request.headers.get('host', '')}"
    own = _origin_of(own_url)
    origin = request.headers.get("origin")
    if origin is not None:
        if origin.strip() == "null":
            return (
                "the browser hid where this request came from (Origin: null: a redirect from"
                " another site, a sandboxed frame or a local file sent it); actions come only"
                " from the console's own pages"
            )
        if own is None or _origin_of(origin.strip()) != own:
            return f"cross-site request from {origin!r}: actions come only from {own_url}"
        return None
    referer = request.headers.get("referer")
    if referer is None:
        return (
            "the request says neither where it came from (no Origin) nor which page sent it"
            " (no Referer); actions come only from the console's own pages"
        )
    if own is None or _origin_of(referer) != own:
        return f"cross-site request from a page at {referer!r}: actions come only from {own_url}"
    return None
