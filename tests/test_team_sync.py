"""Team memory's sync: workers with their own data dirs sharing one real PostgreSQL.

What a machine stores of a shared project reaches the others (search, SessionStart, with
its origin); nothing of a project it does not share leaves it; with PostgreSQL away the
worker works on from SQLite and, once it is back, everything reaches it exactly once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio

from sessionmem.storage import team_sync
from sessionmem.testing.harness import InProcessWorker, open_worker

from .test_search import BLOG, SHOP, store_session

SYNC_WAIT_S = 60.0  # a busy 2-core CI machine: the promise is "arrives", not how fast


def team_settings(url: str, machine: str, **extra: Any) -> dict[str, Any]:
    return {"database_url": url, "machine_name": machine, "user_name": f"{machine}-user", "embedder": "none",
            "batch_quiet_s": 0.05, "team_pull_interval_s": 0.2, **extra}


def pg_counts(url: str) -> dict[str, int]:
    """Rows in the team database, by table, and those whose identity is there twice (0 if all is well)."""
    identities = {
        "sessions": "claude_session_id",
        "prompts": "claude_session_id, prompt_number",
        "observations": "claude_session_id, tool_use_id",
        "summaries": "claude_session_id, prompt_number, created_at",
    }
    counts: dict[str, int] = dict.fromkeys([*identities, *(f"{table}_twice" for table in identities)], 0)
    with psycopg.connect(url) as connection:
        if connection.execute("SELECT to_regclass('sessions')").fetchone() == (None,):
            return counts  # no worker has connected yet (it makes the schema)
        for table, identity in identities.items():
            row = connection.execute(
                f"SELECT count(*), count(*) - count(DISTINCT ({identity})) FROM {table}").fetchone()
            assert row is not None
            counts[table], counts[f"{table}_twice"] = int(row[0]), int(row[1])
    return counts


def pg_projects(url: str) -> set[str]:
    with psycopg.connect(url) as connection:
        return {str(key) for (key,) in connection.execute(
            "SELECT project_key FROM sessions UNION SELECT project_key FROM observations"
            " UNION SELECT project_key FROM prompts UNION SELECT project_key FROM summaries").fetchall()}


async def wait_for(predicate: Callable[[], Any], *, timeout: float = SYNC_WAIT_S, poll: float = 0.1) -> Any:
    with trio.fail_after(timeout):
        while True:
            found = await predicate()
            if found:
                return found
            await trio.sleep(poll)


async def search_titles(worker: InProcessWorker, query: str) -> list[str]:
    answer = await worker.get(f"/api/search?q={query}&mode=fts&limit=20")
    return [result["title"] for result in answer["results"]]


async def shop_session(worker: InProcessWorker, session: str = "shop-1") -> None:
    await store_session(worker, session, SHOP, "make checkout refuse an empty cart", [
        ("Edit", {"file_path": f"{SHOP}/src/cart.py", "old_string": "return total",
                  "new_string": "if not items: raise EmptyCart"}),
        ("Bash", {"command": "pytest tests/test_cart.py", "description": "run the cart tests"}),
    ], summary="Checkout now refuses an empty cart.")


async def blog_session(worker: InProcessWorker) -> None:
    await store_session(worker, "blog-1", BLOG, "fix the broken RSS feed dates", [
        ("Edit", {"file_path": f"{BLOG}/feed.py", "old_string": "strftime('%d')", "new_string": "isoformat()"}),
    ], summary="RSS dates are ISO 8601 now.")


def local_origins(worker: InProcessWorker, table: str) -> set[tuple[str, str]]:
    import apsw

    connection = apsw.Connection(str(worker.settings.db_path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return {(str(machine), str(user)) for machine, user in
                connection.execute(f"SELECT origin_machine, origin_user FROM {table}")}
    finally:
        connection.close()


@pytest.mark.xdist_group("team")
async def test_memory_of_a_shared_project_reaches_the_other_machine_and_nothing_else_leaves(
        tmp_path: Path, team_database_url: str) -> None:
    url = team_database_url
    async with open_worker(tmp_path / "a", **team_settings(url, "laptop", share_projects="shop")) as a, \
            open_worker(tmp_path / "b", **team_settings(url, "desktop", share_projects="shop")) as b:
        await shop_session(a)
        await blog_session(a)

        async def b_finds_it() -> bool:
            return "Checkout now refuses an empty cart." in " ".join(await search_titles(b, "empty%20cart")) or \
                any("cart.py" in title for title in await search_titles(b, "empty%20cart"))

        await wait_for(b_finds_it)
        # SessionStart on the other machine injects it.
        context = await b.get("/api/context/inject?project=shop&session=new-on-b")
        assert "cart.py" in context
        # With its origin: the machine and user it came from.
        assert local_origins(b, "observations") == {("laptop", "laptop-user")}
        assert local_origins(a, "observations") == {("", "")}  # own rows, and nothing came back
        # Nothing of the project A does not share reached the team database, nor B.
        assert pg_projects(url) == {"name:shop"}
        assert "RSS" not in " ".join(await search_titles(b, "RSS%20dates"))
        team = (await a.debug())["team"]
        assert team["connected"] and team["backlog"] == 0 and team["pushed"] > 0
        assert team["lastError"] == "" or "password" not in team["lastError"]
    counts = pg_counts(url)
    assert counts == {"sessions": 1, "sessions_twice": 0, "prompts": 1, "prompts_twice": 0,
                      "observations": 2, "observations_twice": 0, "summaries": 1, "summaries_twice": 0}


@pytest.mark.xdist_group("team")
async def test_the_outbox_begins_above_what_was_stored_before_sharing(tmp_path: Path, team_database_url: str) -> None:
    async with open_worker(tmp_path / "a", embedder="none", batch_quiet_s=0.05) as a:
        await shop_session(a, "before")
    async with open_worker(tmp_path / "a", **team_settings(team_database_url, "laptop", share_projects="shop")) as a:
        await shop_session(a, "after")

        async def pushed() -> bool:
            return (await a.debug())["team"]["backlog"] == 0 and pg_counts(team_database_url)["observations"] == 2

        await wait_for(pushed)
        cursor = await a.services.store.team_outbox_cursor(team_sync.OUTBOX)
        assert cursor.observation == 4
    with psycopg.connect(team_database_url) as connection:
        assert {str(s) for (s,) in connection.execute("SELECT claude_session_id FROM sessions")} == {"after"}
