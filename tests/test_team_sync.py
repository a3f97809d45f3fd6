"""Team memory's sync: workers with their own data dirs sharing one real PostgreSQL.

What a machine stores of a shared project reaches the others (search, SessionStart, with
its origin); nothing of a project it does not share leaves it; with PostgreSQL away the
worker works on from SQLite and, once it is back, everything reaches it exactly once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio

from sessionmem.storage.sqlite import team_rows
from sessionmem.team import push as team_push
from sessionmem.team.sync import KILL_AFTER_PUSH_FILE
from sessionmem.testing.harness import InProcessWorker, open_worker, serve_in_thread
from sessionmem.testing.postgres import temporary_postgres
from sessionmem.testing.worker_process import WorkerClient, WorkerProcess

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
    # Each count a transaction of its own: one transaction holding a lock on each table it read would
    # deadlock with a worker migrating the schema (a migration locks the tables in its own order).
    with psycopg.connect(url, autocommit=True) as connection:
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
            # The outbox's cursor moves in a local transaction after PostgreSQL's commit: wait for both.
            cursor = await a.services.store.team_outbox_cursor(team_rows.OUTBOX)
            return ((await a.debug())["team"]["backlog"] == 0 and pg_counts(team_database_url)["observations"] == 2
                    and cursor.observation >= 4)

        await wait_for(pushed)
        cursor = await a.services.store.team_outbox_cursor(team_rows.OUTBOX)
        assert cursor.observation == 4
    with psycopg.connect(team_database_url) as connection:
        assert {str(s) for (s,) in connection.execute("SELECT claude_session_id FROM sessions")} == {"after"}


@pytest.mark.xdist_group("team")
async def test_what_an_import_brought_is_not_pushed_as_this_machines_own(tmp_path: Path, team_database_url: str) -> None:
    """A file is anyone's: its rows stay here, by the worker's push and by a share push; this machine's go."""
    imported = [
        {"kind": "session", "claudeSessionId": "from-a-file", "project": "shop", "createdAt": 1795550000,
         "updatedAt": 1795550000},
        {"kind": "prompt", "claudeSessionId": "from-a-file", "promptNumber": 1, "text": "port the coupon code",
         "createdAt": 1795550000},
        {"kind": "observation", "claudeSessionId": "from-a-file", "project": "shop", "promptNumber": 1,
         "toolName": "Edit", "toolUseId": "f1", "type": "change", "title": "Edited coupons.py", "createdAt": 1795550001,
         "filesModified": ["coupons.py"]},
        {"kind": "summary", "claudeSessionId": "from-a-file", "project": "shop", "promptNumber": 1,
         "createdAt": 1795550002, "request": "port the coupon code", "completed": "coupons ported"},
    ]
    async with open_worker(tmp_path / "a", **team_settings(team_database_url, "laptop", share_projects="shop")) as a:
        counts = (await a.request("POST", "/api/import", {"records": imported})).json()
        assert (counts["prompts"], counts["observations"], counts["summaries"]) == (1, 1, 1)
        await shop_session(a, "recorded-here")
        await wait_for(lambda: _pushed_all(a, team_database_url, observations=2))
        await a.post("/api/team/push", {"project": "shop"})  # the user's copy of the project's past: the same rule

        async def share_pushed() -> dict[str, Any] | None:
            share = (await team_status(a))["sharePush"]
            return share if share["state"] == "done" else None

        await wait_for(share_pushed)
        assert (await team_status(a))["backlog"] == 0  # the imported rows are not waiting either
    with psycopg.connect(team_database_url) as connection:
        assert {str(s) for (s,) in connection.execute("SELECT claude_session_id FROM sessions")} == {"recorded-here"}
        texts = " ".join(str(t) for (t,) in connection.execute(
            "SELECT title FROM observations UNION ALL SELECT request || completed FROM summaries"
            " UNION ALL SELECT text FROM prompts"))
    assert "coupon" not in texts and "empty cart" in texts, texts
    assert pg_counts(team_database_url) == exact(1)


async def _pushed_all(worker: InProcessWorker, url: str, *, observations: int) -> bool:
    team = await team_status(worker)
    return team["connected"] and team["backlog"] == 0 and pg_counts(url)["observations"] == observations


def exact(sessions: int) -> dict[str, int]:
    """The team database's counts after ``sessions`` shop sessions (a prompt, two observations, a summary)."""
    return {"sessions": sessions, "sessions_twice": 0, "prompts": sessions, "prompts_twice": 0,
            "observations": 2 * sessions, "observations_twice": 0, "summaries": sessions, "summaries_twice": 0}


