"""The agent filter through a memory's session (what ships) against a column of its own (the alternative).

A store of ``--observations`` observations in 2,000 sessions of 20 projects, the real schema: one
agent (``codex``) on a tenth of the sessions, one (``opencode``) on a single session, one
(``gemini-cli``) on none. For each agent, the median of ``--runs`` calls: the ids of the newest 50
of one project and of all under what ships (``storage/sqlite/agents.py``'s condition, as the
observation list adds it), and ``fulltext.keep_matching`` of 400 candidates (a search's filter),
beside the same reads against an indexed copy of the agent on the observations, and the session
join left to SQLite's own choice of index. Prints one line a read; writes nothing
outside a temporary directory.

    .venv/bin/python bench/agent_filter.py [--observations 100000] [--runs 30]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw

from sessionmem.records import OBSERVATION, SearchFilters
from sessionmem.storage.sqlite.agents import agent_condition
from sessionmem.storage.sqlite.fulltext import keep_matching
from sessionmem.storage.sqlite.schema import migrate

SESSIONS = 2000
PROJECTS = 20
CANDIDATES = 400


def build(path: Path, observations: int) -> tuple[apsw.Connection, dict[int, str]]:
    """The store, with ``observations.agent_copy`` (indexed) standing for the column not taken."""
    connection = apsw.Connection(str(path))
    migrate(connection)
    rng = random.Random(1)
    project = {i: f"p{rng.randrange(PROJECTS)}" for i in range(1, SESSIONS + 1)}
    with connection:
        connection.executemany(
            "INSERT INTO sessions (id, claude_session_id, project, created_at, updated_at, agent) VALUES (?, ?, ?, ?, ?, ?)",
            [(i, f"s{i}", project[i], i, i, "opencode" if i == 7 else "codex" if i % 10 == 0 else "claude-code")
             for i in range(1, SESSIONS + 1)])
        rows = []
        for j in range(1, observations + 1):
            session = rng.randint(1, SESSIONS)
            rows.append((j, session, project[session], j, f"t{j}", f"title {j}", j, j))
        connection.executemany(
            "INSERT INTO observations (id, session_db_id, project, prompt_number, event_id, tool_name, tool_use_id,"
            " type, title, compressed, compressor, created_at, stored_at) VALUES (?, ?, ?, 1, ?, 'Edit', ?, 'change',"
            " ?, 1, 'offline', ?, ?)", rows)
        connection.execute("ALTER TABLE observations ADD COLUMN agent_copy TEXT NOT NULL DEFAULT 'claude-code'")
        connection.execute("UPDATE observations SET agent_copy = (SELECT agent FROM sessions s WHERE s.id = session_db_id)")
        connection.execute("CREATE INDEX observations_agent_copy ON observations (project, agent_copy, created_at)")
        connection.execute("CREATE INDEX observations_agent_copy_all ON observations (agent_copy, created_at)")
    connection.execute("ANALYZE")
    return connection, project


def median_ms(call: Callable[[], Any], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--observations", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        connection, project = build(Path(work) / "agents.db", args.observations)
        big = project[7]  # the project of opencode's one session
        ids_checked = random.Random(2).sample(range(1, args.observations + 1), CANDIDATES)
        candidates = [(OBSERVATION, row_id) for row_id in ids_checked]
        newest = "SELECT id FROM observations o WHERE {} ORDER BY created_at DESC, id DESC LIMIT 50"

        def ids(condition: str, params: dict[str, Any]) -> list[Any]:
            return connection.execute(newest.format(condition), params).fetchall()

        for agent in ("codex", "claude-code", "opencode", "gemini-cli"):
            params: dict[str, Any] = {"project": big}
            shipped = agent_condition("o", agent, params)  # adds :agent
            reads: dict[str, Callable[[], Any]] = {
                "newest 50 of a project, through the session (shipped)":
                    lambda: ids(f"o.project = :project AND {shipped}", params),  # noqa: B023
                "newest 50 of a project, own column":
                    lambda: ids("o.project = :project AND o.agent_copy = :agent", params),  # noqa: B023
                "newest 50 of all, through the session (shipped)": lambda: ids(shipped, params),  # noqa: B023
                "newest 50 of all, own column": lambda: ids("o.agent_copy = :agent", params),  # noqa: B023
                "newest 50 of all, the join on SQLite's choice of index": lambda: ids(
                    "o.session_db_id IN (SELECT id FROM sessions WHERE agent = :agent)", params),  # noqa: B023
                f"{CANDIDATES} candidates checked, through the session (shipped)": lambda: keep_matching(
                    connection, candidates, SearchFilters(agent=agent)),  # noqa: B023
                f"{CANDIDATES} candidates checked, own column": lambda: connection.execute(
                    "SELECT id FROM observations WHERE id IN (SELECT value FROM json_each(?)) AND agent_copy = ?",
                    (json.dumps(ids_checked), agent)).fetchall(),  # noqa: B023
            }
            for name, call in reads.items():
                print(f"{agent:12} {name:58} {median_ms(call, args.runs):8.3f} ms")
        connection.close()


if __name__ == "__main__":
    main()
