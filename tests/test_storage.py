"""The SQLite store on a real file: journal, group commit, idempotent results, FTS, migrations."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import apsw
import pytest
import trio

from sessionmem.events import CompleteEvent, Envelope, InitEvent, ObservationEvent, SummarizeEvent
from sessionmem.records import (
    OBSERVATION,
    SUMMARY,
    CompressedObservation,
    CompressedSummary,
    ContextStart,
    FileMemory,
    SearchFilters,
    SessionHead,
    SessionInfo,
)
from sessionmem.storage.sqlite import file_memories, journal_writes, result_writes
from sessionmem.storage.sqlite.connection_setup import open_writer
from sessionmem.storage.sqlite.file_memory_cache import FileRecallCache
from sessionmem.storage.sqlite.fulltext import BASENAME_NOCASE_INDEX
from sessionmem.storage.sqlite.row_reads import read_context_start
from sessionmem.storage.sqlite.schema import MIGRATIONS, migrate
from sessionmem.storage.sqlite.store import open_sqlite_store
from sessionmem.storage.sqlite.values import UnexpectedRow, flag, integer, one_of, one_row, optional_text, real, text

T = TypeVar("T")


def obs(n: int, session: str = "s1") -> ObservationEvent:
    return ObservationEvent(claude_session_id=session, project="proj", tool_name="Read", tool_use_id=f"t{n}",
                            tool_input={"file_path": f"/p/f{n}.py"})


async def test_concurrent_accepts_share_commits_and_deliver_in_journal_order(tmp_path: Path) -> None:
    delivered: list[int] = []
    async with open_sqlite_store(tmp_path / "db.sqlite") as store:
        await store.accept_init(InitEvent("s1", "proj", prompt="first"), lambda e: delivered.append(e.event_id))
        async with trio.open_nursery() as nursery:
            for n in range(200):
                nursery.start_soon(store.accept_event, obs(n), lambda e: delivered.append(e.event_id))
        stats = store.statistics().writer
        counts = await store.journal_counts()
    assert delivered == sorted(delivered) and len(delivered) == 201
    assert stats.operations == 201 and stats.batches < 201  # group commit happened
    assert (counts.pending, counts.done) == (200, 1)  # init is stored when accepted


async def test_prompt_numbers_and_stamping(tmp_path: Path) -> None:
    async with open_sqlite_store(tmp_path / "db.sqlite") as store:
        first = await store.accept_init(InitEvent("s1", "proj", prompt="one"), lambda e: None)
        skipped = await store.accept_init(InitEvent("s1", "proj", prompt="", skip_reason="private"), lambda e: None)
        second = await store.accept_init(InitEvent("s1", "proj", prompt="two"), lambda e: None)
        accepted = await store.accept_event(obs(1), lambda e: None)
        info = await store.session_info("s1")
    assert (first.prompt_number, skipped.prompt_number, second.prompt_number) == (1, 1, 2)
    assert skipped.skipped and skipped.reason == "private"
    assert accepted.prompt_number == 2 and accepted.envelope.event.prompt_number == 2
    assert info is not None and (info.status, info.prompt_counter, info.last_prompt) == ("active", 2, "two")


async def test_results_are_idempotent_and_mark_the_journal(tmp_path: Path) -> None:
    async with open_sqlite_store(tmp_path / "db.sqlite") as store:
        envelopes: list[Envelope] = []
        for n in range(3):
            await store.accept_event(obs(n), envelopes.append)
        summarize = await store.accept_event(SummarizeEvent("s1", "proj"), envelopes.append)
        complete = await store.accept_event(CompleteEvent("s1"), envelopes.append)
        info = await store.session_info("s1")
        assert info is not None
        items = [(e, e.event, CompressedObservation("discovery", f"title {e.event_id}", input_tokens=5))
                 for e in envelopes[:3]]
        assert await store.store_observations(info, items) == 3
        assert await store.store_observations(info, items) == 0  # a replay stores nothing twice
        assert await store.store_summary(info, summarize.envelope, CompressedSummary(request="r", input_tokens=7))
        assert not await store.store_summary(info, summarize.envelope, CompressedSummary(request="r", input_tokens=7))
        await store.complete_session(info, complete.envelope)
        assert await store.pending_events() == []
        sessions = await store.list_sessions(project="proj", limit=10, offset=0)
        observations = await store.list_observations(project="proj", limit=10, offset=0)
        start = await store.context_start("proj", summaries=5, recent=2, latest_prompt=True)
        elsewhere = await store.context_start("elsewhere", summaries=5, recent=2, latest_prompt=False)
        offered: list[set[int]] = []
        oldest, newest = observations[-1].id, observations[0].id
        chosen = await store.context_rows(
            [(OBSERVATION, oldest), (OBSERVATION, 10_000), (SUMMARY, start.summaries[0].id)],
            SearchFilters(project="proj", kinds=(OBSERVATION,)),
            lambda kept: offered.append(kept) or [oldest, 10_000, newest])
        unfiltered = await store.context_rows([], SearchFilters(project="elsewhere"), lambda kept: [newest])
    assert sessions[0].status == "completed" and sessions[0].observations == 3
    assert sessions[0].input_tokens == 3 * 5 + 7  # replays did not double-count tokens
    assert [o.title for o in observations] == ["title 3", "title 2", "title 1"]
    assert start.recent == [o.id for o in observations[:2]] and start.latest_prompt is None  # no prompt stored
    assert [m.request for m in start.summaries] == ["r"]
    assert elsewhere == ContextStart([], [], None)
    assert offered == [{oldest}]  # only the candidate that exists, is an observation and passes the filter
    assert [o.id for o in chosen.observations] == [oldest, newest] and chosen.sessions == [
        SessionHead(sessions[0].claude_session_id, sessions[0].created_at, sessions[0].first_prompt)]
    assert [o.id for o in unfiltered.observations] == [newest]  # choose reads what it names, filters aside


async def test_pending_events_survive_reopen_in_order(tmp_path: Path) -> None:
    async with open_sqlite_store(tmp_path / "db.sqlite") as store:
        for n in range(5):
            await store.accept_event(obs(n, session=f"s{n % 2}"), lambda e: None)
    async with open_sqlite_store(tmp_path / "db.sqlite") as store:
        pending = await store.pending_events()
    assert [e.event.tool_use_id for e in pending] == ["t0", "t1", "t2", "t3", "t4"]
    assert [e.event_id for e in pending] == sorted(e.event_id for e in pending)


async def test_park_and_unpark(tmp_path: Path) -> None:
    async with open_sqlite_store(tmp_path / "db.sqlite") as store:
        await store.accept_event(obs(1), lambda e: None)
        await store.accept_event(obs(2, session="other"), lambda e: None)
        assert await store.park_session("s1", "boom") == 1
        late = await store.accept_event(obs(3), lambda e: pytest.fail("parked events are not delivered"))
        assert late.parked
        assert (await store.journal_counts()).parked == 2
        unparked: list[list[Envelope]] = []
        replayed = await store.unpark_session("s1", unparked.append)
        info = await store.session_info("s1")
    assert [e.event.tool_use_id for e in replayed] == ["t1", "t3"]
    assert unparked == [replayed]
    assert info is not None and info.status == "initialized"


async def test_full_text_index_follows_observations(tmp_path: Path) -> None:
    async with open_sqlite_store(tmp_path / "db.sqlite") as store:
        envelopes: list[Envelope] = []
        await store.accept_event(obs(1), envelopes.append)
        info = await store.session_info("s1")
        assert info is not None
        await store.store_observations(info, [(envelopes[0], envelopes[0].event,
                                               CompressedObservation("bugfix", "Guard zeppelin divisor"))])
    connection = apsw.Connection(str(tmp_path / "db.sqlite"))
    hits = connection.execute("SELECT rowid FROM observations_fts WHERE observations_fts MATCH 'zeppelin'").fetchall()
    assert len(hits) == 1


async def test_failed_operation_does_not_undo_others(tmp_path: Path) -> None:
    async with open_sqlite_store(tmp_path / "db.sqlite") as store:
        def broken(connection: apsw.Connection) -> None:
            connection.execute("INSERT INTO no_such_table VALUES (1)")

        async def good(n: int) -> None:
            await store.accept_event(obs(n), lambda e: None)

        async def bad() -> None:
            with pytest.raises(apsw.SQLError):
                await store.write(broken)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(good, 1)
            nursery.start_soon(bad)
            nursery.start_soon(good, 2)
        assert len(await store.pending_events()) == 2


def test_version_2_databases_are_migrated_keeping_their_rows(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    connection = apsw.Connection(str(path))
    for version, script in enumerate(MIGRATIONS[:2], 1):
        with connection:
            connection.execute(script)
            connection.execute(f"PRAGMA user_version = {version}")
    connection.execute("INSERT INTO sessions (id, claude_session_id, project, created_at, updated_at)"
                       " VALUES (1, 'old', 'p', 0, 0)")
    connection.execute("INSERT INTO user_prompts (session_id, prompt_number, text, created_at) VALUES (1, 1, 'hi', 0)")
    connection.close()
    migrated = open_writer(path)
    # The prompt keeps its text and full-text row, and learns its session's project.
    assert migrated.execute("SELECT session_db_id, project, text FROM user_prompts").fetchall() == [(1, "p", "hi")]
    assert migrated.execute("SELECT rowid FROM prompts_fts WHERE prompts_fts MATCH 'hi'").fetchall() == [(1,)]
    migrated.close()


async def test_a_database_of_the_first_releases_is_upgraded_and_served(tmp_path: Path) -> None:
    """A database written by the first releases (e94329e, fa128a4) has ``journal.payload`` and no
    ``journal_payloads`` (version 1 changed after them): the upgrade takes it through every step, so
    the worker starts and takes events (not dying at start, every event refused by NOT NULL payload)."""
    released = (Path(__file__).parent / "fixtures" / "schema-fa128a4.sql").read_text()
    version_1, version_2 = released.split("-- version 2\n")
    path = tmp_path / "db.sqlite"
    connection = apsw.Connection(str(path))
    for version, script in enumerate((version_1, version_2), 1):
        with connection:
            connection.execute(script)
            connection.execute(f"PRAGMA user_version = {version}")
    done = b'{"kind":"observation","session_id":"old","project":"p","tool_name":"Read","tool_input":{"file_path":"a.py"}}'
    pending = b'{"kind":"observation","session_id":"old","project":"p","tool_name":"Bash","tool_use_id":"t2"}'
    connection.execute(
        "INSERT INTO sessions (id, claude_session_id, project, created_at, updated_at) VALUES (1, 'old', 'p', 0, 0);"
        "INSERT INTO journal (id, claude_session_id, kind, payload, status, accepted_at)"
        " VALUES (1, 'old', 'observation', ?, 'done', 1), (2, 'old', 'observation', ?, 'pending', 2);"
        "INSERT INTO observations (session_id, project, prompt_number, event_id, tool_name, tool_use_id,"
        " tool_input, tool_response, type, title, compressed, compressor, created_at)"
        " VALUES (1, 'p', 1, 1, 'Read', 't1', '{\"file_path\": \"a.py\"}', 'x', 'discovery', 'Read a.py', 1,"
        " 'offline', 1)",
        (done, pending))
    connection.close()
    delivered: list[Envelope] = []
    async with open_sqlite_store(path) as store:
        (envelope,) = await store.pending_events()  # the payload moved, and decodes as today's event
        assert envelope.event_id == 2 and envelope.event.tool_use_id == "t2"
        event = ObservationEvent(claude_session_id="old", project="p", tool_name="Read", tool_use_id="t3")
        accepted = await store.accept_event(event, delivered.append)  # was: NOT NULL constraint failed
        assert accepted.envelope.event_id == 3 and not accepted.duplicate
    upgraded = apsw.Connection(str(path))
    assert upgraded.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    assert [row[0] for row in upgraded.execute("SELECT id FROM journal_payloads ORDER BY id")] == [1, 2, 3]
    assert upgraded.execute("SELECT payload FROM journal_payloads WHERE id = 1").fetchone()[0] == done
    assert upgraded.execute("SELECT title FROM observations").fetchall() == [("Read a.py",)]
    assert not {"tool_input", "tool_response"} & {
        name for (name,) in upgraded.execute("SELECT name FROM pragma_table_info('observations')")}
    upgraded.close()


def test_migrations_are_versioned(tmp_path: Path) -> None:
    connection = open_writer(tmp_path / "db.sqlite")
    assert connection.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert migrate(connection) == len(MIGRATIONS)  # idempotent
    connection.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    with pytest.raises(RuntimeError, match="newer than this sessionmem"):
        migrate(connection)


async def test_idempotency_keys_journal_once(tmp_path: Path) -> None:
    delivered: list[Envelope] = []
    async with open_sqlite_store(tmp_path / "db.sqlite") as store:
        first = await store.accept_init(InitEvent("s1", "proj", prompt="one", key="k-init"), delivered.append)
        again = await store.accept_init(InitEvent("s1", "proj", prompt="one", key="k-init"), delivered.append)
        second = await store.accept_init(InitEvent("s1", "proj", prompt="two", key="k-init-2"), delivered.append)
        event = ObservationEvent(claude_session_id="s1", project="proj", tool_name="Read", tool_use_id="t", key="k-obs")
        accepted = await store.accept_event(event, delivered.append)
        duplicate = await store.accept_event(event, delivered.append)
        counts = await store.journal_counts()
    assert (first.prompt_number, again.prompt_number, second.prompt_number) == (1, 1, 2)
    assert again.duplicate and not first.duplicate and again.envelope.event_id == first.envelope.event_id
    assert duplicate.duplicate and duplicate.envelope.event_id == accepted.envelope.event_id
    assert duplicate.prompt_number == 2
    assert len(delivered) == 3  # duplicates are not delivered again
    assert (counts.pending, counts.done) == (1, 2)


async def test_a_full_disk_fails_the_whole_batch_and_writes_nothing(tmp_path: Path) -> None:
    from sessionmem.storage.base import StorageUnavailable
    from sessionmem.testing.faults import FullDisk

    with FullDisk() as disk:
        async with open_sqlite_store(tmp_path / "db.sqlite") as store:
            await store.accept_event(obs(0), lambda e: None)

            def big(n: int) -> object:
                def write(connection: apsw.Connection) -> None:
                    connection.execute("CREATE TABLE IF NOT EXISTS blobs (b)")
                    if n == 1:
                        disk.fill()  # the disk fills up in the middle of the batch
                    connection.execute("INSERT INTO blobs VALUES (zeroblob(200000))")
                return write

            outcomes: list[object] = []

            async def submit(n: int) -> None:
                try:
                    await store.write(big(n))
                    outcomes.append("ok")
                except StorageUnavailable as exc:
                    outcomes.append(type(exc.__cause__).__name__)

            async with trio.open_nursery() as nursery:
                for n in range(3):
                    nursery.start_soon(submit, n)
            assert outcomes == ["FullError"] * 3  # one transaction: all of it failed, none half-written
            disk.free()
            await store.accept_event(obs(1), lambda e: None)
            pending = await store.pending_events()
    assert [e.event.tool_use_id for e in pending] == ["t0", "t1"]
    connection = apsw.Connection(str(tmp_path / "db.sqlite"))
    assert connection.execute("SELECT count(*) FROM sqlite_master WHERE name = 'blobs'").fetchone()[0] == 0


async def test_events_keep_their_own_time_and_the_budget_counts_when_stored(tmp_path: Path) -> None:
    """Backfill sends the transcript's times: rows are dated by them, ordered by them, and the LLM
    budget still counts today's spending (by when the row was stored)."""
    import time

    long_ago, later = 1_600_000_000.0, 1_600_000_500.0
    async with open_sqlite_store(tmp_path / "db.sqlite") as store:
        await store.accept_init(InitEvent("old", "proj", prompt="then", occurred_at=long_ago), lambda e: None)
        envelopes: list[Envelope] = []
        for n, at in ((1, later), (2, long_ago + 10)):  # arrive out of their time order
            event = ObservationEvent(claude_session_id="old", project="proj", tool_name="Read", tool_use_id=f"t{n}",
                                     occurred_at=at)
            await store.accept_event(event, envelopes.append)
        info = await store.session_info("old")
        assert info is not None
        await store.store_observations(info, [(e, e.event, CompressedObservation("discovery", f"t {e.event_id}",
                                                                                 input_tokens=7)) for e in envelopes])
        observations = await store.list_observations(project="proj", limit=10, offset=0)
        (session,) = await store.list_sessions(project="proj", limit=10, offset=0)
        spent_today = await store.llm_tokens_since(time.time() - 3600)
    assert [o.created_at for o in observations] == [later, long_ago + 10]  # newest first, by their time
    assert (session.created_at, session.updated_at) == (long_ago, later)
    assert spent_today == 14