async def team_status(worker: InProcessWorker) -> dict[str, Any]:
    return await worker.get("/api/team")


async def wait_pushed(worker: InProcessWorker) -> None:
    async def pushed() -> bool:
        team = await team_status(worker)
        return team["connected"] and team["backlog"] == 0
    await wait_for(pushed)


async def injects_shop_memory(worker: InProcessWorker) -> bool:
    return "cart.py" in await worker.get("/api/context/inject?project=shop&session=someone-new")


@pytest.mark.postgres  # starts a server of its own
@pytest.mark.slow
@pytest.mark.xdist_group("team")
async def test_postgres_unreachable_at_start_and_lost_mid_run_loses_and_doubles_nothing(tmp_path: Path) -> None:
    with temporary_postgres() as server:
        url = server.create_database("team")
        await trio.to_thread.run_sync(server.stop)
        async with open_worker(tmp_path / "a", **team_settings(url, "laptop", share_projects="shop")) as a:
            # Down from the start: the worker accepts, compresses and injects from SQLite alone.
            for number in range(3):
                await shop_session(a, f"down-at-start-{number}")
            assert await injects_shop_memory(a)
            team = await team_status(a)
            assert not team["connected"] and team["failures"] > 0 and team["backlog"] == 3 * 4
            await trio.to_thread.run_sync(server.start)
            await wait_pushed(a)
            assert pg_counts(url) == exact(3)
            # Lost mid-run: the same, and what was stored meanwhile follows once it is back.
            await trio.to_thread.run_sync(server.stop)
            for number in range(3):
                await shop_session(a, f"down-mid-run-{number}")
            assert await injects_shop_memory(a)

            async def noticed() -> bool:
                return not (await team_status(a))["connected"]
            await wait_for(noticed)
            assert (await team_status(a))["backlog"] == 3 * 4
            await trio.to_thread.run_sync(server.start)
            await wait_pushed(a)
        assert pg_counts(url) == exact(6)


@pytest.mark.postgres  # starts a server of its own
@pytest.mark.slow
@pytest.mark.xdist_group("team")
async def test_a_postgres_restart_mid_run_loses_and_doubles_nothing_either_way(tmp_path: Path) -> None:
    with temporary_postgres() as server:
        url = server.create_database("team")
        async with open_worker(tmp_path / "a", **team_settings(url, "laptop", share_projects="shop")) as a, \
                open_worker(tmp_path / "b", **team_settings(url, "desktop", share_projects="shop")) as b:
            sessions = 8
            stored = 0

            async def store_all() -> None:
                nonlocal stored
                for number in range(sessions):
                    await shop_session(a, f"through-a-restart-{number}")
                    stored += 1

            # Down once two sessions are stored, up again once the worker has found it down and one more
            # is stored meanwhile (or all are): the restart falls in the run however fast or slow it goes.
            async def stored_at_least(count: int) -> bool:
                return stored >= min(count, sessions)

            async def noticed_and_stored_at_least(count: int) -> bool:
                return not (await team_status(a))["connected"] and await stored_at_least(count)

            async def restart_midway() -> None:
                await wait_for(lambda: stored_at_least(2), poll=0.01)
                await trio.to_thread.run_sync(server.stop)
                down_at = stored
                await wait_for(lambda: noticed_and_stored_at_least(down_at + 1), poll=0.01)
                await trio.to_thread.run_sync(server.start)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(store_all)
                nursery.start_soon(restart_midway)
            await wait_pushed(a)

            async def b_has_everything() -> bool:
                return len(local_origins_rows(b, "observations")) == 2 * sessions
            await wait_for(b_has_everything)
        assert pg_counts(url) == exact(sessions)
        assert local_origins_rows(b, "observations") == [("laptop", "laptop-user")] * (2 * sessions)


