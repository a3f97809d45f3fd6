"""The web pages as the worker serves them, in-process: headers, /debug's content negotiation, the assets,
the live snapshot stream, an actor's detail, and what the pages' code may never do (checked on the source).

What the pages do in a browser is in tests/test_web_browser.py."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import trio

from sessionmem.actors.child import HISTORY_ERRORS, HISTORY_MESSAGES, HISTORY_TEXT_CHARS, SessionChild
from sessionmem.actors.restart import RestartPolicy
from sessionmem.events import Envelope, ObservationEvent
from sessionmem.records import OBSERVATION_TYPES
from sessionmem.server.pages import DATA_POLICY, PAGE_POLICY
from sessionmem.testing.harness import InProcessWorker
from sessionmem.web.assets import load_assets

WEB = Path(__file__).resolve().parent.parent / "web"
BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"
OBS = "/api/sessions/observations"


def observation(n: int, session: str = "s1", cwd: str = "/w/proj") -> dict[str, object]:
    return {"claudeSessionId": session, "cwd": cwd, "tool_name": "Read", "tool_use_id": f"t{n}",
            "tool_input": {"file_path": f"{cwd}/f{n}.py"}, "tool_response": "x = 1\n"}


async def test_pages_are_html_with_a_strict_policy(app: InProcessWorker) -> None:
    for path, accept in (("/", None), ("/", BROWSER_ACCEPT), ("/debug", BROWSER_ACCEPT)):
        reply = await app.request("GET", path, headers={"accept": accept})
        assert reply.status == 200 and reply.headers["content-type"] == "text/html; charset=utf-8", path
        assert reply.headers["content-security-policy"] == PAGE_POLICY
        assert "script-src 'self';" in PAGE_POLICY and "frame-ancestors 'none'" in PAGE_POLICY
        assert "unsafe" not in PAGE_POLICY and "http" not in PAGE_POLICY
        assert reply.headers["x-content-type-options"] == "nosniff"
        assert reply.headers["referrer-policy"] == "no-referrer" and reply.headers["x-frame-options"] == "DENY"
    viewer = (await app.request("GET", "/")).body.decode()
    assert '<script type="module" src="/assets/viewer.js">' in viewer and "<title>sessionmem · memory</title>" in viewer
    assert '<select id="project"' in viewer and "{{" not in viewer
    debug = (await app.request("GET", "/debug", headers={"accept": BROWSER_ACCEPT})).body.decode()
    assert '<script type="module" src="/assets/debug.js">' in debug and '<table id="actors"' in debug


async def test_debug_stays_json_for_every_client_but_a_browser(app: InProcessWorker) -> None:
    # curl (*/*), the commands and tests (no Accept), an explicit JSON client: all get the snapshot.
    for path, accept in (("/debug", None), ("/debug", "*/*"), ("/debug", "application/json"),
                         ("/debug.json", None), ("/debug.json", BROWSER_ACCEPT)):
        reply = await app.request("GET", path, headers={"accept": accept})
        assert reply.status == 200 and reply.headers["content-type"] == "application/json", (path, accept)
        assert {"worker", "sessions", "actors", "index", "spool"} <= set(reply.json())
        assert reply.headers["content-security-policy"] == DATA_POLICY  # data is never a page
        assert reply.headers["x-content-type-options"] == "nosniff"
    assert "worker" in await app.get("/debug")  # the harness, `sessionmem status` and the bench read it so


async def test_pages_need_the_token_or_the_cookie(app: InProcessWorker) -> None:
    for path in ("/", "/debug", "/debug.json", "/debug/stream", "/debug/actors/s1", "/assets/viewer.js",
                 "/api/projects"):
        reply = await app.request("GET", path, headers={"authorization": None, "accept": BROWSER_ACCEPT})
        assert reply.status == 401, path
        cross = await app.request("GET", path, headers={"sec-fetch-site": "cross-site"})
        assert cross.status == 403, path


async def test_assets_come_from_the_package_only(app: InProcessWorker) -> None:
    script = await app.request("GET", "/assets/viewer.js")
    assert script.status == 200 and script.headers["content-type"] == "text/javascript; charset=utf-8"
    assert script.body == (WEB / "assets" / "viewer.js").read_bytes()
    css = await app.request("GET", "/assets/pages.css")
    assert css.headers["content-type"] == "text/css; charset=utf-8" and css.headers["cache-control"] == "no-cache"
    again = await app.request("GET", "/assets/pages.css", headers={"if-none-match": css.headers["etag"]})
    assert again.status == 304 and again.body == b""
    for path in ("/assets/nope.js", "/assets/..%2Fpages%2Fviewer.html", "/assets/../pages/viewer.html",
                 "/assets/viewer.html", "/assets/.hidden.js", "/assets/__init__.py", "/assets/assets.py"):
        assert (await app.request("GET", path)).status == 404, path


class _Markup(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict[str, str | None]] = []
        self.links: list[dict[str, str | None]] = []
        self.attributes: list[str] = []
        self.inline_script = ""
        self.type_options: list[str] = []
        self._select = ""
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.attributes += [name for name, _ in attrs]
        values = dict(attrs)
        if tag == "script":
            self.scripts.append(values)
            self._in_script = True
        elif tag == "link":
            self.links.append(values)
        elif tag == "select":
            self._select = values.get("id") or ""
        elif tag == "option" and self._select == "type" and values.get("value"):
            self.type_options.append(str(values["value"]))

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False
        elif tag == "select":
            self._select = ""

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.inline_script += data.strip()


def test_pages_run_only_their_own_module_scripts() -> None:
    assets = load_assets()
    for page in ("pages/viewer.html", "pages/debug.html"):
        markup = _Markup()
        markup.feed(assets[page].body.decode())
        assert markup.scripts and all(s.get("type") == "module" and str(s.get("src")).startswith("/assets/")
                                      for s in markup.scripts), page
        assert markup.inline_script == "", page
        assert not [a for a in markup.attributes if a.startswith("on") or a == "style"], page
        for ref in [s["src"] for s in markup.scripts] + [link["href"] for link in markup.links]:
            assert f"assets/{str(ref).removeprefix('/assets/')}" in assets, ref


def test_the_viewer_offers_exactly_the_observation_types() -> None:
    markup = _Markup()
    markup.feed(load_assets()["pages/viewer.html"].body.decode())
    assert tuple(markup.type_options) == OBSERVATION_TYPES


def test_page_code_never_writes_markup_or_reaches_another_host() -> None:
    """Stored text reaches the DOM only as text (dom.js); no script is built from strings; no URL elsewhere."""
    forbidden = re.compile(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|"
                           r"createContextualFragment|DOMParser|setTimeout\(\s*[\"'`]")
    for path in sorted((WEB / "assets").iterdir()):
        if path.suffix not in (".js", ".css", ".svg"):
            continue
        text = path.read_text()
        code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))
        assert not forbidden.search(code), (path.name, forbidden.search(code))
        urls = set(re.findall(r"(?:https?:)?//[\w.-]+\.[a-z]{2,}[^\s\"')]*", code))
        assert urls <= {"http://www.w3.org/2000/svg"}, (path.name, urls)
        for imported in re.findall(r"""from\s+["']([^"']+)["']""", code):
            assert imported.startswith("./") and (WEB / "assets" / imported[2:]).is_file(), (path.name, imported)


async def test_debug_stream_sends_the_snapshot_at_once_and_each_second(app: InProcessWorker) -> None:
    async with app.stream("/debug/stream") as chunks:
        with trio.fail_after(10):
            received = b""
            while received.count(b"event: snapshot") < 2:
                received += await chunks.receive()
    first = received.split(b"\n\n")[0]
    name, data = first.split(b"\n", 1)
    assert name == b"event: snapshot" and data.startswith(b"data: ")
    assert set(json.loads(data[6:])) == set(await app.debug())


async def test_debug_stream_ends_when_the_worker_closes_its_streams(app: InProcessWorker) -> None:
    async with app.stream("/debug/stream") as chunks:
        with trio.fail_after(10):
            assert (await chunks.receive()).startswith(b"event: snapshot")
            app.services.broadcaster.close()  # what shutting down does first
            async for _ in chunks:
                pass  # the answer completes: the graceful close does not wait for it


async def test_an_actors_detail_has_its_recent_messages(app: InProcessWorker) -> None:
    await app.post("/api/sessions/init", {"claudeSessionId": "s-1", "cwd": "/w/proj", "prompt": "look"})
    for n in range(3):
        await app.post(OBS, observation(n, session="s-1"))
    await app.wait_idle()
    history = await app.get("/debug/actors/s-1")
    assert history["statistics"]["claudeSessionId"] == "s-1" and history["statistics"]["processed"] == 4
    kinds = [(m["kind"], m["toolName"]) for m in history["recentMessages"]]
    assert kinds == [("observation", "Read")] * 3 + [("init", "")]  # newest first
    assert history["recentErrors"] == []
    assert (await app.request("GET", "/debug/actors/nobody")).status == 404


def test_an_actors_history_is_bounded() -> None:
    child = SessionChild("s", 8, RestartPolicy(5, 30))
    for n in range(HISTORY_MESSAGES + 15):
        child.finished(Envelope(n, ObservationEvent(claude_session_id="s", project="p", tool_name="Bash" * 100)))
    for n in range(HISTORY_ERRORS + 5):
        child.crashed(RuntimeError(f"crash {n} " + "x" * 10_000))
    history = child.history()
    assert [m.event_id for m in history.recent_messages] == list(range(HISTORY_MESSAGES + 14, 14, -1))
    assert all(len(m.tool_name) <= 100 for m in history.recent_messages)
    assert len(history.recent_errors) == HISTORY_ERRORS
    assert history.recent_errors[0].error.startswith(f"RuntimeError: crash {HISTORY_ERRORS + 4} ")
    assert all(len(e.error) == HISTORY_TEXT_CHARS for e in history.recent_errors)


async def test_projects_most_recently_active_first(app: InProcessWorker) -> None:
    for session, cwd in (("a", "/w/older"), ("b", "/w/newer"), ("c", "/w/older"), ("d", "/w/newest")):
        await app.post("/api/sessions/init", {"claudeSessionId": session, "cwd": cwd, "prompt": "hi"})
        await trio.sleep(0.01)
    await app.wait_idle()
    projects = (await app.get("/api/projects"))["projects"]
    assert [(p["project"], p["sessions"]) for p in projects] == [("newest", 1), ("older", 2), ("newer", 1)]
    assert (await app.get("/api/projects?limit=1"))["projects"][0]["project"] == "newest"
    assert (await app.request("GET", "/api/projects?limit=0")).status == 400
    # Paging reaches every project (the viewer's "More projects…"), and a name can be looked for.
    pages = [await app.get(f"/api/projects?limit=2&offset={offset}") for offset in (0, 2)]
    assert [[p["project"] for p in page["projects"]] for page in pages] == [["newest", "older"], ["newer"]]
    assert [page["more"] for page in pages] == [True, False]
    assert [p["project"] for p in (await app.get("/api/projects?q=NEW"))["projects"]] == ["newest", "newer"]
    assert (await app.request("GET", "/api/projects?offset=-1")).status == 400