# -- file recall: its cost follows the file, not the project ---------------------------------


def _observe(connection: apsw.Connection, session_db_id: int, n: int, path: str, *, modified: bool = False,
             type_: str = "discovery", project: str = "proj") -> None:
    files = f'["{path}"]'
    connection.execute(
        "INSERT INTO observations (session_db_id, project, prompt_number, event_id, tool_name, tool_use_id, type,"
        " title, files_read, files_modified, compressed, compressor, created_at)"
        " VALUES (?, ?, 1, ?, 'Edit', ?, ?, ?, ?, ?, 1, 'offline', ?)",
        (session_db_id, project, n, f"t{n}", type_, f"{'Edited' if modified else 'Read'} {path} #{n}",
         "[]" if modified else files, files if modified else "[]", float(n)))


def _vm_steps(connection: apsw.Connection, read: Callable[[], T]) -> tuple[T, int]:
    """(what ``read()`` returned, the SQLite virtual machine steps its statements took)."""
    steps: list[int] = []
    connection.trace_v2(apsw.SQLITE_TRACE_PROFILE,
                        lambda event: steps.append(event["stmt_status"]["SQLITE_STMTSTATUS_VM_STEP"]))
    try:
        return read(), sum(steps)
    finally:
        connection.trace_v2(0, None)


