"""The team database on a real PostgreSQL with pgvector: migrations, idempotent pushes, the conflict
rule, the pull cursor (a transaction in flight included), unavailability and recovery, and search
that answers as the SQLite store does."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import psycopg
import pytest
import trio
from pgvector.psycopg import register_vector

from sessionmem.protocol.credentials import sanitized
from sessionmem.records import OBSERVATION, PROMPT, SUMMARY, RankedKey, SearchFilters
from sessionmem.storage.export_records import ObservationRecord, PromptRecord, Record, SessionRecord, SummaryRecord
from sessionmem.storage.pg import schema as pg_schema
from sessionmem.storage.pg.store import TeamStore, TeamUnavailable, open_team_store
from sessionmem.storage.pg.transfer import PullBatch, PushCounts, push_rows
from sessionmem.storage.sqlite.store import open_sqlite_store
from sessionmem.storage.team_records import Origin, PullCursor, SharedRow
from sessionmem.testing.postgres import temporary_postgres

from .processes import running

pytestmark = pytest.mark.slow  # a real PostgreSQL server, one per test process (some tests start their own)

LAPTOP = Origin("machine-laptop", "laptop", "ann")
DESKTOP = Origin("machine-desktop", "desktop", "ann")
SERVER = Origin("machine-server", "build", "bob")
APP = "github.com/acme/app"
TOOLS = "name:tools"


def session(claude_id: str, **fields: Any) -> SessionRecord:
    values: dict[str, Any] = {"project": "app", "status": "active", "created_at": 100.0, "updated_at": 100.0}
    values.update(fields)
    return SessionRecord(claude_session_id=claude_id, **values)


def observation(claude_id: str, tool_use_id: str, title: str, **fields: Any) -> ObservationRecord:
    values: dict[str, Any] = {"project": "app", "prompt_number": 1, "tool_name": "Edit", "type": "change",
                              "created_at": 100.0}
    values.update(fields)
    return ObservationRecord(claude_session_id=claude_id, tool_use_id=tool_use_id, title=title, **values)


def summary(claude_id: str, created_at: float, **fields: Any) -> SummaryRecord:
    return SummaryRecord(claude_session_id=claude_id, project=fields.pop("project", "app"), prompt_number=1,
                         created_at=created_at, **fields)


def shared(record: Record, origin: Origin = LAPTOP, key: str = APP, vector: np.ndarray | None = None,
           model: str = "minilm") -> SharedRow:
    return SharedRow(record=record, project_key=key, origin=origin,
                     vector=None if vector is None else vector.astype(np.float32).tobytes(), model=model)


def a_session(claude_id: str, origin: Origin = LAPTOP, key: str = APP, project: str = "app") -> list[SharedRow]:
    """A session with one prompt, two observations and a summary."""
    return [shared(record, origin, key) for record in (
        session(claude_id, project=project, first_prompt="make the parser faster"),
        PromptRecord(claude_id, 1, "make the parser faster", 100.0),
        observation(claude_id, "t1", "Parser rewritten", project=project),
        observation(claude_id, "t2", "Benchmark of the parser", project=project),
        summary(claude_id, 101.0, project=project, request="faster parser"),
    )]


def identity(row: SharedRow) -> tuple[Any, ...]:
    record = row.record
    if isinstance(record, SessionRecord):
        return ("session", record.claude_session_id)
    if isinstance(record, PromptRecord):
        return ("prompt", record.claude_session_id, record.prompt_number)
    if isinstance(record, ObservationRecord):
        return ("observation", record.claude_session_id, record.tool_use_id)
    return ("summary", record.claude_session_id, record.prompt_number, record.created_at)


def push_before_version_4(connection: psycopg.Connection[Any], rows: Sequence[SharedRow]) -> None:
    """``rows`` pushed into a database of an older schema, as the sessionmem of its time pushed them: a session
    without its agent (version 4's column), the other rows as today."""
    for row in rows:
        record = row.record
        if isinstance(record, SessionRecord):
            connection.execute(
                "INSERT INTO sessions (claude_session_id, first_prompt, status, created_at, updated_at, completed_at,"
                " changed_by, project_key, project, origin_machine_id, origin_machine, origin_user)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (record.claude_session_id, record.first_prompt, record.status, record.created_at, record.updated_at,
                 record.completed_at, row.origin.machine_id, row.project_key, record.project, row.origin.machine_id,
                 row.origin.machine, row.origin.user))
    push_rows(connection, [row for row in rows if not isinstance(row.record, SessionRecord)])


