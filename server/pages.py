"""The web pages: the memory viewer at ``/``, the ``/debug`` page's HTML, their assets, and strict headers.

Pages are package data (:mod:`sessionmem.web`) served behind the access guard like
every other route: a browser has the worker's cookie only after ``sessionmem open``.
Every answer of the Quart app carries headers that keep a page's content inert:

- pages: a Content-Security-Policy that runs only this worker's own scripts (no
  inline script, no ``eval``), loads nothing from any other host, and forbids
  framing; data (JSON, event streams) gets ``default-src 'none'``;
- ``X-Content-Type-Options: nosniff``, ``Referrer-Policy: no-referrer``,
  ``X-Frame-Options: DENY``, ``Cross-Origin-Resource-Policy: same-origin``.

The pages themselves build their DOM with ``textContent`` only, so stored text
(prompts, tool output, paths, titles) is never markup.
"""

from __future__ import annotations

from quart import Response, request
from quart_trio import QuartTrio
from werkzeug.datastructures import MIMEAccept
from werkzeug.http import parse_accept_header

from sessionmem.protocol import routes
from sessionmem.server.routing import error_response, rule
from sessionmem.web.assets import ASSET_NAME, PageAssets

PAGE_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
               "font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
DATA_POLICY = "default-src 'none'; frame-ancestors 'none'"
MESSAGE_POLICY = "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"  # a page of text only
COMMON_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Resource-Policy": "same-origin",
}


def html_preferred(accept: str | None) -> bool:
    """Whether an ``Accept`` header ranks HTML above JSON (a browser's does; curl's ``*/*``, none, and
    an API client's ``application/json`` do not)."""
    ranked = parse_accept_header(accept, MIMEAccept)
    return ranked.quality("text/html") > ranked.quality("application/json")


def prefers_html() -> bool:
    """:func:`html_preferred` for the request being answered."""
    return html_preferred(request.headers.get("Accept"))


async def asset_response(assets: PageAssets, name: str) -> Response:
    """``name`` (``pages/viewer.html``) with its ETag; a 304 when the browser has it already."""
    asset = await assets.get(name)
    if asset is None:
        return error_response(404, f"no page or asset {name!r}")
    headers = {"ETag": asset.etag, "Cache-Control": "no-cache"}  # revalidate: a new install shows at once
    if asset.etag in request.headers.get("If-None-Match", ""):
        return Response(b"", status=304, headers=headers)
    response = Response(asset.body, content_type=asset.content_type, headers=headers)
    if name.endswith(".html"):
        response.headers["Content-Security-Policy"] = PAGE_POLICY
    return response


def add_page_routes(app: QuartTrio, assets: PageAssets) -> None:
    @app.after_request
    async def secure(response: Response) -> Response:
        for name, value in COMMON_HEADERS.items():
            response.headers.setdefault(name, value)
        response.headers.setdefault("Content-Security-Policy", DATA_POLICY)
        return response

    @app.get(routes.VIEWER)
    async def viewer() -> Response:
        return await asset_response(assets, "pages/viewer.html")

    @app.get(rule(routes.ASSETS))
    async def asset(name: str) -> Response:
        if not ASSET_NAME.match(name):
            return error_response(404, f"no asset {name[:100]!r}")
        return await asset_response(assets, f"assets/{name}")