def _file_recall_steps(connection: apsw.Connection, path: str, **kwargs: object) -> tuple[list[int], int]:
    """(ids recalled, SQLite virtual machine steps the recall took)."""
    found, steps = _vm_steps(connection, lambda: file_memories.file_memories(
        connection, "proj", path, exclude_session="now", limit=3, **kwargs))
    return [memory.id for memory in found], steps


def test_file_recall_reads_the_files_uses_not_the_whole_project(tmp_path: Path) -> None:
    connection = open_writer(tmp_path / "db.sqlite")
    connection.execute("INSERT INTO sessions (id, claude_session_id, project, created_at, updated_at)"
                       " VALUES (1, 'before', 'proj', 0, 0), (2, 'now', 'proj', 0, 0)")
    with connection:
        for n in range(1, 21):
            _observe(connection, 1, n, "/p/app.py", modified=n % 5 == 0)
    wanted, steps_small = _file_recall_steps(connection, "/p/app.py")
    assert wanted == [20, 15, 10]  # edits, newest first
    with connection:  # the project grows; the file does not
        for n in range(21, 5021):
            _observe(connection, 1 + n % 2, n, f"/p/other{n}.py", modified=n % 3 == 0)
    found, steps_large = _file_recall_steps(connection, "/p/app.py")
    assert found == wanted
    # The same work, whatever else the project holds (walking the project, it went from 900 steps to 55,900).
    assert steps_large == steps_small, (steps_small, steps_large)
    assert _file_recall_steps(connection, "app.py")[0] == wanted  # by the path's end too


