"""Who may talk to the worker: the ASGI layer in front of everything else.

Checks, in order, on every HTTP request (a refusal is answered here; nothing behind
this layer runs):

1. ``Host`` must name this worker on loopback (``127.0.0.1:PORT``, ``localhost:PORT``,
   ``[::1]:PORT``; plus the configured host when the operator bound another address):
   a web page that rebinds its own name to 127.0.0.1 (DNS rebinding) is refused (421).
2. A request from a web page of another origin is refused (403): an ``Origin`` other
   than the worker's own, or ``Sec-Fetch-Site: cross-site``.
3. The token (:mod:`sessionmem.protocol.auth`): ``Authorization: Bearer <token>``, or
   the pages' cookie; on every route but ``GET /api/health`` (401 otherwise), which
   answers a caller without either its status and version only (``ACCESS_SCOPE_KEY``). The
   exchange ``GET /login?code=...`` trades a single-use code (issued to an
   authenticated client) for the cookie. The cookie holds a page login (both are
   :class:`ExpiringSecrets`), never the token: browsers send a cookie of 127.0.0.1 to every
   port of it, so any other local web server a browser visits gets it (a trial showed
   it). A page login reads (``GET``) and may do what the pages do (replay a session, log
   out), nothing else -- no ingest, import or maintenance: whoever finds it cannot plant
   memory. It lasts :data:`PAGE_LOGIN_S`, and ends at ``POST /logout`` or when the
   worker stops.
4. A request with a body must say it is JSON (415 otherwise): a plain HTML form, which
   needs no CORS preflight, cannot.

A 401 is JSON, but for a person: a ``GET`` of a page (:data:`PAGE_PATHS`: the viewer,
``/debug``, a login link) whose ``Accept`` ranks HTML above JSON, as a browser's does,
gets a small page that says how to log in (``sessionmem open``). Its text is fixed (no
token, nothing of the request); it is never cached and carries the pages' headers. An
API client (``Accept: application/json``, ``*/*`` or none) and every ``/api/`` route get
the JSON.

Error handling:
    Refusals are counted (:class:`GuardStatistics`), never logged one by one: a
    flood of bad requests cannot fill the log.
"""

from __future__ import annotations

import hmac
import os
import re
import time
from urllib.parse import parse_qs

import msgspec

from sessionmem.protocol import routes
from sessionmem.protocol.auth import COOKIE_NAME
from sessionmem.server.asgi_reply import ASGIApp, Receive, Scope, Send, header, respond
from sessionmem.server.pages import COMMON_HEADERS, MESSAGE_POLICY, html_preferred
from sessionmem.server.payloads import ErrorReply

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
LOGIN_CODE_TTL_S = 300.0
PAGE_LOGIN_S = 12 * 3600.0
MAX_SECRETS = 64  # login codes, or page logins, at once
EXEMPT_PATHS = frozenset({routes.HEALTH})
# Set in the scope of a request to an exempt path: whether it carried the token or a page
# login, so the route can say less to anyone else.
ACCESS_SCOPE_KEY = "sessionmem.access"
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
READ_METHODS = frozenset({"GET", "HEAD"})
# What a page login may do besides reading: what the pages' buttons do.
_PAGE_ACTION = re.compile(r"/api/sessions/[^/]+/replay|" + re.escape(routes.LOGOUT))


# A path of this worker's pages: a slash, then no second slash or backslash (a browser reads
# `//host` and `/\host` as another host), and only characters a header carries as they are.
_PAGE_PATH = re.compile(r"/(?![/\\])[A-Za-z0-9_\-./?=&%]*")
# Where a browser is sent, and so where a refusal may be a page: the command that logs it in to that page.
PAGE_PATHS = {routes.VIEWER: "sessionmem open", routes.DEBUG: "sessionmem open debug", routes.LOGIN: "sessionmem open"}
_NOT_LOGGED_IN = ("The pages show what sessionmem remembers of your Claude Code sessions, so they are shown only to "
                  "a browser that a login link let in.")
