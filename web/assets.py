"""The pages and their assets, read from the installed package once and kept in memory.

All of them together are a few tens of KB. They are read on a worker thread the first
time a page is asked for (:meth:`PageAssets.get`), never on the Trio thread, and never
again: the worker serves what it was installed with.

A page is ``pages/shell.html`` (the document's head, the same for every page) around
the page's own body (``pages/<page>.html``), with its title and its script
``assets/<page>.js``: put together once, at load, from the package's files only.
"""

from __future__ import annotations

import hashlib
import re
from importlib import resources

import msgspec
import trio

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
PAGES = {"viewer": "sessionmem · memory", "debug": "sessionmem · operator"}  # page -> its title
ASSET_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*\.(?:js|css|svg)$")  # what /assets/{name} may name


class Asset(msgspec.Struct, frozen=True):
    name: str  # "pages/viewer.html", "assets/viewer.js"
    body: bytes
    content_type: str
    etag: str  # quoted, as the header carries it


def _asset(name: str, body: bytes) -> Asset:
    suffix = "." + name.rsplit(".", 1)[-1]
    return Asset(name, body, CONTENT_TYPES[suffix], '"' + hashlib.sha256(body).hexdigest()[:32] + '"')


def load_assets() -> dict[str, Asset]:
    """Every page (``pages/viewer.html``) and asset (``assets/viewer.js``) of the package (blocking: file reads)."""
    root = resources.files(__package__)
    found = {}
    for entry in root.joinpath("assets").iterdir():
        if entry.is_file() and "." + entry.name.rsplit(".", 1)[-1] in CONTENT_TYPES:
            found[f"assets/{entry.name}"] = _asset(f"assets/{entry.name}", entry.read_bytes())
    shell = root.joinpath("pages", "shell.html").read_text(encoding="utf-8")
    for page, title in PAGES.items():
        body = root.joinpath("pages", f"{page}.html").read_text(encoding="utf-8").rstrip("\n")
        document = shell.replace("{{title}}", title).replace("{{page}}", page).replace("{{body}}", body)
        found[f"pages/{page}.html"] = _asset(f"pages/{page}.html", document.encode("utf-8"))
    return found


class PageAssets:
    """The loaded assets; the first :meth:`get` loads them all on a worker thread."""

    def __init__(self) -> None:
        self._assets: dict[str, Asset] | None = None
        self._loading = trio.Lock()

    async def get(self, name: str) -> Asset | None:
        """The asset ``folder/name``, or ``None`` if the package has none of that name."""
        if self._assets is None:
            async with self._loading:
                if self._assets is None:
                    self._assets = await trio.to_thread.run_sync(load_assets)
        return self._assets.get(name)
