"""One memory for every coding agent: each memory records the agent whose session made it, every surface
shows it and filters by it, and the handover says which agent made what another agent's session is told.

A real worker over real HTTP on a real SQLite file; the requests are built as the hooks build them
(:func:`sessionmem.protocol.requests.api_call` with the agent the hook names).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import apsw
import psycopg
import pytest

from sessionmem.protocol import routes
from sessionmem.protocol.agents import AGENT_FIELD, AGENT_TITLES, AGENTS, CLAUDE_CODE, CODEX, GEMINI_CLI
from sessionmem.protocol.requests import api_call
from sessionmem.records import SummaryRow
from sessionmem.search.context import ContextLine, ContextPlan, SessionGroup
from sessionmem.server.context_markdown import render_context
from sessionmem.settings import DATABASE_FILE
from sessionmem.storage.export_records import SessionRecord
from sessionmem.storage.pg.store import open_team_store
from sessionmem.storage.sqlite.schema import MIGRATIONS
from sessionmem.storage.team_records import PullCursor, SharedRow
from sessionmem.testing.harness import ThreadedWorker, serve_in_thread

from .test_mcp import answer, mcp_session
from .test_pg_store import APP, LAPTOP
from .test_search_cli import sessionmem
from .test_team_pull_rules import insert
from .test_team_sync import SYNC_WAIT_S, team_settings

WEB_ASSETS = Path(__file__).resolve().parent.parent / "web"


def hook(worker: ThreadedWorker, payload: dict[str, Any], agent: str = CLAUDE_CODE) -> tuple[int, Any]:
    """What the hook of ``agent`` sends for ``payload`` (a SessionStart: the context it is answered)."""
    call = api_call(payload, agent=agent)
    assert call is not None
    method, path, body = call
    return worker.request(method, path, body, timeout=60.0)


def sent(worker: ThreadedWorker, payload: dict[str, Any], agent: str = CLAUDE_CODE) -> None:
    status, reply = hook(worker, payload, agent)
    assert status in (200, 202), reply


def get(worker: ThreadedWorker, path: str, **params: Any) -> Any:
    return worker.get(f"{path}?{urlencode(params)}" if params else path)


def one_session(worker: ThreadedWorker, cwd: Path, session: str, agent: str, *, words: str) -> None:
    """A turn of ``agent`` in ``cwd``: a prompt, an edit of calc.py, the end of the turn."""
    base = {"session_id": session, "cwd": str(cwd)}
    sent(worker, {**base, "hook_event_name": "UserPromptSubmit", "prompt": f"Fix the divide bug ({words})"}, agent)
    sent(worker, {**base, "hook_event_name": "PostToolUse", "tool_name": "Edit", "tool_use_id": f"{session}-t1",
                  "tool_input": {"file_path": str(cwd / "calc.py"), "old_string": "return a / b",
                                 "new_string": f"# {words}\nif b == 0:\n    raise ZeroDivisionError\nreturn a / b"},
                  "tool_response": {"filePath": str(cwd / "calc.py")}}, agent)
    sent(worker, {**base, "hook_event_name": "Stop", "last_assistant_message": f"divide fixed ({words})"}, agent)


@pytest.fixture(scope="module")
def memory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """calcproj: a Claude Code session, then a Codex CLI session, in the one project."""
    root = tmp_path_factory.mktemp("agents")
    project = root / "calcproj"
    project.mkdir()
    with serve_in_thread(root / "data", embedder="none", batch_quiet_s=0.05) as worker:
        one_session(worker, project, "claude-1", CLAUDE_CODE, words="zero check in claude")
        one_session(worker, project, "codex-1", CODEX, words="zero check in codex")
        worker.wait_idle()
        yield {"worker": worker, "project": project}


def sessions_by_id(worker: ThreadedWorker, **params: Any) -> dict[str, dict[str, Any]]:
    return {row["claudeSessionId"]: row for row in get(worker, routes.SESSIONS, limit=100, **params)["sessions"]}


def test_a_hook_names_its_agent_unless_it_is_claude_codes() -> None:
    prompt = {"hook_event_name": "UserPromptSubmit", "session_id": "s", "cwd": "/w/app", "prompt": "hi"}
    start = {"hook_event_name": "SessionStart", "session_id": "s", "cwd": "/w/app", "source": "startup"}
    for payload in (prompt, {**prompt, "hook_event_name": "PostToolUse", "tool_name": "Bash"},
                    {**prompt, "hook_event_name": "Stop"}, {**prompt, "hook_event_name": "SessionEnd"}):
        claude, codex = api_call(payload), api_call(payload, agent=CODEX)
        assert claude is not None and claude[2] is not None and AGENT_FIELD not in claude[2]
        assert codex is not None and codex[2] is not None and codex[2][AGENT_FIELD] == CODEX
    claude_start, codex_start = api_call(start), api_call(start, agent=CODEX)
    assert claude_start is not None and AGENT_FIELD not in parse_qs(urlsplit(claude_start[1]).query)
    assert codex_start is not None and parse_qs(urlsplit(codex_start[1]).query)[AGENT_FIELD] == [CODEX]


def test_each_session_records_its_agent(memory: dict[str, Any]) -> None:
    worker = memory["worker"]
    sessions = sessions_by_id(worker)
    assert (sessions["claude-1"]["agent"], sessions["codex-1"]["agent"]) == (CLAUDE_CODE, CODEX)
    assert sessions["claude-1"]["project"] == sessions["codex-1"]["project"] == "calcproj"  # one project
    assert set(sessions_by_id(worker, agent=CODEX)) == {"codex-1"}
    assert "codex-1" not in sessions_by_id(worker, agent=CLAUDE_CODE)


def test_a_later_event_cannot_change_a_sessions_agent(memory: dict[str, Any]) -> None:
    worker, project = memory["worker"], memory["project"]
    # A session an observation begins (the worker started mid-session) is that event's agent's.
    sent(worker, {"hook_event_name": "PostToolUse", "session_id": "gemini-1", "cwd": str(project),
                  "tool_name": "Bash", "tool_use_id": "g1", "tool_input": {"command": "ls"}}, GEMINI_CLI)
    for agent in (CLAUDE_CODE, CODEX):
        sent(worker, {"hook_event_name": "UserPromptSubmit", "session_id": "gemini-1", "cwd": str(project),
                      "prompt": f"carry on, says {agent}"}, agent)
        sent(worker, {"hook_event_name": "Stop", "session_id": "gemini-1", "cwd": str(project),
                      "last_assistant_message": "done"}, agent)
    sent(worker, {"hook_event_name": "UserPromptSubmit", "session_id": "codex-1", "cwd": str(project),
                  "prompt": "one more thing"}, CLAUDE_CODE)
    worker.wait_idle()
    sessions = sessions_by_id(worker)
    assert (sessions["gemini-1"]["agent"], sessions["codex-1"]["agent"]) == (GEMINI_CLI, CODEX)
    rows = get(worker, routes.OBSERVATION_LIST, agent=GEMINI_CLI)["observations"]
    assert rows and {row["claudeSessionId"] for row in rows} == {"gemini-1"}


def test_search_filters_by_agent_and_each_hit_names_it(memory: dict[str, Any]) -> None:
    worker = memory["worker"]
    everything = get(worker, routes.SEARCH, q="divide zero check", project="calcproj", mode="fts")["results"]
    assert {hit["agent"] for hit in everything} >= {CLAUDE_CODE, CODEX}
    for agent, session in ((CODEX, "codex-1"), (CLAUDE_CODE, "claude-1")):
        for mode in ("fts", "hybrid"):
            hits = get(worker, routes.SEARCH, q="divide zero check", project="calcproj", mode=mode,
                       agent=agent)["results"]
            assert hits and {hit["agent"] for hit in hits} == {agent}, (agent, mode)
            assert session in {hit["claudeSessionId"] for hit in hits}
        kinds = {hit["kind"] for hit in get(worker, routes.SEARCH, q="divide", mode="fts", agent=agent)["results"]}
        assert kinds == {"observation", "summary", "prompt"}  # every kind is its session's agent's
    assert get(worker, routes.SEARCH, q="divide", mode="fts", agent="*")["results"]  # "*": every agent


def test_lists_and_records_carry_their_agent(memory: dict[str, Any]) -> None:
    worker = memory["worker"]
    codex = get(worker, routes.OBSERVATION_LIST, project="calcproj", agent=CODEX)["observations"]
    assert codex and {(row["agent"], row["claudeSessionId"]) for row in codex} == {(CODEX, "codex-1")}
    claude = get(worker, routes.OBSERVATION_LIST, project="calcproj", agent=CLAUDE_CODE)["observations"]
    assert claude and {row["agent"] for row in claude} == {CLAUDE_CODE}
    summaries = get(worker, routes.SUMMARIES, project="calcproj", agent=CODEX)["summaries"]
    assert summaries and {row["agent"] for row in summaries} == {CODEX}
    one = worker.get(routes.path(routes.OBSERVATION, observation_id=codex[0]["id"]))
    assert one["agent"] == CODEX
    batch = worker.post(routes.OBSERVATION_BATCH, {"ids": [codex[0]["id"], claude[0]["id"]]})["observations"]
    assert [row["agent"] for row in batch] == [CODEX, CLAUDE_CODE]
    timeline = get(worker, routes.TIMELINE, anchor=codex[0]["id"], before=20, after=20)["entries"]
    assert {entry["agent"] for entry in timeline} >= {CODEX, CLAUDE_CODE}


def test_the_handover_names_the_agent_that_made_another_agents_memory(memory: dict[str, Any]) -> None:
    worker, project = memory["worker"], memory["project"]
    start = {"hook_event_name": "SessionStart", "cwd": str(project), "source": "startup"}
    status, claude = hook(worker, {**start, "session_id": "claude-2"})
    assert status == 200
    status, codex = hook(worker, {**start, "session_id": "codex-2"}, CODEX)
    assert status == 200
    # A Claude Code session is told which lines Codex CLI made, and the other way round; its own say nothing.
    assert f"({AGENT_TITLES[CODEX]})" in claude and f"({AGENT_TITLES[CLAUDE_CODE]})" not in claude
    assert f"({AGENT_TITLES[CLAUDE_CODE]})" in codex and f"({AGENT_TITLES[CODEX]})" not in codex
    marked = [line for line in claude.splitlines() if f"({AGENT_TITLES[CODEX]})" in line]
    assert any(line.startswith("### ") and "in codex" in line for line in marked)  # its session's heading
    assert "zero check in claude" in codex and "zero check in codex" in claude  # each sees the other's work


def test_file_recall_names_the_agent_that_made_another_agents_memory(memory: dict[str, Any]) -> None:
    worker, project = memory["worker"], memory["project"]
    sent(worker, {"hook_event_name": "PostToolUse", "session_id": "claude-1", "cwd": str(project), "tool_name": "Edit",
                  "tool_use_id": "claude-1-notes", "tool_input": {"file_path": str(project / "notes.md"),
                                                                  "old_string": "a", "new_string": "divide notes"},
                  "tool_response": {"filePath": str(project / "notes.md")}})
    worker.wait_idle()

    def recalled(agent: str, session: str, name: str) -> str:
        status, reply = hook(worker, {"hook_event_name": "PostToolUse", "session_id": session, "cwd": str(project),
                                      "tool_name": "Read", "tool_use_id": f"{session}-{name}",
                                      "tool_input": {"file_path": str(project / name)}, "tool_response": "..."}, agent)
        assert status == 202, reply
        return str(reply["additionalContext"])

    claude_reads_calc, codex_reads_calc = recalled(CLAUDE_CODE, "claude-3", "calc.py"), recalled(CODEX, "codex-3",
                                                                                                   "calc.py")
    assert f", {AGENT_TITLES[CODEX]})" in claude_reads_calc  # Codex CLI's edit, recalled to Claude Code
    assert "in codex" in codex_reads_calc and AGENT_TITLES[CODEX] not in codex_reads_calc  # its own: no mark
    assert f", {AGENT_TITLES[CLAUDE_CODE]})" in recalled(CODEX, "codex-3", "notes.md")


def test_prompt_recall_names_the_agent_that_made_another_agents_memory(memory: dict[str, Any]) -> None:
    worker, project = memory["worker"], memory["project"]
    status, reply = hook(worker, {"hook_event_name": "UserPromptSubmit", "session_id": "codex-4", "cwd": str(project),
                                  "prompt": "what was the zero check in claude about"}, CODEX)
    assert status == 200, reply
    lines = [line for line in reply["additionalContext"].splitlines() if "in claude" in line]
    assert lines and all(f", {AGENT_TITLES[CLAUDE_CODE]})" in line for line in lines)


def test_the_marks_stay_within_the_contexts_budget() -> None:
    summary = SummaryRow(id=1, claude_session_id="c", project="p", prompt_number=1, request="Port it",
                         investigated="", learned="", completed="done", next_steps="", notes="", compressed=True,
                         compressor="offline", model=None, input_tokens=0, output_tokens=0, created_at=0.0,
                         agent=CODEX)
    groups = [SessionGroup(f"s{n}", float(n), f"request {n}", [ContextLine([n], "change", f"Changed {n} " * 8, "",
                                                                            float(n))], "", CODEX)
              for n in range(1, 60)]
    plan = ContextPlan("p", summary, "", "recency", groups, [summary])
    for budget in (300, 600, 1200):
        text, _ = render_context(plan, token_budget=budget, agent=CLAUDE_CODE)
        assert (len(text) + 3) // 4 <= budget
        assert "(Codex CLI)" in text
    text, _ = render_context(plan, token_budget=800, agent=CODEX)
    assert "Codex CLI" not in text  # the asking agent's own memories say nothing


def test_an_unknown_agent_is_refused_and_nothing_is_stored(memory: dict[str, Any]) -> None:
    worker, project = memory["worker"], memory["project"]
    base = {"claudeSessionId": "cursor-1", "cwd": str(project), AGENT_FIELD: "cursor"}
    for path, body in ((routes.INIT, {"prompt": "hello"}),
                       (routes.OBSERVATIONS, {"tool_name": "Bash", "tool_use_id": "x1"}),
                       (routes.SUMMARIZE, {"last_assistant_message": "done"}),
                       (routes.COMPLETE, {"reason": "exit"})):
        status, reply = worker.request("POST", path, {**base, **body})
        assert status == 400, (path, reply)
        assert "unknown agent 'cursor'" in reply["error"] and all(name in reply["error"] for name in AGENTS)
    status, reply = worker.request("POST", routes.INIT, {**base, AGENT_FIELD: 7, "prompt": "hello"})
    assert status == 400 and reply["path"] == "$.agent"
    assert "cursor-1" not in sessions_by_id(worker)
    assert not get(worker, routes.SEARCH, q="hello", mode="fts")["results"]
    for path, params in ((routes.SEARCH, {"q": "divide"}), (routes.OBSERVATION_LIST, {}), (routes.SESSIONS, {}),
                         (routes.SUMMARIES, {}), (routes.CONTEXT, {"project": "calcproj"})):
        status, reply = worker.request("GET", f"{path}?{urlencode({**params, AGENT_FIELD: 'cursor'})}")
        assert status == 400 and reply["path"] == "?agent", (path, reply)


def test_the_command_line_filters_by_agent_and_names_it(memory: dict[str, Any]) -> None:
    worker = memory["worker"]
    found = sessionmem(worker.data_dir, worker.port, "search", "divide", "--mode", "fts", "--agent", CODEX)
    assert found.returncode == 0, found.stderr
    hits = [line for line in found.stdout.splitlines() if "  calcproj  " in line]
    assert hits and all(AGENT_TITLES[CODEX] in line for line in hits)
    everything = sessionmem(worker.data_dir, worker.port, "search", "divide", "--mode", "fts").stdout
    assert AGENT_TITLES[CLAUDE_CODE] in everything and AGENT_TITLES[CODEX] in everything
    refused = sessionmem(worker.data_dir, worker.port, "search", "divide", "--agent", "cursor")
    assert refused.returncode == 2 and "invalid choice" in refused.stderr


async def test_the_mcp_search_filters_by_agent_and_names_it(memory: dict[str, Any]) -> None:
    worker = memory["worker"]
    async with mcp_session(worker.data_dir, memory["project"]) as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert set(tools["search"].input_schema["properties"][AGENT_FIELD]["anyOf"][0]["enum"]) == set(AGENTS)
        codex = await answer(session, "search", {"query": "divide", "mode": "fts", AGENT_FIELD: CODEX})
        everything = await answer(session, "search", {"query": "divide", "mode": "fts"})
        records = await answer(session, "get_observations", {"ids": [
            row["id"] for row in get(worker, routes.OBSERVATION_LIST, agent=CODEX)["observations"]][:1]})
    hits = [line for line in codex.splitlines() if " | " in line and not line.startswith("Next:")]
    assert hits and all(f"| {AGENT_TITLES[CODEX]} |" in line for line in hits)
    assert f"| {AGENT_TITLES[CLAUDE_CODE]} |" in everything
    assert f"| {AGENT_TITLES[CODEX]}" in records


def test_export_then_import_keeps_each_sessions_agent(memory: dict[str, Any], tmp_path: Path) -> None:
    page = memory["worker"].get(f"{routes.EXPORT}?project=calcproj")
    records = page["records"]
    agents = {record["claudeSessionId"]: record.get(AGENT_FIELD) for record in records if record["kind"] == "session"}
    assert agents["codex-1"] == CODEX and agents["claude-1"] == CLAUDE_CODE
    with serve_in_thread(tmp_path / "other", embedder="none", batch_quiet_s=0.05) as other:
        # An unknown agent is a malformed record: the request is refused, nothing of it stored.
        bad = [dict(record, agent="cursor") if record["kind"] == "session" else record for record in records]
        status, reply = other.request("POST", routes.IMPORT, {"records": bad})
        assert status == 400 and ".agent" in reply["path"], reply
        assert not sessions_by_id(other)
        # A session record without an agent (an export of before) is Claude Code's.
        old = {"kind": "session", "claudeSessionId": "old-1", "project": "calcproj", "createdAt": 1.0}
        assert other.post(routes.IMPORT, {"records": [old, *records]})["sessions"] == len(agents) + 1
        sessions = sessions_by_id(other)
        assert {name: sessions[name]["agent"] for name in agents} == agents
        assert sessions["old-1"]["agent"] == CLAUDE_CODE
        assert {row["agent"] for row in get(other, routes.OBSERVATION_LIST, agent=CODEX)["observations"]} == {CODEX}


def test_the_upgrade_makes_every_older_session_claude_codes(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o700)
    connection = apsw.Connection(str(data_dir / DATABASE_FILE))
    for version, script in enumerate(MIGRATIONS[:10], 1):
        with connection:
            connection.execute(script)
            connection.execute(f"PRAGMA user_version = {version}")
    with connection:
        connection.execute("INSERT INTO sessions (id, claude_session_id, project, created_at, updated_at)"
                           " VALUES (1, 'old-1', 'app', 1, 1)")
        connection.execute(
            "INSERT INTO observations (session_db_id, project, prompt_number, event_id, tool_name, tool_use_id, type,"
            " title, compressed, compressor, created_at, stored_at) VALUES (1, 'app', 1, 0, 'Edit', 't1', 'change',"
            " 'old work on app', 1, 'offline', 1, 1)")
    connection.close()
    with serve_in_thread(data_dir, embedder="none", batch_quiet_s=0.05) as worker:
        assert sessions_by_id(worker)["old-1"]["agent"] == CLAUDE_CODE
        assert [row["title"] for row in get(worker, routes.OBSERVATION_LIST, agent=CLAUDE_CODE)["observations"]] == [
            "old work on app"]
        assert get(worker, routes.OBSERVATION_LIST, agent=CODEX)["observations"] == []


def test_the_viewer_knows_every_agent_by_its_title() -> None:
    cards = (WEB_ASSETS / "assets" / "cards.js").read_text()
    table = cards.split("export const AGENT_TITLES = ", 1)[1].split(";", 1)[0]
    assert json.loads(table) == AGENT_TITLES
    viewer = (WEB_ASSETS / "pages" / "viewer.html").read_text()
    select = viewer.split('<select id="agent"', 1)[1].split("</select>", 1)[0]
    for agent in AGENTS:
        assert f'<option value="{agent}">{AGENT_TITLES[agent]}</option>' in select


async def test_the_team_database_keeps_a_sessions_first_agent_and_a_pull_refuses_an_unknown_one(
        team_database_url: str) -> None:
    def pushed(agent: str, updated_at: float) -> SharedRow:
        record = SessionRecord(claude_session_id="codex-team", project="app", created_at=100.0, updated_at=updated_at,
                               agent=agent)  # type: ignore[arg-type]
        return SharedRow(record=record, project_key=APP, origin=LAPTOP)

    async with open_team_store(team_database_url) as store:
        await store.push([pushed(CODEX, 100.0)])
        await store.push([pushed(CLAUDE_CODE, 200.0)])  # a later change of the session: merged, its agent kept
    with psycopg.connect(team_database_url, autocommit=True) as connection:
        insert(connection, "sessions", claude_session_id="cursor-team", project="app", project_key=APP,
               created_at=100.0, agent="cursor")
    async with open_team_store(team_database_url) as store:
        batch = await store.pull(PullCursor(), keys=None, exclude_machine_id="another", limit=100)
    (pulled,) = [row.record for row in batch.rows]
    assert isinstance(pulled, SessionRecord) and (pulled.agent, pulled.updated_at) == (CODEX, 200.0)
    assert [(row.table, row.claude_session_id) for row in batch.refused] == [("sessions", "cursor-team")]
    assert batch.refused[0].reason.endswith("`$.record.agent`") and "cursor" not in batch.refused[0].reason


@pytest.mark.slow
def test_a_teammates_codex_session_arrives_as_codexs(tmp_path: Path, team_database_url: str) -> None:
    project = tmp_path / "calcproj"
    project.mkdir()
    with serve_in_thread(tmp_path / "a", **team_settings(team_database_url, "laptop", share_projects="calcproj")) as a:
        one_session(a, project, "codex-shared", CODEX, words="shared from the laptop")
        a.wait_idle()
        with serve_in_thread(tmp_path / "b", **team_settings(team_database_url, "desktop",
                                                             share_projects="calcproj")) as b:
            arrived = b.wait_until(lambda: sessions_by_id(b).get("codex-shared"), timeout=SYNC_WAIT_S)
            assert arrived["agent"] == CODEX
            rows = b.wait_until(lambda: get(b, routes.OBSERVATION_LIST, agent=CODEX)["observations"],
                                timeout=SYNC_WAIT_S)
            assert {(row["agent"], row["origin"]) for row in rows} == {(CODEX, "laptop-user@laptop")}
            # The team database searched itself names the agent of each hit's session; it is not filtered by one.
            hits = get(b, routes.SEARCH, q="shared laptop", mode="fts", source="team")["results"]
            assert hits and {hit["agent"] for hit in hits} == {CODEX}
            status, reply = b.request("GET", f"{routes.SEARCH}?q=shared&source=team&agent=codex")
            assert status == 400 and reply["path"] == "?agent"