_LINK_NOT_VALID = f"This login link is not valid any more: each one works once, within {LOGIN_CODE_TTL_S / 60:.0f} minutes."
_LOGIN_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>sessionmem · log in</title>
</head>
<body>
<h1>sessionmem: this browser is not logged in</h1>
<p>{reason}</p>
<p>To log it in, run this in a terminal on this machine:</p>
<pre><code>{command}</code></pre>
<p>It opens this page with a link that works once, within {code_minutes:.0f} minutes. The login lasts
{login_hours:.0f} hours, or until you log out or the worker stops. Add <code>--print-only</code> to print the link
instead of starting a browser, and <code>--data-dir DIR</code> if the worker keeps its memory in another data
dir than the default.</p>
</body>
</html>
"""


class GuardStatistics(msgspec.Struct, frozen=True):
    refused_host: int
    refused_origin: int
    refused_token: int
    refused_content_type: int
    logins: int
    refused_logins: int
    refused_page_logins: int = 0  # a page login asking for what only the token may do


class ExpiringSecrets:
    """Random secrets the worker hands out, each good for ``lifetime_s``: the single-use login codes
    (:meth:`take`), and the page logins they are traded for (:meth:`valid` until :meth:`end`).

    Resource handling:
        Kept in memory (a worker that stops forgets them all), at most ``most`` at once: the
        oldest goes first, so secrets asked for over and over cannot fill memory.
    """

    def __init__(self, lifetime_s: float, *, most: int = MAX_SECRETS) -> None:
        self.lifetime_s = lifetime_s
        self._most = most
        self._expiry: dict[str, float] = {}  # in the order issued

    def issue(self) -> str:
        now = time.monotonic()
        self._expiry = {secret: expiry for secret, expiry in self._expiry.items() if expiry > now}
        while len(self._expiry) >= self._most:
            del self._expiry[next(iter(self._expiry))]
        secret = os.urandom(32).hex()
        self._expiry[secret] = now + self.lifetime_s
        return secret

    def valid(self, secret: str) -> bool:
        expiry = self._expiry.get(secret)  # a dict lookup: its time does not depend on how much of it matches
        return expiry is not None and expiry > time.monotonic()

    def take(self, secret: str) -> bool:
        """Whether ``secret`` is valid; it is not any more (a single use)."""
        valid = self.valid(secret)
        self.end(secret)
        return valid

    def end(self, secret: str) -> None:
        self._expiry.pop(secret, None)


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the worker on this machine."""
    return host in ("127.0.0.1", "localhost", "::1", "[::1]") or host.startswith("127.")


def cookie_name(port: int) -> str:
    """Browsers keep cookies per host, not per port: one name per worker port."""
    return f"{COOKIE_NAME}_{port}"