def test_file_recall_looks_at_the_newest_uses_of_a_file(tmp_path: Path) -> None:
    connection = open_writer(tmp_path / "db.sqlite")
    connection.execute("INSERT INTO sessions (id, claude_session_id, project, created_at, updated_at)"
                       " VALUES (1, 'before', 'proj', 0, 0), (2, 'now', 'proj', 0, 0)")
    with connection:
        _observe(connection, 1, 1, "/p/app.py", modified=True)
        for n in range(2, 12):  # ten bare reads since
            _observe(connection, 1, n, "/p/app.py")
    assert _file_recall_steps(connection, "/p/app.py")[0] == [1]
    assert _file_recall_steps(connection, "/p/app.py", lookback=10)[0] == []  # older than the look-back
    assert _file_recall_steps(connection, "/p/app.py", lookback=11)[0] == [1]


def test_a_projects_context_start_does_not_walk_other_projects(tmp_path: Path) -> None:
    """SessionStart's first read costs the same whatever other projects hold (a new project's
    once walked every summary and prompt of the store, newest first, looking for its own)."""
    connection = open_writer(tmp_path / "db.sqlite")

    def session(n: int, project: str, at: float) -> None:
        connection.execute(
            "INSERT INTO sessions (id, claude_session_id, project, created_at, updated_at) VALUES (?, ?, ?, ?, ?)",
            (n, f"s{n}", project, at, at))
        connection.execute("INSERT INTO user_prompts (session_db_id, project, prompt_number, text, created_at)"
                           " VALUES (?, ?, 1, ?, ?)", (n, project, f"make the parser of {project} faster", at))
        connection.execute(
            "INSERT INTO session_summaries (session_db_id, project, prompt_number, event_id, request, compressed,"
            " compressor, created_at, stored_at) VALUES (?, ?, 1, ?, 'parser', 1, 'offline', ?, ?)",
            (n, project, -n, at, at))
        _observe(connection, n, n, f"/{project}/app.py", modified=True, project=project)

    def start(project: str) -> tuple[ContextStart, int]:
        return _vm_steps(connection, lambda: read_context_start(
            connection, project=project, summaries=6, recent=200, latest_prompt=True))

    with connection:
        session(1, "small", 1.0)
        for n in range(2, 22):
            session(n, "busy", float(n))
    small, small_steps = start("small")
    nothing, nothing_steps = start("new")
    with connection:  # other projects grow, and everything they did is newer
        for n in range(22, 2022):
            session(n, "busy", float(n))
    assert start("small") == (small, small_steps)
    assert start("new") == (nothing, nothing_steps)
    assert small.latest_prompt is not None and small.latest_prompt[1] == "make the parser of small faster"
    assert [row.claude_session_id for row in small.summaries] == ["s1"] and len(small.recent) == 1
    assert nothing == ContextStart([], [], None)


