"""``GET /api/search?source=team``, ``sessionmem search --team`` and the MCP tool's ``source``: the team
database searched itself, by words and meaning, from real workers over HTTP and a real PostgreSQL.

Machines A (laptop) and C (desktop) share a project each; B (office) shares, and so pulls,
nothing: what it finds with ``source=team`` comes from the team database, never from its
own memory.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import psycopg
import pytest
import trio
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import CallToolResult

from sessionmem.install import MCP_ARGS
from sessionmem.protocol import routes
from sessionmem.search.team_search import TEAM_SEARCH_TIMEOUT_S
from sessionmem.testing.harness import ThreadedWorker, serve_in_thread

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("team")]

SHOP, BLOG = "/home/me/shop", "/home/me/blog"
SYNC_WAIT_S = 90.0  # a busy 2-core machine embedding and pushing: the promise is "arrives"
PASSWORD = "Hunter2-Secret"
# A search of an unreachable team database answers within its timeout; the rest is a busy machine's slack.
ANSWERED_WITHIN_S = TEAM_SEARCH_TIMEOUT_S + 6.0


def machine(url: str | None, name: str, **extra: Any) -> dict[str, Any]:
    team = {"database_url": url, "machine_name": name, "user_name": f"{name}-user"} if url else {}
    return {**team, "batch_quiet_s": 0.05, "team_pull_interval_s": 0.2, **extra}


def store_session(worker: ThreadedWorker, session: str, cwd: str, prompt: str,
                  tools: list[tuple[str, dict[str, Any], Any]], summary: str) -> None:
    worker.post(routes.INIT, {"claudeSessionId": session, "cwd": cwd, "prompt": prompt})
    for number, (tool, tool_input, response) in enumerate(tools):
        worker.post(routes.OBSERVATIONS, {"claudeSessionId": session, "cwd": cwd, "tool_name": tool,
                                          "tool_input": tool_input, "tool_response": response,
                                          "tool_use_id": f"{session}-{number}"})
    worker.post(routes.SUMMARIZE, {"claudeSessionId": session, "cwd": cwd, "last_assistant_message": summary})
    worker.wait_idle()


def pg_rows(url: str) -> dict[str, int]:
    with psycopg.connect(url) as connection:
        if connection.execute("SELECT to_regclass('observations')").fetchone() == (None,):
            return {}
        row = connection.execute(
            "SELECT (SELECT count(*) FROM observations), (SELECT count(*) FROM summaries),"
            " (SELECT count(*) FROM observations WHERE vector IS NOT NULL AND origin_machine = 'laptop')"
            ).fetchone()
        assert row is not None
        return {"observations": int(row[0]), "summaries": int(row[1]), "laptop_vectors": int(row[2])}


def search(worker: ThreadedWorker, **params: str) -> dict[str, Any]:
    return worker.get(f"{routes.SEARCH}?{urlencode(params)}")


def titles(answer: dict[str, Any]) -> set[str]:
    return {result["title"] for result in answer["results"]}


def sessionmem(worker: ThreadedWorker, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONMEM_")}
    return subprocess.run([sys.executable, "-m", "sessionmem", *args, "--data-dir", str(worker.data_dir),
                           "--port", str(worker.port)], env=env, capture_output=True, text=True, timeout=120)


def mcp_search(worker: ThreadedWorker, cwd: Path, arguments: dict[str, Any]) -> CallToolResult:
    """One ``search`` tool call of ``sessionmem mcp`` started as Claude Code starts it (its own Trio run: the
    threaded workers are stopped from a thread that is not one)."""
    server = StdioServerParameters(command=sys.executable, args=list(MCP_ARGS), cwd=str(cwd),
                                   env={"SESSIONMEM_DATA_DIR": str(worker.data_dir)})

    async def call() -> CallToolResult:
        async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return await session.call_tool("search", arguments)

    return trio.run(call)


def text(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


@pytest.fixture
def team(tmp_path: Path, team_database_url: str) -> Iterator[dict[str, Any]]:
    """A shop session of A (embedded, its vectors pushed), a blog session of C (no vectors), and B."""
    url = team_database_url
    with serve_in_thread(tmp_path / "a", **machine(url, "laptop", share_projects="shop", embedder="minilm")) as a, \
            serve_in_thread(tmp_path / "c", **machine(url, "desktop", share_projects="blog", embedder="none")) as c, \
            serve_in_thread(tmp_path / "b", **machine(url, "office", embedder="minilm")) as b:
        store_session(a, "shop-1", SHOP, "make checkout refuse an empty cart", [
            ("Edit", {"file_path": f"{SHOP}/src/cart.py", "old_string": "return total",
                      "new_string": "if not items: raise EmptyCart"}, "ok"),
            ("Bash", {"command": "pytest tests/test_cart.py", "description": "run the cart tests"},
             {"stdout": "3 passed", "stderr": "", "interrupted": False}),
        ], "Checkout now refuses an empty cart.")
        store_session(c, "blog-1", BLOG, "fix the broken RSS feed dates", [
            ("Edit", {"file_path": f"{BLOG}/feed.py", "old_string": "strftime('%d')", "new_string": "isoformat()"},
             "ok"),
        ], "RSS dates are ISO 8601 now.")
        a.wait_until(lambda: pg_rows(url) == {"observations": 3, "summaries": 2, "laptop_vectors": 2},
                     timeout=SYNC_WAIT_S, interval=0.2)
        yield {"a": a, "b": b, "c": c, "url": url}


def test_the_team_database_is_searched_by_words_and_meaning_with_filters(team: dict[str, Any],
                                                                        tmp_path: Path) -> None:
    b = team["b"]
    # B pulls nothing: its own memory holds none of it.
    assert search(b, q="cart or RSS", mode="fts")["results"] == []

    every = search(b, q="cart or RSS", mode="fts", source="team")
    assert every["source"] == "team"
    assert {result["source"] for result in every["results"]} == {"team"}
    assert {(result["project"], result["origin"]) for result in every["results"]} == {
        ("shop", "laptop-user@laptop"), ("blog", "desktop-user@desktop")}
    assert {"Edited src/cart.py (-1 +1 lines)", "Edited feed.py (-1 +1 lines)"} <= titles(every)

    # Filters: project, origin (user@machine, or a machine name), types, kinds.
    shop = search(b, q="cart or RSS", mode="fts", source="team", project="shop")
    assert shop["results"] and {result["project"] for result in shop["results"]} == {"shop"}
    desktop = search(b, q="cart or RSS", mode="fts", source="team", origin="desktop")
    assert desktop["results"] and {result["origin"] for result in desktop["results"]} == {"desktop-user@desktop"}
    laptop = search(b, q="cart or RSS", mode="fts", source="team", origin="laptop-user@laptop")
    assert laptop["results"] and {result["origin"] for result in laptop["results"]} == {"laptop-user@laptop"}
    assert search(b, q="cart or RSS", mode="fts", source="team", origin="local")["results"] == []
    discovery = search(b, q="cart or RSS", mode="fts", source="team", type="discovery")
    assert discovery["results"] and {(r["kind"], r["type"]) for r in discovery["results"]} == {
        ("observation", "discovery")}
    summaries = search(b, q="cart or RSS", mode="fts", source="team", kind="summary")
    assert titles(summaries) == {"make checkout refuse an empty cart", "fix the broken RSS feed dates"}

    # Meaning: B embeds the query, the team database finds the nearest vectors of its model (A's).
    meaning = search(b, q="a shopping basket with nothing in it", mode="vector", source="team")
    assert meaning["vectors"] == "used" and meaning["results"]
    assert {result["origin"] for result in meaning["results"]} == {"laptop-user@laptop"}
    assert all(result["matchedBy"] == ["meaning"] for result in meaning["results"])
    hybrid = search(b, q="empty cart", source="team")
    assert hybrid["mode"] == "hybrid" and hybrid["vectors"] == "used"
    assert hybrid["results"][0]["matchedBy"] == ["words", "meaning"]
    assert {result["project"] for result in hybrid["results"]} == {"shop"}
    # Its ids are the team database's: B's observations batch (its own memory) has none of them.
    ids = [result["id"] for result in hybrid["results"] if result["kind"] == "observation"]
    assert b.post(routes.OBSERVATION_BATCH, {"ids": ids})["missing"] == ids

    # The command line.
    found = sessionmem(b, "search", "cart", "--team", "--mode", "fts")
    assert found.returncode == 0, found.stderr
    assert "in the team database, fts" in found.stdout and "from laptop-user@laptop" in found.stdout
    assert "team #" in found.stdout and "sessionmem show" in found.stdout and "full records" not in found.stdout
    assert "0 result(s)" in sessionmem(b, "search", "cart", "--mode", "fts").stdout
    as_json = json.loads(sessionmem(b, "search", "RSS", "--team", "--json", "--origin", "desktop").stdout)
    assert as_json["source"] == "team" and {r["origin"] for r in as_json["results"]} == {"desktop-user@desktop"}


def test_the_mcp_tool_searches_the_team_database_when_asked(team: dict[str, Any], tmp_path: Path) -> None:
    b = team["b"]
    result = mcp_search(b, tmp_path, {"query": "RSS dates", "project": "*", "source": "team"})
    assert not result.is_error, text(result)
    answer = text(result)
    assert "of the team database" in answer and "Edited feed.py" in answer
    assert "from desktop-user@desktop" in answer and "get_observations(ids=" not in answer
    local = mcp_search(b, tmp_path, {"query": "RSS dates", "project": "*"})
    assert text(local) == 'Nothing found for "RSS dates" in all projects.'


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_without_a_team_database_source_team_is_a_clear_400(tmp_path: Path) -> None:
    with serve_in_thread(tmp_path / "data", **machine(None, "solo", embedder="none")) as worker:
        status, answer = worker.request("GET", f"{routes.SEARCH}?q=cart&source=team")
        assert status == 400 and answer["path"] == "?source"
        assert "no team database is configured: set database_url" in answer["error"]
        status, answer = worker.request("GET", f"{routes.SEARCH}?q=cart&source=everywhere")
        assert status == 400 and "'source' must be one of local, team" in answer["error"]
        refused = sessionmem(worker, "search", "cart", "--team")
        assert refused.returncode == 2 and "no team database is configured" in refused.stderr


def test_an_unreachable_team_database_is_a_quick_503_without_the_password(tmp_path: Path) -> None:
    # Nothing listens on one port (refused at once); the other accepts connections and never answers
    # (a connection attempt waits out its whole timeout).
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        for port, label in ((free_port(), "refused"), (silent.getsockname()[1], "silent")):
            url = f"postgresql://alice:{PASSWORD}@127.0.0.1:{port}/team"
            with serve_in_thread(tmp_path / label, **machine(url, "laptop", embedder="none")) as worker:
                started = time.monotonic()
                status, answer = worker.request("GET", f"{routes.SEARCH}?q=cart&source=team", timeout=60)
                assert time.monotonic() - started < ANSWERED_WITHIN_S, label
                assert status == 503 and "the team database cannot be searched" in answer["error"], answer
                assert PASSWORD not in json.dumps(answer)
                if label == "silent":
                    assert f"did not answer within {TEAM_SEARCH_TIMEOUT_S:g} s" in answer["error"]
                    continue
                # The command line says why at once (a 503 without Retry-After is not "busy, wait").
                started = time.monotonic()
                failed = sessionmem(worker, "search", "cart", "--team")
                assert time.monotonic() - started < ANSWERED_WITHIN_S + 10
                assert failed.returncode == 1 and "the team database cannot be searched" in failed.stderr
                assert "(HTTP 503)" in failed.stderr and PASSWORD not in failed.stderr + failed.stdout
                tool = mcp_search(worker, tmp_path, {"query": "cart", "source": "team"})
                assert tool.is_error and "the team database cannot be searched" in text(tool)
                assert PASSWORD not in text(tool)
