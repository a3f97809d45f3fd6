"""Where a memory came from, everywhere memory is read; and a project's identity kept through the v7 upgrade.

Rows of other machines are written straight into the worker's SQLite file, as a pull
from the team database stores them: origin columns set, nothing else different.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import apsw
import pytest

from sessionmem.protocol import routes
from sessionmem.protocol.git_remote import SHARE_FILE
from sessionmem.records import OBSERVATION, SUMMARY, SearchFilters, SummaryRow
from sessionmem.search.context import ContextLine, ContextPlan, SessionGroup
from sessionmem.server.context_markdown import render_context
from sessionmem.settings import DATABASE_FILE
from sessionmem.storage.sqlite.cards import card_of_row
from sessionmem.storage.sqlite.fulltext import keep_matching
from sessionmem.storage.sqlite.readers import open_reader
from sessionmem.storage.sqlite.schema import MIGRATIONS
from sessionmem.testing.harness import ThreadedWorker, serve_in_thread
from sessionmem.testing.worker_process import WorkerProcess

from .conftest import FIXTURES
from .test_hooks import run_hook
from .test_mcp import answer, mcp_session
from .test_search_cli import sessionmem

SESSION = "c0ffee00-0000-4000-8000-000000000001"


def post(worker: ThreadedWorker, path: str, body: dict[str, Any]) -> None:
    status, reply = worker.request("POST", path, body)
    assert status in (200, 202), reply


def get(worker: ThreadedWorker, path: str, **params: Any) -> Any:
    return worker.get(f"{path}?{urlencode(params)}" if params else path)


@contextmanager
def written_beside_the_worker(db: Path) -> Iterator[apsw.Connection]:
    """A connection to a running worker's database in a write transaction taken at once (BEGIN IMMEDIATE): a
    deferred one reads first, and fails at its first write, without waiting, whenever the worker committed
    meanwhile (SQLITE_BUSY_SNAPSHOT: a busy machine's test failed so)."""
    connection = apsw.Connection(str(db))
    connection.set_busy_timeout(30_000)
    try:
        connection.execute("BEGIN IMMEDIATE")
        try:
            yield connection
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")
    finally:
        connection.close()


def write_foreign_session(db: Path, *, session: str, project: str, machine: str, user: str, title: str,
                          at: float) -> dict[str, int]:
    """A session another machine wrote (a prompt, an observation about calc.py, a summary), as pulled."""
    with written_beside_the_worker(db) as connection:
        connection.execute("INSERT INTO sessions (claude_session_id, project, created_at, updated_at, first_prompt,"
                           " prompt_counter, status) VALUES (?, ?, ?, ?, ?, 1, 'completed')",
                           (session, project, at, at, f"{title}: the prompt"))
        session_db_id = connection.last_insert_rowid()
        connection.execute("INSERT INTO user_prompts (session_db_id, project, prompt_number, text, created_at,"
                           " origin_machine, origin_user) VALUES (?, ?, 1, ?, ?, ?, ?)",
                           (session_db_id, project, f"{title}: the prompt", at - 2, machine, user))
        prompt = connection.last_insert_rowid()
        connection.execute(
            "INSERT INTO observations (session_db_id, project, prompt_number, event_id, tool_name, tool_use_id, type,"
            " title, narrative, files_modified, compressed, compressor, created_at, stored_at, origin_machine,"
            " origin_user) VALUES (?, ?, 1, 0, 'Edit', 'remote-t1', 'bugfix', ?, 'divide handled on another machine',"
            " '[\"calc.py\"]', 1, 'offline', ?, ?, ?, ?)",
            (session_db_id, project, title, at, at, machine, user))
        observation = connection.last_insert_rowid()
        connection.execute(
            "INSERT INTO session_summaries (session_db_id, project, prompt_number, event_id, request, completed,"
            " compressed, compressor, created_at, stored_at, origin_machine, origin_user)"
            " VALUES (?, ?, 1, -?, ?, 'divide ported', 1, 'offline', ?, ?, ?, ?)",
            (session_db_id, project, session_db_id, f"{title}: the request", at + 2, at + 2, machine, user))
        summary = connection.last_insert_rowid()
    return {"observation": observation, "summary": summary, "prompt": prompt}


@pytest.fixture(scope="module")
def memory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """calcproj: this machine's session (a prompt, an edit, a summary), bob@laptop's and carol@desk's."""
    root = tmp_path_factory.mktemp("origin")
    project = root / "calcproj"
    project.mkdir()
    with serve_in_thread(root / "data", batch_quiet_s=0.05) as worker:
        post(worker, routes.INIT, {"claudeSessionId": SESSION, "cwd": str(project),
                                   "prompt": "Fix the divide bug in calc.py here"})
        post(worker, routes.OBSERVATIONS, {
            "claudeSessionId": SESSION, "cwd": str(project), "tool_name": "Edit", "tool_use_id": "t1",
            "tool_input": {"file_path": str(project / "calc.py"), "old_string": "return a / b",
                           "new_string": "if b == 0:\n    raise ZeroDivisionError('divide by 0')\nreturn a / b"},
            "tool_response": {"filePath": str(project / "calc.py")}})
        post(worker, routes.SUMMARIZE, {"claudeSessionId": SESSION, "last_assistant_message": "divide fixed"})
        worker.wait_idle()
        db = worker.data_dir / DATABASE_FILE
        now = time.time()
        bob = write_foreign_session(db, session="remote-bob", project="calcproj", machine="laptop", user="bob",
                                    title="Divide fix ported on the laptop", at=now - 3600)
        carol = write_foreign_session(db, session="remote-carol", project="calcproj", machine="desk",
                                      user="carol", title="Divide tests written at the desk", at=now - 7200)
        yield {"worker": worker, "project": project, "db": db, "bob": bob, "carol": carol}


def origins_found(worker: ThreadedWorker, **params: Any) -> list[str]:
    reply = get(worker, routes.SEARCH, q="divide", project="calcproj", mode="fts", **params)
    return sorted(result["origin"] for result in reply["results"])


def test_search_shows_and_filters_origins(memory: dict[str, Any]) -> None:
    worker = memory["worker"]
    everything = origins_found(worker)
    assert {"", "bob@laptop", "carol@desk"} <= set(everything)
    assert set(origins_found(worker, origin="local")) == {""}
    assert set(origins_found(worker, origin="bob@laptop")) == {"bob@laptop"}
    assert set(origins_found(worker, origin="laptop")) == {"bob@laptop"}  # a machine name
    assert set(origins_found(worker, origin="carol")) == {"carol@desk"}  # a user name
    assert origins_found(worker, origin="bob@desk") == []
    assert len(origins_found(worker, origin="*")) == len(everything)  # "*" is every origin, as for projects
    # The default mode (words and meaning, or words alone while vectors are off) filters the same.
    hybrid = get(worker, routes.SEARCH, q="divide", project="calcproj", origin="laptop")["results"]
    assert hybrid and {result["origin"] for result in hybrid} == {"bob@laptop"}
    kinds = {result["kind"] for result in get(worker, routes.SEARCH, q="divide", mode="fts", origin="bob")["results"]}
    assert kinds == {"observation", "summary", "prompt"}  # every kind carries its origin


def test_a_vector_candidates_origin_is_checked_with_the_other_filters(memory: dict[str, Any]) -> None:
    bob, carol = memory["bob"], memory["carol"]
    keys = [(OBSERVATION, bob["observation"]), (OBSERVATION, carol["observation"]), (SUMMARY, bob["summary"])]
    connection = open_reader(memory["db"])
    try:
        assert keep_matching(connection, keys, SearchFilters(origin="bob@laptop")) == {
            (OBSERVATION, bob["observation"]), (SUMMARY, bob["summary"])}
        assert keep_matching(connection, keys, SearchFilters(origin="local")) == set()
        assert keep_matching(connection, keys, SearchFilters(project="calcproj", origin="desk",
                                                             kinds=(OBSERVATION,))) == {
            (OBSERVATION, carol["observation"])}
        assert keep_matching(connection, keys, SearchFilters()) == set(keys)
    finally:
        connection.close()


def test_lists_and_records_carry_their_origin(memory: dict[str, Any]) -> None:
    worker = memory["worker"]
    rows = get(worker, routes.OBSERVATION_LIST, project="calcproj")["observations"]
    assert {row["origin"] for row in rows} == {"", "bob@laptop", "carol@desk"}
    assert [row["origin"] for row in get(worker, routes.OBSERVATION_LIST, origin="bob")["observations"]] == [
        "bob@laptop"]
    local = get(worker, routes.OBSERVATION_LIST, origin="local")["observations"]
    assert local and {row["origin"] for row in local} == {""}
    summaries = get(worker, routes.SUMMARIES, project="calcproj", origin="desk")["summaries"]
    assert [summary["origin"] for summary in summaries] == ["carol@desk"]
    one = worker.get(routes.path(routes.OBSERVATION, observation_id=memory["bob"]["observation"]))
    assert one["origin"] == "bob@laptop"
    batch = worker.request("POST", routes.OBSERVATION_BATCH, {"ids": [memory["carol"]["observation"]]})[1]
    assert batch["observations"][0]["origin"] == "carol@desk"


def test_the_timeline_shows_origins_and_keeps_one(memory: dict[str, Any]) -> None:
    worker = memory["worker"]
    anchor = memory["bob"]["observation"]
    around = get(worker, routes.TIMELINE, anchor=anchor, before=20, after=20)["entries"]
    assert {entry["origin"] for entry in around} == {"", "bob@laptop", "carol@desk"}
    only = get(worker, routes.TIMELINE, anchor=anchor, before=20, after=20, origin="bob@laptop")["entries"]
    assert {entry["origin"] for entry in only} == {"bob@laptop"} and len(only) == 3  # prompt, observation, summary
    assert [entry["id"] for entry in only if entry["anchor"]] == [anchor]


def test_sessionstart_marks_other_machines_memories_and_can_keep_this_machines(memory: dict[str, Any]) -> None:
    worker = memory["worker"]
    status, context = worker.request("GET", f"{routes.CONTEXT}?project=calcproj")
    assert status == 200
    assert "Divide fix ported on the laptop" in context and "from bob@laptop" in context
    assert "from carol@desk" in context
    local = worker.request("GET", f"{routes.CONTEXT}?project=calcproj&origin=local")[1]
    assert "laptop" not in local and "desk" not in local and "divide" in local.lower()
    laptop = worker.request("GET", f"{routes.CONTEXT}?project=calcproj&origin=laptop")[1]
    assert "## Last session" in laptop and "from bob@laptop" in laptop and "desk" not in laptop


def test_the_markdown_marks_a_session_once_and_a_line_of_another_origin() -> None:
    summary = SummaryRow(id=1, claude_session_id="s", project="p", prompt_number=1, request="Port it",
                         investigated="", learned="", completed="done", next_steps="", notes="", compressed=True,
                         compressor="offline", model=None, input_tokens=0, output_tokens=0, created_at=0.0,
                         origin="bob@laptop")
    lines = [ContextLine([1], "bugfix", "Fixed on the laptop", "", 0.0, "bob@laptop"),
             ContextLine([2], "change", "Changed here", "", 0.0, "")]
    plan = ContextPlan("p", summary, "", "recency", [
        SessionGroup("s", 0.0, "Port it", lines[:1], "bob@laptop"),
        SessionGroup("t", 0.0, "Mixed", lines, ""),
    ], [])
    text, named = render_context(plan, token_budget=2000)
    assert named == 3
    assert "## Last session (" in text and ", from bob@laptop, unverified)" in text
    heads = [line for line in text.splitlines() if line.startswith("### ")]
    assert heads[0].endswith("· from bob@laptop, unverified") and "from" not in heads[1]
    assert text.count("Fixed on the laptop (from bob@laptop, unverified)") == 1  # marked where its group is not
    assert "Changed here" in text and "Changed here (from" not in text


async def test_the_mcp_search_tool_filters_and_says_where_from(memory: dict[str, Any]) -> None:
    worker = memory["worker"]
    async with mcp_session(worker.data_dir, memory["project"]) as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert "origin" in tools["search"].input_schema["properties"]
        everything = await answer(session, "search", {"query": "divide", "mode": "fts"})
        laptop = await answer(session, "search", {"query": "divide", "mode": "fts", "origin": "bob@laptop"})
        local = await answer(session, "search", {"query": "divide", "mode": "fts", "origin": "local"})
        records = await answer(session, "get_observations", {"ids": [memory["bob"]["observation"]]})
    assert "| from bob@laptop, unverified |" in everything and "| from carol@desk, unverified |" in everything
    hits = [line for line in laptop.splitlines()[2:-1]]  # after the frame's note and the heading
    assert hits and all("| from bob@laptop, unverified |" in line for line in hits)
    assert "from " not in local.split("\n", 1)[1].rsplit("\nNext:", 1)[0]  # this machine's own: no mark
    assert "from bob@laptop" in records


# -- the upgrade from version 6, and a project's identity -----------------------------------------


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def _rows(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    connection = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return {
            "sessions": connection.execute(
                "SELECT claude_session_id, project FROM sessions ORDER BY id").fetchall(),
            "observations": connection.execute("SELECT id, project, title FROM observations ORDER BY id").fetchall(),
            "summaries": connection.execute("SELECT id, project, request FROM session_summaries ORDER BY id").fetchall(),
            "prompts": connection.execute("SELECT id, project, text FROM user_prompts ORDER BY id").fetchall(),
        }
    finally:
        connection.close()


@pytest.mark.slow
def test_a_version_6_store_keeps_its_projects_and_a_new_session_of_the_repository_joins_one(
        tmp_path: Path, worker_factory: Callable[..., WorkerProcess]) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    db = data_dir / DATABASE_FILE
    connection = apsw.Connection(str(db))
    for version, script in enumerate(MIGRATIONS[:6], 1):
        with connection:
            connection.execute(script)
            connection.execute(f"PRAGMA user_version = {version}")
    with connection:
        for number, (session, project) in enumerate([("old-1", "app"), ("old-2", "app"), ("old-3", "notes")], 1):
            connection.execute("INSERT INTO sessions (id, claude_session_id, project, created_at, updated_at,"
                               " prompt_counter, status) VALUES (?, ?, ?, ?, ?, 1, 'completed')",
                               (number, session, project, number, number))
            connection.execute("INSERT INTO user_prompts (session_db_id, project, prompt_number, text, created_at)"
                               " VALUES (?, ?, 1, ?, ?)", (number, project, f"prompt {number} of {project}", number))
            connection.execute(
                "INSERT INTO observations (session_db_id, project, prompt_number, event_id, tool_name, tool_use_id,"
                " type, title, compressed, compressor, created_at, stored_at)"
                " VALUES (?, ?, 1, ?, 'Edit', 't', 'change', ?, 1, 'offline', ?, ?)",
                (number, project, number, f"work {number} on {project}", number, number))
            connection.execute(
                "INSERT INTO session_summaries (session_db_id, project, prompt_number, event_id, request,"
                " compressed, compressor, created_at, stored_at) VALUES (?, ?, 1, ?, ?, 1, 'offline', ?, ?)",
                (number, project, number, f"summary {number} of {project}", number, number))
    connection.close()
    before = _rows(db)

    repository = tmp_path / "elsewhere" / "app"  # the same name, another path: the same project here
    repository.mkdir(parents=True)
    _git("init", "-q", cwd=repository)
    _git("remote", "add", "origin", "https://me:s3cr3t-token@GitHub.com/Me/App.git", cwd=repository)
    (repository / SHARE_FILE).write_text("")
    (repository / "src").mkdir()
    worker = worker_factory(data_dir)
    result = run_hook("UserPromptSubmit", {"hook_event_name": "UserPromptSubmit", "session_id": "new-1",
                                            "cwd": str(repository / "src"), "prompt": "Carry on with the app"},
                      data_dir)
    assert result.returncode == 0 and result.stderr == b""
    sessions = {row["claudeSessionId"]: row for row in worker.get(f"{routes.SESSIONS}?limit=10")["sessions"]}
    assert sessions["new-1"]["project"] == "app"
    assert (sessions["new-1"]["projectKey"], sessions["new-1"]["shareFile"]) == ("github.com/me/app", True)
    assert all((sessions[old]["projectKey"], sessions[old]["shareFile"]) == ("", False)
               for old in ("old-1", "old-2", "old-3"))
    # The new session's memory and the old are one project's.
    titles = [row["title"] for row in worker.get(f"{routes.OBSERVATION_LIST}?project=app")["observations"]]
    assert titles == ["work 2 on app", "work 1 on app"]
    assert {row["origin"] for row in worker.get(routes.OBSERVATION_LIST)["observations"]} == {""}
    worker.stop()

    after = _rows(db)
    assert after["observations"] == before["observations"]
    assert after["summaries"] == before["summaries"]
    assert after["sessions"] == before["sessions"] + [("new-1", "app")]
    assert after["prompts"] == before["prompts"] + [(len(before["prompts"]) + 1, "app", "Carry on with the app")]
    upgraded = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    assert upgraded.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    wal = data_dir / f"{DATABASE_FILE}-wal"
    assert b"s3cr3t" not in db.read_bytes() + (wal.read_bytes() if wal.exists() else b"")
    upgraded.close()


def test_an_init_keeps_a_normalized_key_only_and_a_session_learns_it_from_a_later_prompt(
        worker: ThreadedWorker) -> None:
    post(worker, routes.OBSERVATIONS, {"claudeSessionId": "first-tool", "cwd": "/nowhere/app", "tool_name": "Bash",
                                       "tool_use_id": "t1", "tool_input": {"command": "ls"}})
    post(worker, routes.INIT, {"claudeSessionId": "first-tool", "cwd": "/nowhere/app", "prompt": "go on",
                               "projectKey": "ssh://git:pw@GitHub.com:22/Owner/App.git", "shareFile": True})
    post(worker, routes.INIT, {"claudeSessionId": "a-path", "cwd": "/nowhere/other", "prompt": "hi",
                               "projectKey": "/home/me/other.git"})
    status, reply = worker.request("POST", routes.INIT, {"claudeSessionId": "x", "prompt": "hi",
                                                          "projectKey": ["not", "text"]})
    assert status == 400 and reply["path"] == "$.projectKey"
    sessions = {row["claudeSessionId"]: row for row in worker.get(routes.SESSIONS)["sessions"]}
    assert (sessions["first-tool"]["projectKey"], sessions["first-tool"]["shareFile"]) == ("github.com/owner/app", True)
    assert (sessions["a-path"]["projectKey"], sessions["a-path"]["shareFile"]) == ("", False)


def test_file_recall_says_which_machine_a_memory_of_the_file_came_from(memory: dict[str, Any]) -> None:
    worker = memory["worker"]
    status, reply = worker.request("POST", routes.OBSERVATIONS, {
        "claudeSessionId": "reader", "cwd": str(memory["project"]), "tool_name": "Read", "tool_use_id": "r1",
        "tool_input": {"file_path": "calc.py"}, "tool_response": {"content": "def divide(a, b): ..."}})
    assert status == 202, reply
    assert "Divide fix ported on the laptop" in reply["additionalContext"]
    assert ", from bob@laptop, unverified)" in reply["additionalContext"]


def test_the_command_line_filters_by_origin_and_says_where_from(memory: dict[str, Any]) -> None:
    worker = memory["worker"]
    found = sessionmem(worker.data_dir, worker.port, "search", "divide", "--mode", "fts", "--origin", "laptop")
    assert found.returncode == 0, found.stderr
    assert "calcproj  from bob@laptop, unverified" in found.stdout and "desk" not in found.stdout
    shown = sessionmem(worker.data_dir, worker.port, "show", str(memory["carol"]["observation"]))
    assert "calcproj  from carol@desk, unverified  session remote-carol" in shown.stdout


@pytest.mark.slow
def test_backfill_records_the_repository_of_a_transcript_whose_directory_exists(
        tmp_path: Path, worker: ThreadedWorker) -> None:
    repository = tmp_path / "calcproj"
    repository.mkdir()
    _git("init", "-q", cwd=repository)
    _git("remote", "add", "origin", "git@github.com:Dev/CalcProj.git", cwd=repository)
    recorded = (FIXTURES / "transcripts" / "session-2.1.328.jsonl").read_text(encoding="utf-8")
    assert '"/home/dev/calcproj"' in recorded
    transcripts = tmp_path / "projects" / "calcproj"
    transcripts.mkdir(parents=True)
    (transcripts / "here.jsonl").write_text(recorded.replace('"/home/dev/calcproj"', json.dumps(str(repository))))
    # A session of a directory that is not there (/Users/[USER]): its name alone.
    (transcripts / "gone.jsonl").write_bytes((FIXTURES / "transcripts" / "broken-lines-2.0.jsonl").read_bytes())
    env = {**os.environ, "SESSIONMEM_DATA_DIR": str(worker.data_dir)}
    done = subprocess.run([sys.executable, "-m", "sessionmem", "backfill", str(tmp_path / "projects")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    sessions = {row["claudeSessionId"][:8]: row for row in worker.get(routes.SESSIONS)["sessions"]}
    assert (sessions["19a4c37f"]["project"], sessions["19a4c37f"]["projectKey"]) == (
        "calcproj", "github.com/dev/calcproj")
    assert sessions["e0ce82fa"]["projectKey"] == ""


def test_a_card_row_is_read_with_or_without_its_origin() -> None:
    head = (7, "s", "p", 1, 10.0)
    observation = (*head, "bugfix", "Title", "", "narrative", '["fact"]', "[]", '["a.py"]')
    assert card_of_row(OBSERVATION, observation).origin == ""
    assert card_of_row(OBSERVATION, (*observation, "bob@laptop")).origin == "bob@laptop"
    assert card_of_row(OBSERVATION, observation, "carol@desk").files == ["a.py"]
    summary = card_of_row(SUMMARY, (*head, "Port it", "", "", "done", "", "bob@laptop"))
    assert (summary.title, summary.origin) == ("Port it", "bob@laptop")