async def test_a_batch_of_observations_is_one_full_text_segment(tmp_path: Path) -> None:
    """FTS5 writes what one statement added as a segment of its own: a batch stored row by row made a
    segment per observation, and merging them grew into most of the writer's work."""
    async with open_sqlite_store(tmp_path / "db.sqlite") as store:
        envelopes: list[Envelope] = []
        for n in range(8):
            await store.accept_event(obs(n), envelopes.append)
        info = await store.session_info("s1")
        assert info is not None
        items = [(e, e.event, CompressedObservation("discovery", f"title {e.event_id}", input_tokens=5))
                 for e in envelopes]
        assert await store.store_observations(info, items[:3]) == 3
        assert await store.store_observations(info, items) == 5  # the three already stored are not again
        assert await store.store_observations(info, []) == 0
        (tokens,) = [s.input_tokens for s in await store.list_sessions(project="proj", limit=1, offset=0)]
    connection = apsw.Connection(str(tmp_path / "db.sqlite"))
    try:
        (segments,) = connection.execute("SELECT count(DISTINCT segid) FROM observations_fts_idx").fetchone()
        found = connection.execute("SELECT count(*) FROM observations_fts WHERE observations_fts MATCH 'title'")
        assert found.fetchone()[0] == 8
    finally:
        connection.close()
    assert segments <= 2  # one for each of the two stores; row by row, there were more
    assert tokens == 8 * 5  # only what was inserted is counted