class AccessGuard:
    """The checks of the module docstring, in front of the app given to :meth:`protect`."""

    def __init__(self, *, token: str, port: int, extra_host: str = "") -> None:
        self._app: ASGIApp | None = None
        self._token = token.encode("ascii")
        self._extra_host = extra_host
        self.login_codes = ExpiringSecrets(LOGIN_CODE_TTL_S)
        self.page_logins = ExpiringSecrets(PAGE_LOGIN_S)
        self._refused = {"host": 0, "origin": 0, "token": 0, "content_type": 0, "login": 0, "page_login": 0}
        self._logins = 0
        self.bind(port)

    def protect(self, app: ASGIApp) -> AccessGuard:
        """Guard ``app``; returns the guard, which is the ASGI app to serve."""
        self._app = app
        return self

    def bind(self, port: int) -> None:
        """The port the worker listens on (known once bound): what ``Host`` and ``Origin`` must name."""
        self.port = port
        names = (*LOOPBACK_NAMES, self._extra_host) if self._extra_host else LOOPBACK_NAMES
        self._hosts = frozenset(f"{name}:{port}".encode() for name in names)
        self._origins = frozenset(b"http://" + host for host in self._hosts)
        self._cookie_prefix = cookie_name(port).encode() + b"="

    def statistics(self) -> GuardStatistics:
        r = self._refused
        return GuardStatistics(r["host"], r["origin"], r["token"], r["content_type"], self._logins, r["login"],
                               r["page_login"])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert self._app is not None, "protect() an app first"
        if scope["type"] == "websocket":  # no route speaks it: refused before any app sees one, from any Host or Origin
            await receive()  # its websocket.connect
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":  # lifespan
            await self._app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is not None:
            status, kind, message, extra = refusal
            self._refused[kind] += 1
            if status == 401 and wants_page(scope):
                await respond_with_login_page(send, scope, _NOT_LOGGED_IN, extra)
            else:
                await respond(send, status, ErrorReply(message), headers=extra)
            return
        if scope["path"] == routes.LOGIN:
            await self._login(scope, send)
            return
        if scope["path"] == routes.LOGOUT:
            await self._logout(scope, send)
            return
        await self._app(scope, receive, send)

    def _refusal(self, scope: Scope) -> tuple[int, str, str, list[tuple[bytes, bytes]]] | None:
        host = header(scope, b"host")
        if host not in self._hosts:
            return (421, "host", f"this worker answers to http://127.0.0.1:{self.port} only "
                                 f"(Host {(host or b'').decode('latin-1')[:100]!r} refused)", [])
        origin = header(scope, b"origin")
        if (origin is not None and origin not in self._origins) or header(scope, b"sec-fetch-site") == b"cross-site":
            return 403, "origin", "requests from other origins are refused", []
        path = scope["path"]
        if path in EXEMPT_PATHS:
            scope[ACCESS_SCOPE_KEY] = self._access(scope)
        elif path != routes.LOGIN:
            access = self._access(scope)
            if access is None:
                return (401, "token", "missing or wrong token: send 'Authorization: Bearer' with the token in "
                                      "the data dir's auth.token (or run `sessionmem open` for the web pages)",
                        [(b"www-authenticate", b'Bearer realm="sessionmem"')])
            if access == "page" and scope["method"] not in READ_METHODS and not _PAGE_ACTION.fullmatch(path):
                return (403, "page_login", "the web pages' login reads memory; this needs the token "
                                           "('Authorization: Bearer' with the data dir's auth.token)", [])
        if scope["method"] in BODY_METHODS:
            content_type = (header(scope, b"content-type") or b"").split(b";", 1)[0].strip().lower()
            if content_type != b"application/json":
                return 415, "content_type", "request bodies must be JSON (Content-Type: application/json)", []
        return None

    def _access(self, scope: Scope) -> str | None:
        """``"token"`` (the bearer token), ``"page"`` (a page login's cookie) or ``None``."""
        authorization = header(scope, b"authorization")
        if authorization is not None:
            scheme, _, credential = authorization.partition(b" ")
            good = scheme.lower() == b"bearer" and hmac.compare_digest(credential.strip(), self._token)
            return "token" if good else None
        login = self._page_login(scope)
        return "page" if login is not None and self.page_logins.valid(login) else None

    def _page_login(self, scope: Scope) -> str | None:
        cookies = header(scope, b"cookie")
        if cookies is not None:
            for cookie in cookies.split(b";"):
                cookie = cookie.strip()
                if cookie.startswith(self._cookie_prefix):
                    return cookie[len(self._cookie_prefix):].decode("latin-1")
        return None

    async def _login(self, scope: Scope, send: Send) -> None:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        code = (query.get("code") or [""])[0]
        target = (query.get("next") or ["/"])[0]
        if not _PAGE_PATH.fullmatch(target):
            target = "/"  # only pages of this worker (not //host, /\\host, nor a header broken by CR LF)
        if not self.login_codes.take(code):
            self._refused["login"] += 1
            if wants_page(scope):
                await respond_with_login_page(send, scope, _LINK_NOT_VALID)
            else:
                await respond(send, 401, ErrorReply("this login link is not valid (any more): run `sessionmem open`"))
            return
        self._logins += 1
        cookie = (f"{cookie_name(self.port)}={self.page_logins.issue()}"
                  f"; HttpOnly; SameSite=Strict; Path=/; Max-Age={self.page_logins.lifetime_s:.0f}")
        await respond(send, 303, b"", content_type=b"text/plain", headers=[
            (b"location", target.encode("latin-1")), (b"set-cookie", cookie.encode("ascii")),
            (b"cache-control", b"no-store")])

    async def _logout(self, scope: Scope, send: Send) -> None:
        """End this browser's page login (the guard let only a POST with a valid login or the token here)."""
        if scope["method"] != "POST":
            await respond(send, 405, ErrorReply("log out with POST"), headers=[(b"allow", b"POST")])
            return
        login = self._page_login(scope)
        if login is not None:
            self.page_logins.end(login)
        expired = f"{cookie_name(self.port)}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"
        await respond(send, 200, {"loggedOut": login is not None}, headers=[(b"set-cookie", expired.encode("ascii")),
                                                                          (b"cache-control", b"no-store")])


def wants_page(scope: Scope) -> bool:
    """Whether a refusal of this request is for a person: a ``GET`` of a page, ``Accept`` ranking HTML first."""
    return (scope["method"] == "GET" and scope["path"] in PAGE_PATHS
            and html_preferred((header(scope, b"accept") or b"").decode("latin-1")))


async def respond_with_login_page(send: Send, scope: Scope, reason: str,
                                  extra: list[tuple[bytes, bytes]] | None = None) -> None:
    """A 401 as a page that says how to log in: fixed text (the command for the page asked for), not cached."""
    page = _LOGIN_PAGE.format(reason=reason, command=PAGE_PATHS[scope["path"]],
                              code_minutes=LOGIN_CODE_TTL_S / 60, login_hours=PAGE_LOGIN_S / 3600)
    headers = [(name.lower().encode(), value.encode()) for name, value in COMMON_HEADERS.items()]
    headers += [(b"content-security-policy", MESSAGE_POLICY.encode()), (b"cache-control", b"no-store"),
                (b"vary", b"Accept"), *(extra or [])]
    await respond(send, 401, page.encode("utf-8"), content_type=b"text/html; charset=utf-8", headers=headers)