def table_contents(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, every column (xid and seq included)."""
    with psycopg.connect(url) as connection:
        return {table: connection.execute(f"SELECT * FROM {table} ORDER BY id").fetchall()
                for table in ("sessions", "prompts", "observations", "summaries")}


async def pull_all(store: TeamStore, cursor: PullCursor = PullCursor(), *, machine: Origin = SERVER,
                   keys: Sequence[str] | None = None, limit: int = 1000) -> tuple[list[SharedRow], PullCursor]:
    pulled: list[SharedRow] = []
    while True:
        batch = await store.pull(cursor, keys=keys, exclude_machine_id=machine.machine_id, limit=limit)
        assert batch.refused == []
        pulled += batch.rows
        if batch.after == cursor:
            return pulled, cursor
        cursor = batch.after


# -- migrations ---------------------------------------------------------------------------------


async def test_an_empty_database_is_migrated_on_first_use(team_database_url: str) -> None:
    async with open_team_store(team_database_url) as store:
        check = await store.check()
    assert check.schema_version == pg_schema.LATEST == 4
    assert check.server_version.startswith("18") and check.pgvector_version.startswith("0.8")
    with psycopg.connect(team_database_url) as connection:
        indexes = {name for (name,) in connection.execute("SELECT indexname FROM pg_indexes").fetchall()}
    assert {"observations_search", "summaries_search", "prompts_search", "observations_vector",
            "summaries_vector"} <= indexes


async def test_an_upgrade_from_version_1_keeps_the_rows_and_makes_them_searchable(team_database_url: str) -> None:
    vector = np.random.default_rng(1).standard_normal(384)
    rows = [*a_session("s-old"), shared(observation("s-old", "t3", "Tokenizer cache", narrative="kept in memory"),
                                        vector=vector)]
    with psycopg.connect(team_database_url, autocommit=True) as connection:
        assert pg_schema.migrate(connection, to=1) == 1
        indexes = {name for (name,) in connection.execute("SELECT indexname FROM pg_indexes").fetchall()}
        assert "observations_search" not in indexes and "observations_vector" not in indexes
        register_vector(connection)
        push_before_version_4(connection, rows)
    before = table_contents(team_database_url)
    async with open_team_store(team_database_url) as store:
        assert (await store.check()).schema_version == pg_schema.LATEST
        found = await store.search_text("tokenizer", SearchFilters(), 10)
        close = await store.nearest(vector, 1, SearchFilters(), model="minilm")
        pulled, _ = await pull_all(store)
    assert [key.kind for key in found] == [OBSERVATION] and [key.kind for key in close] == [OBSERVATION]
    assert found[0].row_id == close[0].row_id
    assert sorted(map(identity, pulled)) == sorted(map(identity, rows))
    # A session stored before version 4 is Claude Code's (the only agent then).
    assert [row.record.agent for row in pulled if isinstance(row.record, SessionRecord)] == ["claude-code"]
    after = table_contents(team_database_url)
    # The same rows (the new search column aside), in the same pull order.
    assert {table: [row[:len(before_rows[0])] for row in after[table]] for table, before_rows in before.items()} \
        == before


async def test_an_upgrade_from_version_2_with_bad_rows_keeps_them_and_refuses_new_ones(team_database_url: str) -> None:
    """Version 3's CHECK constraints are NOT VALID: a database already holding rows that break the rules of an
    import migrates (its pullers pass those over); a row written after is checked by the database itself."""
    with psycopg.connect(team_database_url, autocommit=True) as connection:
        assert pg_schema.migrate(connection, to=2) == 2
        register_vector(connection)
        push_before_version_4(connection, a_session("s-old"))
        connection.execute("UPDATE observations SET created_at = 'Infinity' WHERE tool_use_id = 't2'")
        connection.execute("UPDATE observations SET facts = '{\"a\": 1}' WHERE tool_use_id = 't1'")
        connection.execute("UPDATE summaries SET created_at = 'NaN'")
    async with open_team_store(team_database_url) as store:
        assert (await store.check()).schema_version == pg_schema.LATEST == 4
        batch = await store.pull(PullCursor(), keys=None, exclude_machine_id="x", limit=100)
        assert [identity(row) for row in batch.rows] == [("session", "s-old"), ("prompt", "s-old", 1)]
        assert [(row.table, row.claude_session_id, row.reason.rsplit(" - at ", 1)[-1]) for row in batch.refused] == [
            ("observations", "s-old", "`$.record.facts`"), ("observations", "s-old", "`$.record.createdAt`"),
            ("summaries", "s-old", "`$.record.createdAt`")]
        assert await store.pull(batch.after, keys=None, exclude_machine_id="x", limit=100) == PullBatch([],
                                                                                                        batch.after)
        assert store.statistics().rows_refused == 3
    with psycopg.connect(team_database_url, autocommit=True) as connection:
        checks = connection.execute("SELECT conname, convalidated FROM pg_constraint WHERE contype = 'c'"
                                    " AND conname LIKE ANY (ARRAY['%_times', '%_lists', '%_lengths'])").fetchall()
        assert len(checks) == 9 and not any(validated for _, validated in checks)
        for statement in ("UPDATE observations SET created_at = 'NaN' WHERE tool_use_id = 't1'",
                          "UPDATE sessions SET updated_at = 1e300",
                          "UPDATE observations SET concepts = '[1, 2]' WHERE tool_use_id = 't2'",
                          "UPDATE observations SET files_read = '\"a\"' WHERE tool_use_id = 't2'",
                          "UPDATE prompts SET text = repeat('x', 2000000)",
                          "UPDATE observations SET title = repeat('x', 1001) WHERE tool_use_id = 't2'"):
            with pytest.raises(psycopg.errors.CheckViolation):
                connection.execute(statement)


def text_bytes(row: SharedRow) -> int:
    """The bytes of a pulled row's texts, as the team database counts them (a list as its JSON; a record's
    provenance is no column of it: a pulled row's is set where it is stored)."""
    record = [value for name, value in zip(row.record.__struct_fields__, msgspec.structs.astuple(row.record))
              if name != "provenance"]
    # A record's project is the row's project column: counted once (a prompt's record has none).
    project = [] if "project" in row.record.__struct_fields__ else [row.project]
    values = [*record, row.project_key, *project, *msgspec.structs.astuple(row.origin)]
    return sum(len(value.encode()) if isinstance(value, str) else len(msgspec.json.encode(value)) + value.count(",")
               if isinstance(value, list) else 0 for value in values)


async def test_a_pull_batch_is_bounded_in_bytes_and_a_row_larger_than_a_batch_is_refused_unread(
        team_database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from sessionmem.storage.pg import transfer as pg_transfer

    rows = [*a_session("s1"), shared(observation("s1", "t-big", "Big", narrative="n" * 3000)), *a_session("s2")]
    async with open_team_store(team_database_url) as store:
        await store.push(rows)
        monkeypatch.setattr(pg_transfer, "PULL_BATCH_BYTES", 400)
        cursor, pulled, refused, batches = PullCursor(), [], [], 0
        while (batch := await store.pull(cursor, keys=None, exclude_machine_id="x", limit=1000)).after != cursor:
            assert sum(map(text_bytes, batch.rows)) <= 400
            pulled += batch.rows
            refused += batch.refused
            cursor, batches = batch.after, batches + 1
    assert batches > 2
    assert sorted(map(identity, pulled)) == sorted(map(identity, [*a_session("s1"), *a_session("s2")]))
    (big,) = refused
    assert big.claude_session_id == "s1" and big.reason.endswith(" bytes, more than a pull batch holds (400)")
    assert int(big.reason.split()[0].replace(",", "")) == text_bytes(rows[5])


async def test_a_database_of_a_newer_schema_is_refused_and_left_alone(team_database_url: str) -> None:
    async with open_team_store(team_database_url) as store:
        await store.push(a_session("s1"))
    with psycopg.connect(team_database_url, autocommit=True) as connection:
        connection.execute("UPDATE schema_version SET version = %s", (pg_schema.LATEST + 1,))
        with pytest.raises(pg_schema.TeamSchemaTooNew, match="newer"):
            pg_schema.migrate(connection)
    async with open_team_store(team_database_url) as store:
        with pytest.raises(TeamUnavailable, match="newer than this sessionmem"):
            await store.push(a_session("s2"))
        with pytest.raises(TeamUnavailable, match="newer than this sessionmem"):
            await store.pull(PullCursor(), keys=None, exclude_machine_id="x", limit=10)
    with psycopg.connect(team_database_url) as connection:
        assert connection.execute("SELECT version FROM schema_version").fetchall() == [(pg_schema.LATEST + 1,)]
        assert connection.execute("SELECT claude_session_id FROM sessions").fetchall() == [("s1",)]


async def test_workers_starting_together_migrate_once(team_database_url: str) -> None:
    checks = []

    async def start() -> None:
        async with open_team_store(team_database_url) as store:
            checks.append(await store.check())

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(start)
    assert [check.schema_version for check in checks] == [pg_schema.LATEST] * 3
    with psycopg.connect(team_database_url) as connection:
        assert connection.execute("SELECT version FROM schema_version").fetchall() == [(pg_schema.LATEST,)]


# -- push -----------------------------------------------------------------------------------------


async def test_a_push_repeated_changes_nothing(team_database_url: str) -> None:
    rows = [*a_session("s1"), *a_session("s2", key=TOOLS, project="tools")]
    async with open_team_store(team_database_url) as store:
        assert await store.push(rows) == PushCounts(inserted=10)
        first = table_contents(team_database_url)
        assert await store.push(rows) == PushCounts(unchanged=10)
        assert await store.push(rows[3:7]) == PushCounts(unchanged=4)  # a part of it, as after a crash
    assert table_contents(team_database_url) == first
    assert [len(rows) for rows in first.values()] == [2, 2, 4, 2]


async def test_a_push_is_one_transaction(team_database_url: str) -> None:
    bad = shared(observation("s1", "t9", "a vector PostgreSQL refuses"), vector=np.full(384, np.nan))
    async with open_team_store(team_database_url) as store:
        with pytest.raises(psycopg.DataError):
            await store.push([*a_session("s1"), bad])
        assert await store.push(a_session("s1")) == PushCounts(inserted=5)  # nothing of the failed push was kept


async def test_nul_characters_are_replaced_in_pushes_queries_and_filters(team_database_url: str) -> None:
    """PostgreSQL's text cannot hold a NUL (SQLite's can): the store replaces it on the way in, alike everywhere."""
    async with open_team_store(team_database_url) as store:
        await store.push([shared(session("s\x00", project="ca\x00rt"), key="name:ca\x00rt"),
                          shared(observation("s\x00", "t1", "checkout\x00refusal", project="ca\x00rt",
                                             facts=["a\x00b"]), key="name:ca\x00rt")])
        found = await store.search_text("checkout\x00refusal", SearchFilters(project="ca\x00rt"), 5,
                                        keys=["name:ca\x00rt"])
        assert len(found) == 1
        card = (await store.cards([(found[0].kind, found[0].row_id)]))[(found[0].kind, found[0].row_id)].card
    assert (card.title, card.project, card.claude_session_id) == ("checkout\ufffdrefusal", "ca\ufffdrt", "s\ufffd")


async def test_no_path_of_the_machine_is_stored(team_database_url: str) -> None:
    row = shared(SessionRecord(claude_session_id="s1", project="app", cwd="/home/ann/src/app"))
    async with open_team_store(team_database_url) as store:
        await store.push([row])
        pulled, _ = await pull_all(store)
    assert pulled[0].record == SessionRecord(claude_session_id="s1", project="app", cwd=None)
    with psycopg.connect(team_database_url) as connection:
        dump = str(connection.execute("SELECT * FROM sessions").fetchall())
    assert "/home/ann" not in dump


async def test_sessions_are_merged_and_facts_keep_the_first_stored(team_database_url: str) -> None:
    async with open_team_store(team_database_url) as store:
        await store.push([shared(session("s1", status="active", created_at=10.0, updated_at=20.0, first_prompt=None)),
                          shared(observation("s1", "t1", "as the laptop saw it"))])
        counts = await store.push([
            shared(session("s1", project="other", status="completed", created_at=5.0, updated_at=15.0,
                           completed_at=15.0, first_prompt="hello"), DESKTOP, key="name:other"),
            shared(observation("s1", "t1", "as the desktop saw it"), DESKTOP)])
        assert counts == PushCounts(merged=1, unchanged=1)
        pulled, _ = await pull_all(store)
        # failed stays failed unless completed; active < completed; initialized < active
        for first, second, merged in [("failed", "active", "failed"), ("active", "failed", "failed"),
                                      ("failed", "completed", "completed"), ("initialized", "active", "active"),
                                      ("completed", "active", "completed"), ("active", "initialized", "active")]:
            claude_id = f"{first}-{second}"
            await store.push([shared(session(claude_id, status=first))])
            await store.push([shared(session(claude_id, status=second), DESKTOP)])
            rows, _ = await pull_all(store)
            (merged_row,) = [row for row in rows if identity(row) == ("session", claude_id)]
            assert isinstance(merged_row.record, SessionRecord) and merged_row.record.status == merged, claude_id
    by_identity = {identity(row): row for row in pulled}
    merged_session = by_identity["session", "s1"]
    assert merged_session.record == SessionRecord(claude_session_id="s1", project="app", status="completed",
                                                  created_at=5.0, updated_at=20.0, completed_at=15.0,
                                                  first_prompt="hello")
    assert merged_session.origin == LAPTOP and merged_session.project_key == APP  # the first writer's
    first_observation = by_identity["observation", "s1", "t1"]
    assert isinstance(first_observation.record, ObservationRecord)
    assert first_observation.record.title == "as the laptop saw it" and first_observation.origin == LAPTOP


async def test_a_vector_pushed_later_fills_a_row_stored_without_one(team_database_url: str) -> None:
    vector = np.random.default_rng(2).standard_normal(384)
    record = observation("s1", "t1", "Parser rewritten")
    async with open_team_store(team_database_url) as store:
        await store.push([shared(record)])
        _, cursor = await pull_all(store)
        assert await store.nearest(vector, 5, SearchFilters(), model="minilm") == []
        assert await store.push([shared(record, vector=vector)]) == PushCounts(vectors=1)
        assert await store.push([shared(record, vector=vector * 2)]) == PushCounts(unchanged=1)
        (close,) = await store.nearest(vector, 5, SearchFilters(), model="minilm")
        assert close.score == pytest.approx(1.0, abs=1e-5)
        assert await store.pull(cursor, keys=None, exclude_machine_id="x", limit=10) == PullBatch([], cursor)


# -- pull -----------------------------------------------------------------------------------------


async def test_pull_pages_through_every_row_once_in_order(team_database_url: str) -> None:
    rows = [row for n in range(7) for row in a_session(f"s{n}")]
    batches = [rows[start:start + 6] for start in range(0, len(rows), 6)]
    async with open_team_store(team_database_url) as store:
        for batch in batches:
            await store.push(batch)
        pulled, cursor = await pull_all(store, limit=4)
        # In the order pushed, each push's sessions first, then its prompts, observations, summaries,
        # each kind in the order of its identity.
        order = ["session", "prompt", "observation", "summary"]
        assert [identity(row) for row in pulled] == [
            identity(row) for batch in batches
            for row in sorted(batch, key=lambda row: (order.index(identity(row)[0]), identity(row)))]
        assert await store.pull(cursor, keys=None, exclude_machine_id="x", limit=4) == PullBatch([], cursor)
        await store.push(a_session("s-late"))
        later, _ = await pull_all(store, cursor, limit=4)
    assert [identity(row) for row in later] == [identity(row) for row in a_session("s-late")]
    assert all(row.origin == LAPTOP and row.project_key == APP for row in pulled)


NEXT_XID = "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint"  # read without taking one


def burn_transaction_ids_until(url: str, next_xid: int) -> None:
    """Use up transaction ids (a subtransaction each, in one transaction) until the next one given is about
    ``next_xid``."""
    with psycopg.connect(url, autocommit=True) as connection:
        (current,) = connection.execute(NEXT_XID).fetchone() or (0,)
        # The DO block's own transaction takes one id, then each subtransaction's insert another.
        burnt = next_xid - current - 1
        if burnt > 0:
            connection.execute("DO $$ BEGIN CREATE TEMP TABLE burn (n int); FOR i IN 1.." + str(burnt) + " LOOP"
                               " BEGIN INSERT INTO burn VALUES (i); EXCEPTION WHEN OTHERS THEN NULL; END;"
                               " END LOOP; END $$")


async def test_pull_pages_through_transaction_ids_that_gain_a_digit(team_database_url: str) -> None:
    """Pushes whose transaction ids go from 9..9 to 10..0: a pull ordered by their text would put the
    longer first and skip every row between."""
    rows = [row for n in range(8) for row in a_session(f"s{n}")]
    batches = [rows[start:start + 6] for start in range(0, len(rows), 6)]
    async with open_team_store(team_database_url) as store:
        await store.check()  # migrated: what follows are the pushes' transactions
        with psycopg.connect(team_database_url, autocommit=True) as connection:
            (current,) = connection.execute(NEXT_XID).fetchone() or (0,)
        digits = 10 ** len(str(current + len(batches)))  # the next power of ten past the pushes' own ids
        burn_transaction_ids_until(team_database_url, digits - len(batches) // 2)
        for batch in batches:
            await store.push(batch)
        with psycopg.connect(team_database_url) as connection:
            xids = [int(x) for (x,) in connection.execute("SELECT DISTINCT xid::text FROM observations").fetchall()]
        assert min(xids) < digits <= max(xids), (xids, digits)  # the premise: they gain a digit
        pulled, _ = await pull_all(store, limit=4)
    assert sorted(identity(row) for row in pulled) == sorted(identity(row) for row in rows)


async def test_pull_leaves_out_the_own_machine_and_unshared_projects(team_database_url: str) -> None:
    async with open_team_store(team_database_url) as store:
        await store.push(a_session("laptop-app"))
        await store.push(a_session("desktop-app", DESKTOP))
        await store.push(a_session("desktop-tools", DESKTOP, key=TOOLS, project="tools"))
        mine_left_out, _ = await pull_all(store, machine=LAPTOP)
        app_only, _ = await pull_all(store, machine=LAPTOP, keys=[APP])
        nothing, _ = await pull_all(store, machine=LAPTOP, keys=[])
    assert {row.record.claude_session_id for row in mine_left_out} == {"desktop-app", "desktop-tools"}
    assert {row.record.claude_session_id for row in app_only} == {"desktop-app"}
    assert nothing == []


async def test_a_project_named_is_pulled_whatever_its_key(team_database_url: str) -> None:
    """share_projects names projects: a machine with no session of "app" yet knows no key for it."""
    async with open_team_store(team_database_url) as store:
        await store.push(a_session("desktop-app", DESKTOP))
        await store.push(a_session("desktop-tools", DESKTOP, key=TOOLS, project="tools"))
        by_name, _ = await pull_all(store, machine=LAPTOP, keys=["name:app"])
    assert {row.record.claude_session_id for row in by_name} == {"desktop-app"}
    assert {row.project_key for row in by_name} == {APP}


async def test_a_merge_of_a_session_reaches_the_machine_that_wrote_it_first(team_database_url: str) -> None:
    async with open_team_store(team_database_url) as store:
        await store.push([shared(session("s1", status="active"))])
        laptop_rows, laptop_cursor = await pull_all(store, machine=LAPTOP)
        desktop_rows, desktop_cursor = await pull_all(store, machine=DESKTOP)
        assert laptop_rows == [] and [identity(row) for row in desktop_rows] == [("session", "s1")]
        await store.push([shared(session("s1", status="completed", completed_at=200.0), DESKTOP)])
        laptop_rows, _ = await pull_all(store, laptop_cursor, machine=LAPTOP)
        desktop_rows, _ = await pull_all(store, desktop_cursor, machine=DESKTOP)
    assert desktop_rows == []  # its own change
    (merged,) = laptop_rows
    assert isinstance(merged.record, SessionRecord) and merged.record.status == "completed"
    assert merged.origin == LAPTOP


async def test_a_transaction_that_commits_late_is_still_pulled(team_database_url: str) -> None:
    """Rows written before a later transaction's, committed after that one's were pulled: a cursor on
    the sequence alone would have passed them for good."""
    async with open_team_store(team_database_url) as store:
        await store.check()  # migrated
        early = a_session("early", DESKTOP)
        late = a_session("late", DESKTOP)
        seen: list[SharedRow] = []
        with psycopg.connect(team_database_url) as slow:  # not autocommit: one transaction until commit()
            register_vector(slow)
            await trio.to_thread.run_sync(push_rows, slow, early)  # inside the open transaction: a savepoint
            await store.push(late)  # a later transaction, committed now
            rows, cursor = await pull_all(store)
            seen += rows
            await trio.to_thread.run_sync(slow.commit)
        rows, cursor = await pull_all(store, cursor)
        seen += rows
        assert await store.pull(cursor, keys=None, exclude_machine_id="x", limit=10) == PullBatch([], cursor)
    assert sorted(map(identity, seen)) == sorted(map(identity, early + late))  # each once, none skipped
    with psycopg.connect(team_database_url) as connection:
        (early_seq, late_seq) = connection.execute(
            "SELECT max(seq) FILTER (WHERE claude_session_id = 'early'), min(seq) FILTER (WHERE claude_session_id"
            " = 'late') FROM observations").fetchone() or (0, 0)
    assert early_seq < late_seq  # the case that matters: the late committer's rows come first in sequence


# -- unavailability --------------------------------------------------------------------------------


def with_password(url: str, password: str) -> str:
    assert url.startswith("postgresql://postgres:@")
    return url.replace("postgresql://postgres:@", f"postgresql://postgres:{password}@", 1)


def test_sanitized_takes_the_password_and_the_url_out() -> None:
    url = "postgresql://ann:pa55-w0rd@db.example:5432/team?sslmode=require"
    message = (f"connection to {url} failed; conninfo host=db.example password=pa55-w0rd user=ann; "
               "postgres://bob:other@x/y")
    cleaned = sanitized(message, url)
    assert "pa55-w0rd" not in cleaned and "other" not in cleaned and "password=***" in cleaned


def test_a_tcp_url_gets_tls_checked_and_scram_and_a_socket_url_nothing(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    from psycopg.conninfo import conninfo_to_dict

    from sessionmem.storage.pg.connections import connection_url, transport

    monkeypatch.delenv("PGHOST", raising=False)
    monkeypatch.delenv("PGHOSTADDR", raising=False)
    monkeypatch.delenv("PGSSLROOTCERT", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.postgresql/root.crt

    def used(url: str) -> dict[str, Any]:
        parameters = conninfo_to_dict(connection_url(url, connect_timeout_s=5))
        return {name: parameters.get(name) for name in ("sslmode", "sslrootcert", "require_auth")}

    secure = {"sslmode": "verify-full", "sslrootcert": "system", "require_auth": "scram-sha-256"}
    for url in ("postgresql://ann@db.example/team", "postgresql://ann@/team?host=db.example",
                "postgresql://ann@/team?host=/run/pg,db.example", "postgresql://ann@/team?hostaddr=10.0.0.7"):
        assert used(url) == secure, url
        assert transport(url).weaker == [] and not transport(url).socket
    for url in ("postgresql://ann@/team?host=/run/postgresql", "postgresql:///team"):
        assert used(url) == dict.fromkeys(secure), url
        assert transport(url).socket and transport(url).describe() == "unix socket"
    monkeypatch.setenv("PGHOST", "db.example")  # what libpq would reach for a URL without a host
    assert used("postgresql:///team") == secure
    # Named in the URL: kept, and what is weaker said.
    named = "postgresql://ann@db.example/team?sslmode=verify-full&sslrootcert=/etc/team-ca.pem"
    assert used(named) == {**secure, "sslrootcert": "/etc/team-ca.pem"} and transport(named).weaker == []
    assert used("postgresql://ann@db.example/team?sslmode=require")["sslrootcert"] is None  # system: verify-full only
    weak = transport("postgresql://ann@db.example/team?sslmode=disable&require_auth=md5")
    assert [line.split(":")[0] for line in weak.weaker] == ["sslmode=disable", "require_auth=md5"]
    assert weak.describe() == "no TLS (sslmode=disable), require_auth=md5"


@pytest.mark.postgres  # starts a server of its own
async def test_a_stopped_server_is_unavailable_and_a_restarted_one_serves_again() -> None:
    password = "s3cret-pa55word"
    with temporary_postgres() as server:
        url = with_password(server.create_database("team"), password)
        async with open_team_store(url, connect_timeout_s=2.0) as store:
            await store.push(a_session("s1"))
            rows, cursor = await pull_all(store)
            assert len(rows) == 5
            await trio.to_thread.run_sync(server.stop)
            for call in (lambda: store.push(a_session("s2")),
                         lambda: store.pull(cursor, keys=None, exclude_machine_id="x", limit=10),
                         lambda: store.search_text("parser", SearchFilters(), 5),
                         store.check):
                started = time.monotonic()
                with pytest.raises(TeamUnavailable) as raised:
                    await call()
                assert time.monotonic() - started < 30  # connect_timeout bounds it, on the busiest machine
                assert password not in str(raised.value) and raised.value.__cause__ is None
                assert raised.value.__suppress_context__
            statistics = store.statistics()
            assert not statistics.connected and statistics.failures >= 4
            assert statistics.last_error and password not in statistics.last_error
            await trio.to_thread.run_sync(server.start)
            # The same store, not reopened: connections are made anew.
            assert await store.push(a_session("s2")) == PushCounts(inserted=5)
            rows, _ = await pull_all(store, cursor)
            assert {row.record.claude_session_id for row in rows} == {"s2"}
            assert len(await store.search_text("parser", SearchFilters(), 20)) >= 8
            assert store.statistics().connected


@pytest.mark.postgres  # starts a server of its own
async def test_a_store_opens_while_the_server_is_down() -> None:
    with temporary_postgres() as server:
        url = server.create_database("team")
        server.stop()
        async with open_team_store(url, connect_timeout_s=1.0) as store:  # does not fail
            with pytest.raises(TeamUnavailable):
                await store.push(a_session("s1"))
            await trio.to_thread.run_sync(server.start)
            assert await store.push(a_session("s1")) == PushCounts(inserted=5)


@pytest.mark.postgres  # starts a server of its own
def test_the_test_server_stops_with_its_owner_even_killed() -> None:
    """A process that started a server and died by SIGKILL leaves no server behind (its watchdog stops
    it), nor its data."""
    owner = subprocess.Popen([sys.executable, "-c", (
        "import time; from sessionmem.testing.postgres import temporary_postgres\n"
        "with temporary_postgres() as server:\n"
        "    print(server.directory, flush=True); time.sleep(600)")], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        data = Path(owner.stdout.readline().strip())
        assert (data / "postmaster.pid").exists()
        pid = int((data / "postmaster.pid").read_text().split()[0])
    finally:
        owner.kill()
        owner.wait()
    deadline = time.monotonic() + 60
    while data.parent.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not data.parent.exists()
    while running(pid) and time.monotonic() < deadline:  # a zombie does not run (in a container, nothing may reap it)
        time.sleep(0.1)
    assert not running(pid)


# -- search ---------------------------------------------------------------------------------------

# A small corpus, stored in SQLite (import) and in the team database (push): the same answers.
CORPUS: list[Record] = [
    session("c1", project="shop", created_at=1000.0, updated_at=1100.0),
    PromptRecord("c1", 1, "the checkout must refuse an empty cart", 1000.0),
    observation("c1", "u1", "Checkout refuses an empty cart", project="shop", type="feature", created_at=1001.0,
                narrative="raise EmptyCart when the cart has no items", facts=["cart.py raises EmptyCart"],
                concepts=["checkout", "validation"], files_modified=["/home/ann/shop/src/cart.py"]),
    observation("c1", "u2", "Cart tests run", project="shop", type="discovery", created_at=1002.0,
                narrative="pytest of the cart module passes", concepts=["testing"],
                files_read=["/home/ann/shop/tests/test_cart.py"]),
    summary("c1", 1003.0, project="shop", request="refuse an empty cart at checkout",
            completed="checkout raises EmptyCart", learned="cart validation lives in cart.py"),
    session("c2", project="shop", created_at=2000.0, updated_at=2100.0),
    PromptRecord("c2", 1, "prices should show two decimals", 2000.0),
    observation("c2", "u3", "Prices formatted with two decimals", project="shop", type="bugfix", created_at=2001.0,
                narrative="price formatting used str(amount), now two decimals", concepts=["formatting"],
                files_modified=["/home/ann/shop/src/price.py"]),
    observation("c2", "u4", "Cart total rounding fixed", project="shop", type="bugfix", created_at=2002.0,
                narrative="the cart total rounded prices twice", concepts=["formatting", "checkout"],
                files_modified=["/home/ann/shop/src/cart.py"]),
    session("c3", project="blog", created_at=3000.0, updated_at=3100.0),
    PromptRecord("c3", 1, "fix the broken feed dates", 3000.0),
    observation("c3", "u5", "Feed dates in ISO format", project="blog", type="bugfix", created_at=3001.0,
                narrative="the RSS feed printed day numbers only; isoformat now", concepts=["feed"],
                files_modified=["/home/ann/blog/feed.py"]),
    summary("c3", 3002.0, project="blog", request="fix the feed dates", completed="feed dates are ISO 8601"),
]
KEYS = {"shop": "github.com/acme/shop", "blog": "name:blog"}


def corpus_rows() -> list[SharedRow]:
    projects = {record.claude_session_id: record.project for record in CORPUS if isinstance(record, SessionRecord)}
    return [shared(record, key=KEYS[projects[record.claude_session_id]]) for record in CORPUS]


async def titles(store: Any, found: list[RankedKey]) -> list[str]:
    cards = await store.cards([(key.kind, key.row_id) for key in found])
    return [getattr(cards[key.kind, key.row_id], "card", cards[key.kind, key.row_id]).title for key in found]


QUERIES = ["cart", "checkout", "feed dates", "prices decimals", "empty cart", "formatting"]
FILTERS = [
    SearchFilters(),
    SearchFilters(project="shop"),
    SearchFilters(project="blog"),
    SearchFilters(kinds=(OBSERVATION,)),
    SearchFilters(kinds=(SUMMARY, PROMPT)),
    SearchFilters(types=("bugfix",)),
    SearchFilters(since=2000.0),
    SearchFilters(until=2000.0),
    SearchFilters(since=1002.0, until=3001.0),
    SearchFilters(file="src/cart.py"),
    SearchFilters(file="/home/ann/shop/src/price.py"),
    SearchFilters(file="cart.py"),
    SearchFilters(concept="checkout"),
    SearchFilters(claude_session_id="c2"),
]


async def test_search_finds_what_sqlite_finds_under_every_filter(team_database_url: str, tmp_path: Path) -> None:
    async with open_sqlite_store(tmp_path / "local.db") as local, open_team_store(team_database_url) as team:
        await local.import_records(CORPUS)
        await team.push(corpus_rows())
        for filters in FILTERS:
            for query in QUERIES:
                local_found = await titles(local, await local.search_text(query, filters, 20, every_word_first=True))
                team_found = await titles(team, await team.search_text(query, filters, 20))
                assert sorted(team_found) == sorted(local_found), (query, filters)
            # Ranked alike within a kind (bm25 and ts_rank scores of different kinds are not comparable).
            observations = SearchFilters(kinds=(OBSERVATION,))
            assert await titles(team, await team.search_text(query, observations, 20)) == await titles(
                local, await local.search_text(query, observations, 20, every_word_first=True)), query


async def test_search_takes_any_text_and_the_projects_asked(team_database_url: str) -> None:
    async with open_team_store(team_database_url) as team:
        await team.push(corpus_rows())
        for query in ['"empty cart" -prices', "cart OR feed", "))(( & | ! :* '", "\x01\\'; DROP TABLE x; --", "the"]:
            await team.search_text(query, SearchFilters(), 10)  # no error
        assert await titles(team, await team.search_text('"empty cart" -prices', SearchFilters(kinds=(OBSERVATION,)),
                                                         10)) == ["Checkout refuses an empty cart"]
        found = await team.search_text("fix", SearchFilters(), 20, keys=["name:blog"])
        assert found and {card.project_key for card in (await team.cards(
            [(key.kind, key.row_id) for key in found])).values()} == {"name:blog"}
        assert await team.search_text("cart", SearchFilters(), 20, keys=[]) == []


async def test_nearest_finds_the_closest_vectors_under_filters(team_database_url: str) -> None:
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((400, 384)).astype(np.float32)
    rows = [shared(session("big", project="big"), key="name:big"), shared(session("small", project="small"),
                                                                          key="name:small")]
    for n, vector in enumerate(vectors):
        name = "small" if n % 80 == 0 else "big"  # 5 of 400
        rows.append(shared(observation(name, f"t{n}", f"observation {n}", project=name, created_at=float(n)),
                           key=f"name:{name}", vector=vector))
    rows.append(shared(summary("big", 999.0, project="big", request="a summary"), key="name:big",
                       vector=vectors[7] + 0.01))
    rows.append(shared(observation("big", "other-model", "another model's vector", project="big"), key="name:big",
                       vector=vectors[7], model="another"))
    query = vectors[7] + rng.standard_normal(384).astype(np.float32) * 0.1
    async with open_team_store(team_database_url) as team:
        for start in range(0, len(rows), 100):
            await team.push(rows[start:start + 100])
        found = await team.nearest(query, 3, SearchFilters(), model="minilm")
        assert [key.kind for key in found[:2]] == [OBSERVATION, SUMMARY] or \
            [key.kind for key in found[:2]] == [SUMMARY, OBSERVATION]
        assert (await titles(team, found))[:2] != ["another model's vector"]
        small = await team.nearest(query, 5, SearchFilters(project="small"), model="minilm")
        assert sorted(await titles(team, small)) == sorted(f"observation {n}" for n in range(0, 400, 80))
        only_observations = await team.nearest(query, 10, SearchFilters(kinds=(OBSERVATION,), since=100.0),
                                               model="minilm")
        assert len(only_observations) == 10 and {key.kind for key in only_observations} == {OBSERVATION}
        assert all(card.card.created_at >= 100.0 for card in (await team.cards(
            [(key.kind, key.row_id) for key in only_observations])).values())
        # Cosine similarity, best first, as the exact answer has it.
        exact = sorted(((float(np.dot(query, v) / np.linalg.norm(query) / np.linalg.norm(v)), n)
                        for n, v in enumerate(vectors) if n >= 100), reverse=True)[:10]
        assert [key.score for key in only_observations] == pytest.approx([score for score, _ in exact], abs=1e-4)
        assert await team.nearest(query, 5, SearchFilters(), model="minilm", keys=["name:nothing"]) == []
        assert await team.nearest(query[:10], 5, SearchFilters(), model="minilm") == []  # another dimension


async def test_concurrent_pushers_and_a_puller_lose_and_repeat_nothing(team_database_url: str) -> None:
    """Three machines pushing at once (each its own connections: real concurrent transactions, one
    session shared by all), a fourth pulling all along in small pages: every row arrives once."""
    machines = [Origin(f"machine-{n}", f"host-{n}", "ann") for n in range(3)]
    pushed: list[SharedRow] = []
    done = trio.Event()

    async def push_all(origin: Origin) -> None:
        async with open_team_store(team_database_url) as store:
            for batch in range(15):
                rows = [shared(observation(f"{origin.machine}-s{batch}", f"t{n}", f"{origin.machine} {batch} {n}"),
                               origin) for n in range(4)]
                rows.append(shared(session("shared", status="completed" if batch == 14 else "active",
                                           updated_at=100.0 + batch), origin))
                rows.append(shared(PromptRecord("shared", batch + 1, f"prompt {batch}", 100.0 + batch), origin))
                await store.push(rows)
                pushed.extend(rows)
                await trio.sleep(0)

    pulled: list[SharedRow] = []

    expected_facts = 3 * 15 * 4 + 15

    async def pull_along() -> None:
        async with open_team_store(team_database_url) as store:
            cursor = PullCursor()
            # Until every fact has arrived once the pushes are done, or a deadline: a pull reads below the
            # oldest transaction still open anywhere on the server (pg_snapshot_xmin), so an empty page right
            # after the last push says "not yet" on a busy machine, not "nothing more".
            with trio.move_on_after(60):
                while True:
                    finished = done.is_set()  # read before the pull: a pull after the last push sees it
                    batch = await store.pull(cursor, keys=None, exclude_machine_id="machine-puller", limit=7)
                    pulled.extend(batch.rows)
                    cursor = batch.after
                    arrived = sum(not isinstance(row.record, SessionRecord) for row in pulled)
                    if finished and not batch.rows and arrived >= expected_facts:
                        return
                    await trio.sleep(0.01)

    async with open_team_store(team_database_url) as first:
        await first.check()  # migrated before the race
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pull_along)
        async with trio.open_nursery() as pushers:
            for origin in machines:
                pushers.start_soon(push_all, origin)
        done.set()
    facts = [identity(row) for row in pulled if not isinstance(row.record, SessionRecord)]
    assert sorted(facts) == sorted({identity(row) for row in pushed if not isinstance(row.record, SessionRecord)})
    # A prompt of the shared session is a fact too: the first machine to push it wins, once.
    assert len(facts) == len(set(facts)) == expected_facts
    sessions = [row.record for row in pulled if isinstance(row.record, SessionRecord)]
    assert sessions and isinstance(sessions[-1], SessionRecord)
    assert sessions[-1].status == "completed" and sessions[-1].updated_at == 114.0  # the merge of all, last


async def test_a_user_without_the_right_to_set_up_the_database_gets_unavailable(
        postgres: Any, team_database_url: str) -> None:
    with psycopg.connect(postgres.url, autocommit=True) as admin:
        admin.execute("DROP ROLE IF EXISTS guest")
        admin.execute("CREATE ROLE guest LOGIN")
    try:
        guest_url = team_database_url.replace("postgresql://postgres:@", "postgresql://guest:@", 1)
        async with open_team_store(guest_url) as store:
            with pytest.raises(TeamUnavailable, match="cannot be set up"):
                await store.push(a_session("s1"))
    finally:
        with psycopg.connect(postgres.url, autocommit=True) as admin:
            admin.execute("DROP ROLE guest")