def test_file_recall_chooses_from_every_sessions_rows_what_it_reads_for_one_session(tmp_path: Path) -> None:
    """The worker keeps a file's rows of every session (``file_memory_rows``) and chooses each
    session's answer from them (``choose_file_memories``): the same answer as a read for that session."""
    connection = open_writer(tmp_path / "db.sqlite")
    sessions = ["a", "b", "c"]
    connection.execute("INSERT INTO sessions (id, claude_session_id, project, created_at, updated_at) VALUES "
                       + ", ".join(f"({n + 1}, '{name}', 'proj', 0, 0)" for n, name in enumerate(sessions)))
    chance = random.Random(7)
    with connection:
        for n in range(1, 121):
            _observe(connection, chance.randint(1, 3), n, chance.choice(["/p/app.py", "/q/app.py", "/p/util.py"]),
                     modified=chance.random() < 0.4, type_=chance.choice(["discovery", "change"]))
            if chance.random() < 0.3:  # titles that repeat: one answer a title
                connection.execute("UPDATE observations SET title = 'Edited app.py' WHERE id = ?", (n,))
    for path in ("/p/app.py", "app.py", "/p/util.py", "/nowhere.py"):
        every = file_memories.file_memory_rows(connection, "proj", path, exclude_session=None, most=10_000)
        assert len({row.claude_session_id for row in every}) == (3 if path != "/nowhere.py" else 0)
        for session in sessions:
            for limit in (1, 3, 6):
                wanted = file_memories.file_memories(connection, "proj", path, exclude_session=session, limit=limit)
                assert file_memories.choose_file_memories(every, session, limit) == wanted, (path, session, limit)


@pytest.mark.parametrize("fold_case", [False, True], ids=["case-sensitive", "names-in-any-case"])
def test_rows_kept_up_to_date_as_observations_are_stored_are_what_a_fresh_read_gives(tmp_path: Path,
                                                                                     fold_case: bool) -> None:
    """File recall's kept rows are read once, then joined by each stored observation
    (``FileRecallCache.stored``, ``file_memories.recalled_as``: the lookup's SQL rule in Python), those
    stored while they were read too. On random stores of random files -- paths that end alike,
    differ in case, name a directory, lie in another project -- they stay exactly what
    ``file_memory_rows`` reads afresh; where names match in any case (a disk that ignores case) too."""
    connection = open_writer(tmp_path / "db.sqlite")
    if fold_case:
        connection.execute(BASENAME_NOCASE_INDEX)
    sessions = {"a": 1, "b": 2, "c": 3}
    connection.execute("INSERT INTO sessions (id, claude_session_id, project, created_at, updated_at) VALUES "
                       + ", ".join(f"({n}, '{name}', 'proj', 0, 0)" for name, n in sessions.items()))
    paths = ["/p/app.py", "/q/app.py", "/p/App.py", "/P/src/app.py", "/p/src/app.py", "/p/src/", "/p/util.py",
             "/é/app.py", "/É/app.py"]
    asked = ["/p/app.py", "app.py", "src/app.py", "SRC/app.py", "/p/src/", "src/", "util.py", "/p/App.py",
             "é/app.py", " /q/app.py "]
    # Small: the rows are cut as they grow, and files are forgotten and read again.
    cache = FileRecallCache(capacity=4, rows_kept=8, stores_known=1000, fold_case=fold_case)

    def fresh(path: str) -> list[FileMemory]:
        return file_memories.file_memory_rows(connection, "proj", path, exclude_session=None, most=8, lookback=10_000,
                                              fold_case=fold_case)

    chance = random.Random(11)
    reading: list[tuple[str, int, list[FileMemory]]] = []  # lookups read, not yet kept: stores commit meanwhile
    for n in range(1, 301):
        if chance.random() < 0.15:
            path = chance.choice(asked)
            if cache.get(cache.key("proj", path)) is None:
                reading.append((path, cache.ticket(), fresh(path)))
            continue
        if reading and chance.random() < 0.1:
            path, ticket, rows = reading.pop(chance.randrange(len(reading)))
            cache.put(cache.key("proj", path), ticket, rows)
            continue
        session, project = chance.choice(list(sessions)), chance.choice(["proj", "proj", "proj", "other"])
        observation = CompressedObservation(
            chance.choice(["discovery", "change", "bugfix"]), f"Title {chance.randint(1, 40)}",
            files_read=tuple(chance.sample(paths, chance.randint(0, 2))),
            files_modified=tuple(chance.sample(paths, chance.randint(0, 1))),
            compressor=chance.choice(["offline", "offline", "anthropic"]))
        with connection:
            connection.execute(
                "INSERT INTO observations (id, session_db_id, project, prompt_number, event_id, tool_name,"
                " tool_use_id, type, title, files_read, files_modified, compressed, compressor, created_at)"
                " VALUES (?, ?, ?, 1, ?, 'Edit', ?, ?, ?, ?, ?, 1, ?, ?)",
                (n, sessions[session], project, n, f"t{n}", observation.type, observation.title,
                 json.dumps(observation.files_read), json.dumps(observation.files_modified), observation.compressor,
                 float(n)))
        cache.stored(session, project, [(n, float(n), observation)])
    for path, ticket, rows in reading:
        cache.put(cache.key("proj", path), ticket, rows)
    kept = [path for path in asked if cache.get(cache.key("proj", path)) is not None]
    assert len({cache.key("proj", path) for path in kept}) == 4
    for path in kept:
        assert cache.get(cache.key("proj", path)) == fresh(path), path
    assert any(len(fresh(path)) == 8 for path in kept)  # cut as they grew