def local_origins_rows(worker: InProcessWorker, table: str) -> list[tuple[str, str]]:
    import apsw

    connection = apsw.Connection(str(worker.settings.db_path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [(str(machine), str(user)) for machine, user in
                connection.execute(f"SELECT origin_machine, origin_user FROM {table} ORDER BY id")]
    finally:
        connection.close()


def local_cursor(data_dir: Path) -> team_rows.OutboxCursor:
    import apsw

    connection = apsw.Connection(str(data_dir / "sessionmem.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return team_rows.read_outbox_cursor(connection, team_rows.OUTBOX)
    finally:
        connection.close()


@pytest.mark.postgres  # starts a server of its own
@pytest.mark.slow
@pytest.mark.xdist_group("team")
def test_a_worker_killed_between_the_team_commit_and_its_cursor_pushes_again_without_duplicates(
        tmp_path: Path, worker_factory: Callable[..., WorkerProcess]) -> None:
    with temporary_postgres() as server:
        url, data = server.create_database("team"), tmp_path / "a"
        server.stop()  # the session is stored whole first; the push begins once the database is back
        env = {"SESSIONMEM_DATABASE_URL": url, "SESSIONMEM_SHARE_PROJECTS": "shop",
               "SESSIONMEM_MACHINE_NAME": "laptop", "SESSIONMEM_USER_NAME": "ann", "SESSIONMEM_EMBEDDER": "none",
               "SESSIONMEM_FAULT_INJECTION": "1", "SESSIONMEM_BATCH_QUIET": "0.05"}
        worker = worker_factory(data, **env)
        before = local_cursor(data)
        send_shop_session(worker, "killed-midway")
        worker.wait_idle()
        (data / KILL_AFTER_PUSH_FILE).touch()
        server.start()
        assert worker.process is not None
        assert worker.process.wait(timeout=SYNC_WAIT_S) == -9  # killed itself right after the team commit
        assert pg_counts(url) == exact(1)  # committed there...
        assert local_cursor(data) == before  # ...and not marked pushed here
        worker = worker_factory(data, **env)  # the outbox pushes the batch again
        worker.wait_until(lambda: local_cursor(data).observation == 2, timeout=SYNC_WAIT_S)
        assert worker.get("/api/team")["backlog"] == 0
        assert pg_counts(url) == exact(1)


def send_shop_session(worker: WorkerClient, session: str) -> None:
    worker.post("/api/sessions/init", {"claudeSessionId": session, "cwd": SHOP, "prompt": "refuse an empty cart"})
    for number, path in enumerate(("src/cart.py", "src/checkout.py")):
        worker.post("/api/sessions/observations", {
            "claudeSessionId": session, "cwd": SHOP, "tool_name": "Edit", "tool_use_id": f"{session}-{number}",
            "tool_input": {"file_path": f"{SHOP}/{path}", "old_string": "a", "new_string": "b"},
            "tool_response": "ok"})
    worker.post("/api/sessions/summarize", {"claudeSessionId": session, "cwd": SHOP,
                                            "last_assistant_message": "Checkout refuses an empty cart."})


def pg_vectors(url: str) -> tuple[int, int]:
    """(observations and summaries with a vector, without one) in the team database."""
    with psycopg.connect(url) as connection:
        row = connection.execute(
            "SELECT count(vector), count(*) - count(vector) FROM"
            " (SELECT vector FROM observations UNION ALL SELECT vector FROM summaries) AS documents").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


@pytest.mark.slow
@pytest.mark.xdist_group("team")
async def test_rows_carry_their_local_vectors_and_those_pushed_without_get_them_later(
        tmp_path: Path, team_database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    url = team_database_url
    settings = team_settings(url, "laptop", share_projects="shop", embedder="minilm")
    async with open_worker(tmp_path / "a", **settings) as a:
        await shop_session(a, "waited-for")
        with trio.fail_after(SYNC_WAIT_S):
            await a.services.index.caught_up()
        await wait_pushed(a)

        async def all_with_vectors() -> bool:
            return pg_vectors(url) == (3, 0)
        await wait_for(all_with_vectors)
        # A push that does not wait for the index (a busy one) sends rows without; they get theirs once it has them.
        monkeypatch.setattr(team_push, "VECTOR_WAIT_BACKLOG", -1)
        await shop_session(a, "not-waited-for")

        async def all_six_with_vectors() -> bool:
            return pg_vectors(url) == (6, 0)
        # Whether a row went without (and was filled) or the index had it by the push is the
        # machine's pace: the promise is that every row ends with its vector, once.
        await wait_for(all_six_with_vectors)
    assert pg_counts(url) == exact(2)


@pytest.mark.slow
@pytest.mark.xdist_group("team")
async def test_the_same_claude_session_resumed_on_another_machine_is_one_session_everywhere(
        tmp_path: Path, team_database_url: str) -> None:
    url = team_database_url
    async with open_worker(tmp_path / "a", **team_settings(url, "laptop", share_projects="shop")) as a, \
            open_worker(tmp_path / "b", **team_settings(url, "desktop", share_projects="shop")) as b:
        await store_session(a, "one-session", SHOP, "begin the cart rework on the laptop", [
            ("Edit", {"file_path": f"{SHOP}/src/cart.py", "old_string": "a", "new_string": "b"}),
            ("Edit", {"file_path": f"{SHOP}/src/price.py", "old_string": "a", "new_string": "b"}),
        ])

        async def b_has_it() -> bool:
            return len(local_origins_rows(b, "observations")) == 2
        await wait_for(b_has_it)
        # `claude --resume` on the desktop: the same Claude session id, its next prompt.
        await b.post("/api/sessions/init", {"claudeSessionId": "one-session", "cwd": SHOP,
                                            "prompt": "go on with the cart rework at the desk"})
        reply = await b.request("POST", "/api/sessions/observations", {
            "claudeSessionId": "one-session", "cwd": SHOP, "tool_name": "Edit", "tool_use_id": "desk-0",
            "tool_input": {"file_path": f"{SHOP}/src/checkout.py", "old_string": "a", "new_string": "b"},
            "tool_response": "ok"})
        assert reply.status == 202
        await b.post("/api/sessions/summarize", {"claudeSessionId": "one-session", "cwd": SHOP,
                                                 "last_assistant_message": "The cart rework is done."})
        await b.wait_idle()

        async def a_has_all() -> bool:
            return len(local_origins_rows(a, "observations")) == 3 and len(local_origins_rows(a, "user_prompts")) == 2
        await wait_for(a_has_all)
        await wait_pushed(a)
        await wait_pushed(b)
        assert local_origins_rows(a, "user_prompts") == [("", ""), ("desktop", "desktop-user")]
        assert local_origins_rows(b, "user_prompts") == [("laptop", "laptop-user"), ("", "")]
        for worker in (a, b):
            sessions = (await worker.get("/api/sessions?project=shop"))["sessions"]
            assert [session["claudeSessionId"] for session in sessions] == ["one-session"]
    with psycopg.connect(url) as connection:
        assert connection.execute("SELECT count(*), max(prompt_number) FROM prompts").fetchone() == (2, 2)
    assert pg_counts(url) == {"sessions": 1, "sessions_twice": 0, "prompts": 2, "prompts_twice": 0,
                              "observations": 3, "observations_twice": 0, "summaries": 1, "summaries_twice": 0}


@pytest.mark.slow
@pytest.mark.xdist_group("team")
async def test_share_push_copies_a_shared_projects_past_memory_once_and_refuses_the_others(
        tmp_path: Path, team_database_url: str) -> None:
    url = team_database_url
    async with open_worker(tmp_path / "a", embedder="none", batch_quiet_s=0.05) as a:
        await shop_session(a, "past-1")
        await shop_session(a, "past-2")
        await blog_session(a)
    async with open_worker(tmp_path / "a", **team_settings(url, "laptop", share_projects="shop")) as a:
        for project, why in (("blog", "is not shared"), ("nowhere", "no project")):
            reply = await a.request("POST", "/api/team/push", {"project": project})
            assert reply.status == 409 and why in reply.json()["error"]
        for attempt in range(2):  # the second finds nothing left to copy
            started = await a.post("/api/team/push", {"project": "shop"})
            assert started["project"] == "shop" and started["state"] in ("running", "done")

            async def done() -> dict[str, Any] | None:
                share = (await team_status(a))["sharePush"]
                return share if share["state"] == "done" else None
            share = await wait_for(done)
            assert share["pushed"] == (2 * 5 if attempt == 0 else 0)  # rows + their sessions' records
            assert pg_counts(url) == exact(2)
        assert pg_projects(url) == {"name:shop"}


@pytest.mark.slow
@pytest.mark.xdist_group("team")
def test_share_push_and_status_from_a_terminal(tmp_path: Path, team_database_url: str) -> None:
    data, url = tmp_path / "data", team_database_url
    with serve_in_thread(data, embedder="none", batch_quiet_s=0.05) as worker:
        send_shop_session(worker, "from-before")
        worker.wait_idle()
    settings = team_settings(url, "laptop", share_projects="shop")
    with serve_in_thread(data, **settings) as worker:
        pushed = sessionmem(data, worker.port, "share", "push", "--project", "shop")
        assert pushed.returncode == 0, pushed.stderr
        assert "shop: 5 row(s) of this machine pushed to the team database" in pushed.stdout
        assert "share push shop" in pushed.stderr  # the progress bar
        assert pg_counts(url) == exact(1)
        refused = sessionmem(data, worker.port, "share", "push", "--project", "blog")
        assert refused.returncode == 2 and "no project 'blog' here" in refused.stderr
        status = sessionmem(data, worker.port, "status")
        assert "team: connected as laptop (laptop-user) to " in status.stdout and "; 5 pushed" in status.stdout, \
            status.stdout
        assert "    shop: shared (share_projects)" in status.stdout, status.stdout


def sessionmem(data: Path, port: int, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONMEM_")}
    return subprocess.run([sys.executable, "-m", "sessionmem", *args, "--data-dir", str(data), "--port", str(port)],
                          env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
@pytest.mark.xdist_group("team")
async def test_pulled_rows_are_embedded_by_the_local_index_and_shown_live(tmp_path: Path, team_database_url: str) -> None:
    url = team_database_url
    async with open_worker(tmp_path / "a", **team_settings(url, "laptop", share_projects="shop")) as a, \
            open_worker(tmp_path / "b", **team_settings(url, "desktop", share_projects="*", embedder="minilm")) as b:
        received = b""
        async with b.stream() as chunks:
            received += await chunks.receive()
            await shop_session(a)
            with trio.fail_after(SYNC_WAIT_S):
                while b"event: observation" not in received:
                    received += await chunks.receive()
        assert b'"claudeSessionId":"shop-1"' in received
        with trio.fail_after(SYNC_WAIT_S):
            await b.services.index.caught_up()
        assert (await b.debug())["index"]["vectors"] == 1 + 2 + 1  # the prompt, the observations, the summary
        answer = await b.get("/api/search?q=refuse%20an%20empty%20shopping%20basket&mode=hybrid&limit=5")
        assert answer["vectors"] != "not asked" and answer["results"]


@pytest.mark.slow
@pytest.mark.xdist_group("team")
async def test_a_share_push_stopped_midway_goes_on_from_where_it_stopped(tmp_path: Path, team_database_url: str) -> None:
    url, sessions = team_database_url, 10
    async with open_worker(tmp_path / "a", embedder="none", batch_quiet_s=0.05) as a:
        for number in range(sessions):
            await shop_session(a, f"past-{number}")
    settings = team_settings(url, "laptop", share_projects="shop", team_push_batch=1)
    async with open_worker(tmp_path / "a", **settings) as a:
        first = await a.post("/api/team/push", {"project": "shop"})
        assert first["total"] == sessions * 5  # a session, its prompt, two observations, a summary

        async def under_way() -> dict[str, Any] | None:
            share = (await team_status(a))["sharePush"]
            return share if share["done"] >= 5 else None
        await wait_for(under_way, poll=0.01)
    # The worker stopped (leaving the block) with the push under way, or just done.
    async with open_worker(tmp_path / "a", **settings) as a:
        again = await a.post("/api/team/push", {"project": "shop"})
        assert again["total"] <= first["total"] - 5  # what was read before is not read again

        async def done() -> bool:
            return (await team_status(a))["sharePush"]["state"] == "done"
        await wait_for(done)
    assert pg_counts(url) == exact(sessions)


@pytest.mark.xdist_group("team")
async def test_nothing_unredacted_reaches_the_team_database(tmp_path: Path, team_database_url: str) -> None:
    url = team_database_url
    github, private = "ghp_abcdefghijklmnopqrstuvwxyz0123456789", "the launch codes are 0000"
    async with open_worker(tmp_path / "a", **team_settings(url, "laptop", share_projects="shop")) as a:
        await store_session(a, "secrets", SHOP, f"deploy with token {github} <private>{private}</private> now", [
            ("Bash", {"command": f"GITHUB_TOKEN={github} ./deploy.sh", "description": f"deploy <private>{private}"}),
            ("Edit", {"file_path": f"{SHOP}/.env", "old_string": "TOKEN=", "new_string": f"TOKEN={github}"}),
        ], summary=f"Deployed with {github}. <private>{private}</private>")
        await wait_pushed(a)
    assert pg_counts(url)["observations"] == 2
    with psycopg.connect(url) as connection:
        stored = " ".join(str(row[0]) for table in ("sessions", "prompts", "observations", "summaries")
                          for row in connection.execute(f"SELECT row_to_json(t)::text FROM {table} t").fetchall())
    assert "deploy" in stored  # the rows are there...
    assert github not in stored and "abcdefghijklmnopqrstuvwxyz0123456789" not in stored  # ...without the secret
    assert private not in stored and "launch codes" not in stored  # ...or the private span


@pytest.mark.slow
@pytest.mark.xdist_group("team")
async def test_a_project_shared_later_is_pulled_from_its_beginning(tmp_path: Path, team_database_url: str) -> None:
    url = team_database_url
    async with open_worker(tmp_path / "a", **team_settings(url, "laptop", share_projects="shop,blog")) as a:
        async with open_worker(tmp_path / "b", **team_settings(url, "desktop", share_projects="blog")) as b:
            await shop_session(a)
            await blog_session(a)

            async def b_has_blog() -> bool:
                return len(local_origins_rows(b, "observations")) == 1
            await wait_for(b_has_blog)
            assert (await b.services.store.team_pull_state())[0].seq > 0  # past shop's rows, which it left out
        async with open_worker(tmp_path / "b", **team_settings(url, "desktop", share_projects="blog,shop")) as b:
            async def b_has_shop_too() -> bool:
                # The keys are recorded once the catch-up is through, a moment after its rows are visible.
                pulled_keys = (await b.services.store.team_pull_state())[1]
                return len(local_origins_rows(b, "observations")) == 3 and pulled_keys == ["name:blog", "name:shop"]
            await wait_for(b_has_shop_too)
            assert any("cart.py" in title for title in await search_titles(b, "cart"))


@pytest.mark.slow
@pytest.mark.xdist_group("team")
async def test_a_row_the_team_database_refuses_holds_up_nothing_after_it(
        tmp_path: Path, team_database_url: str) -> None:
    url = team_database_url
    async with open_worker(tmp_path / "a", **team_settings(url, "laptop", share_projects="shop")) as a:
        await shop_session(a, "first")
        await wait_pushed(a)
        with psycopg.connect(url) as connection:  # a row PostgreSQL will not take, whatever the reason
            connection.execute("ALTER TABLE observations ADD CONSTRAINT refuse_poison CHECK (title NOT LIKE '%poison%')")
        await store_session(a, "second", SHOP, "a prompt with a NUL \x00 in it", [
            ("Edit", {"file_path": f"{SHOP}/poison.py", "old_string": "a", "new_string": "b"}),
            ("Edit", {"file_path": f"{SHOP}/fine.py", "old_string": "a\x00", "new_string": "b"}),
        ], summary="Both files changed.")
        await shop_session(a, "third")
        await wait_pushed(a)
        team = await team_status(a)
        assert team["refused"] == 1 and team["backlog"] == 0
    with psycopg.connect(url) as connection:
        titles = [str(title) for (title,) in connection.execute("SELECT title FROM observations")]
        prompt = connection.execute("SELECT text FROM prompts WHERE claude_session_id = 'second'").fetchone()
    assert len(titles) == 2 + 1 + 2 and not any("poison" in title for title in titles)
    assert prompt == ("a prompt with a NUL \ufffd in it",)  # PostgreSQL's text holds no NUL


@pytest.mark.xdist_group("team")
async def test_the_team_routes_answer_bad_input_with_a_4xx(tmp_path: Path, team_database_url: str) -> None:
    async with open_worker(tmp_path / "a", **team_settings(team_database_url, "laptop", share_projects="shop")) as a:
        await shop_session(a)
        for raw in (b"", b"{", b"[]", b"{}", b'{"project": ""}', b'{"project": 5}',
                    b'{"project": "' + b"p" * 2000 + b'"}', b"\xff\xfe"):
            reply = await a.request("POST", "/api/team/push", raw=raw)
            assert 400 <= reply.status < 500, (raw[:40], reply.status)
        assert (await a.request("POST", "/api/team/push", {"project": "personal"})).status == 409  # not shared
        for query in ("q=cart&source=bogus", "q=cart%00&source=team", "q=cart&source=team&project=sh%00op",
                      "q=cart&source=team&origin=a%00b", "q=cart&source=team&limit=-1", "q=cart&source=team&since=x",
                      "q=cart&source=team&mode=nope", "q=cart&source=team&type=%00", "q=cart&source=team&file=%00"):
            reply = await a.request("GET", f"/api/search?{query}")
            assert reply.status < 500, (query, reply.status, reply.body[:300])
        assert (await a.request("GET", "/api/search?q=cart&source=team")).status == 200