def test_stores_of_observations_run_together_leave_what_each_run_alone_leaves(tmp_path: Path) -> None:
    """The writer runs beside each other stores of several sessions as one (``result_writes.store_observations``
    of them all: the statements of one store). On random stores -- sessions that repeat, rows
    already stored, a store made twice, tokens or none, files recall keeps or not -- the database and each store's
    result are the same as each store run alone, in turn."""
    chance = random.Random(5)
    sessions = [SessionInfo(n, f"s{n}", "proj", "active", 1, "") for n in (1, 2, 3)]
    for trial in range(25):
        together, alone = (open_writer(tmp_path / f"{trial}-{name}.sqlite") for name in ("together", "alone"))
        stores = []
        for connection in (together, alone):
            connection.execute("INSERT INTO sessions (id, claude_session_id, project, created_at, updated_at) VALUES "
                               + ", ".join(f"({s.session_db_id}, '{s.claude_session_id}', 'proj', 500, 500)"
                                           for s in sessions))
            connection.execute("INSERT INTO journal (id, claude_session_id, kind, accepted_at) VALUES "
                               + ", ".join(f"({n}, 's1', 'observation', 0)" for n in range(1, 41)))
        event_ids = chance.sample(range(1, 41), 30)
        for _ in range(chance.randint(1, 5)):
            session = chance.choice(sessions)
            items = []
            for _ in range(chance.randint(1, 6)):
                event_id = event_ids.pop()
                path = chance.choice(["/p/a.py", "/p/b.py"])
                event = ObservationEvent(claude_session_id=session.claude_session_id, project="proj",
                                         tool_name=chance.choice(["Read", "Edit"]), tool_use_id=f"t{event_id}",
                                         occurred_at=chance.uniform(0, 1000))
                observation = CompressedObservation(
                    "discovery", f"t {event_id}", files_read=(path,) if chance.random() < 0.5 else (),
                    input_tokens=chance.choice([0, 0, 7]), output_tokens=chance.choice([0, 3]))
                items.append((Envelope(event_id, event), event, observation))
            if stores and chance.random() < 0.3:  # a store of the same events again beside the first (a replay)
                session, items = chance.choice(stores)
            stores.append((session, items))
        stored_before = [item for _, items in stores for item in items if chance.random() < 0.2]
        for connection in (together, alone):
            with connection:
                result_writes.store_observations(connection, [(sessions[0], stored_before)] if stored_before else [])
        with together:
            results = result_writes.store_observations(together, stores)
        each = []
        for store in stores:
            with alone:
                each += result_writes.store_observations(alone, [store])
        assert results == each, trial
        # stored_at is the time of the store
        observation_columns = ", ".join(name for (name,) in together.execute(
            "SELECT name FROM pragma_table_info('observations')") if name != "stored_at")
        for table, columns in (("observations", observation_columns),
                               ("sessions", "id, input_tokens, output_tokens, created_at, updated_at"),
                               ("journal", "id, status")):
            dumps = [connection.execute(f"SELECT {columns} FROM {table} ORDER BY 1").fetchall()
                     for connection in (together, alone)]
            assert dumps[0] == dumps[1], (trial, table)
        together.close()
        alone.close()


def _result_or_error(connection: apsw.Connection, run: Callable[..., T], *args: object) -> T | str:
    """``run(*args)``, or the name of the error it raised, its writes then undone (as the writer
    would: it runs each write of a failed transaction alone, and only the one at fault fails)."""
    connection.execute("SAVEPOINT trial")
    try:
        return run(*args)
    except Exception as exc:
        connection.execute("ROLLBACK TO trial")
        return type(exc).__name__
    finally:
        connection.execute("RELEASE trial")


def _accept_each(connection: apsw.Connection, events: list[ObservationEvent | SummarizeEvent | CompleteEvent],
                 ) -> list[object]:
    return [journal_writes.accept_event(connection, event) for event in events]


def test_accepts_run_together_leave_what_each_run_alone_leaves(tmp_path: Path) -> None:
    """Accepts beside each other in a transaction run as one (``journal_writes.accept_events``: three statements).
    On random events -- of every kind, of sessions known, failed or never seen, with keys new,
    repeated in the batch or journaled before (a duplicate, or a key reused) -- each result, or
    error, and the journal are the same as each event accepted alone, in turn."""
    chance = random.Random(3)
    fast = 0
    for trial in range(40):
        together, alone = (open_writer(tmp_path / f"{trial}-{name}.sqlite") for name in ("together", "alone"))
        for connection in (together, alone):
            connection.execute("INSERT INTO sessions (id, claude_session_id, project, status, prompt_counter, created_at,"
                               " updated_at) VALUES (1, 's1', 'proj', 'active', 2, 0, 0), (2, 's2', 'proj', 'failed', 1, 0, 0)")
            with connection:
                journal_writes.accept_event(connection, ObservationEvent(claude_session_id="s1", project="proj",
                                                                       tool_name="Read", key="old"))
        events: list[ObservationEvent | SummarizeEvent | CompleteEvent] = []
        unknown_session = chance.random() < 0.2
        for n in range(chance.randint(1, 8)):
            session = chance.choice(["s1", "s2", "s3"] if unknown_session else ["s1", "s2"])
            key = chance.choice([f"k{trial}-{n}"] * 6 + [f"k{trial}-0", "old", ""])
            kind = chance.choice(["observation", "observation", "summarize", "complete"])
            if kind == "observation":
                events.append(ObservationEvent(claude_session_id=session, project="proj", tool_name="Read",
                                               tool_use_id=f"t{n}", key=key, occurred_at=float(n)))
            elif kind == "summarize":
                events.append(SummarizeEvent(claude_session_id=session, project="proj", key=key))
            else:
                events.append(CompleteEvent(claude_session_id=session, project="proj", key=key))

        with together:
            got = _result_or_error(together, journal_writes.accept_events, together, events)
        with alone:
            wanted = _result_or_error(alone, _accept_each, alone, events)
        assert got == wanted, trial
        for table, columns in (("journal", "id, claude_session_id, kind, status, processed_at, idempotency_key"),
                               ("journal_payloads", "*"), ("sessions", "id, claude_session_id, status, prompt_counter")):
            dumps = [connection.execute(f"SELECT {columns} FROM {table} ORDER BY 1").fetchall()
                     for connection in (together, alone)]
            assert dumps[0] == dumps[1], (trial, table)
        keys = [event.key for event in events if event.key]
        fast += not unknown_session and len(set(keys)) == len(keys) and "old" not in keys
        together.close()
        alone.close()
    assert fast >= 10  # the three statements were tried, not only the one by one path


def test_a_row_is_read_as_the_types_the_schema_gives_it_or_refused_by_name() -> None:
    connection = apsw.Connection(":memory:")
    number, decimal, word, nothing, bit = one_row(connection, "SELECT 7, 1.5, 'seven', NULL, 1")
    assert (integer(number), real(number), real(decimal), text(word), optional_text(nothing), flag(bit)) == \
        (7, 7.0, 1.5, "seven", None, True)
    assert one_of(word, ("six", "seven")) == "seven"
    with pytest.raises(UnexpectedRow, match="expected an integer in a row of the store, got str 'seven'"):
        integer(word)
    with pytest.raises(UnexpectedRow, match="expected a text in a row of the store, got NoneType None"):
        text(nothing)
    with pytest.raises(UnexpectedRow, match="expected 0 or 1"):
        flag(number)
    with pytest.raises(UnexpectedRow, match="expected one of"):
        one_of(word, ("six",))
    with pytest.raises(UnexpectedRow, match="no row from 'SELECT 1 WHERE 0'"):
        one_row(connection, "SELECT 1 WHERE 0")
