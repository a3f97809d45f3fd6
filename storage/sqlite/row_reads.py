"""Row reads of the SQLite store: sessions, observations, summaries and the journal's pending
and parked events, as the worker's routes, actors and the context at SessionStart read them.

Each function takes a read connection and runs on a reader thread with a pooled read
connection (:class:`~sessionmem.storage.sqlite.readers.ReaderPool`); some run several reads in one
job, inside one :func:`snapshot`, since every thread hop costs a trip through the GIL.

Error handling:
    A row that does not exist is ``None`` or left out; SQL errors propagate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import apsw
import msgspec

from sessionmem.events import Envelope, ObservationEvent, decode_event
from sessionmem.protocol.prompts import typed_prompt
from sessionmem.records import (
    OBSERVATION,
    ContextRows,
    ContextStart,
    JournalCounts,
    ObservationDetail,
    ObservationRow,
    ProjectRow,
    SearchFilters,
    SessionHead,
    SessionInfo,
    SessionRow,
    SessionSoFar,
    SummaryInputs,
    SummaryRow,
)
from sessionmem.storage.search_terms import says_what_about
from sessionmem.storage.sqlite.agents import agent_condition
from sessionmem.storage.sqlite.fulltext import keep_matching
from sessionmem.storage.sqlite.origins import label_sql, origin_condition
from sessionmem.storage.sqlite.values import (
    all_rows,
    blob,
    flag,
    integer,
    one_row,
    optional_real,
    optional_row,
    optional_text,
    real,
    text,
    text_list,
    to_json,
)

if TYPE_CHECKING:
    from apsw import SQLiteValues

_SESSION_COLUMNS = (
    "id, claude_session_id, project, cwd, first_prompt, prompt_counter, status, failure, input_tokens,"
    " output_tokens, created_at, updated_at, completed_at,"
    " (SELECT count(*) FROM observations o WHERE o.session_db_id = s.id), project_key, share_file, agent"
)
# In ObservationRow's field order.
_OBSERVATION_COLUMNS = (
    "o.id, s.claude_session_id, o.project, o.prompt_number, o.tool_name, o.tool_use_id, o.agent_id, o.agent_type,"
    " o.failed, o.type, o.title, o.subtitle, o.facts, o.narrative, o.concepts, o.files_read, o.files_modified,"
    " o.compressed, o.compressor, o.model, o.input_tokens, o.output_tokens, o.created_at, " + label_sql("o")
    + ", o.provenance, o.flagged, s.agent"
)
_OBSERVATIONS_FROM = "FROM observations o JOIN sessions s ON s.id = o.session_db_id"
_OBSERVATION_WIDTH = 27


def _observation_row(row: SQLiteValues) -> ObservationRow:
    """An ``_OBSERVATION_COLUMNS`` row (and any columns after them) as its record."""
    return ObservationRow(
        id=integer(row[0]), claude_session_id=text(row[1]), project=text(row[2]), prompt_number=integer(row[3]),
        tool_name=text(row[4]), tool_use_id=text(row[5]), agent_id=optional_text(row[6]),
        agent_type=optional_text(row[7]), failed=flag(row[8]), type=text(row[9]), title=text(row[10]),
        subtitle=text(row[11]), facts=text_list(row[12]), narrative=text(row[13]), concepts=text_list(row[14]),
        files_read=text_list(row[15]), files_modified=text_list(row[16]), compressed=flag(row[17]),
        compressor=text(row[18]), model=optional_text(row[19]), input_tokens=integer(row[20]),
        output_tokens=integer(row[21]), created_at=real(row[22]), origin=text(row[23]), provenance=text(row[24]),
        flagged=flag(row[25]), agent=text(row[26]))


def observation_rows(connection: apsw.Connection, condition: str, params: dict[str, object]) -> list[ObservationRow]:
    """The observations that satisfy ``condition`` (SQL over ``o``, the observation, and ``s``, its session),
    in the order and number it says (``ORDER BY``, ``LIMIT`` may follow the condition)."""
    return [_observation_row(row) for row in all_rows(
        connection, f"SELECT {_OBSERVATION_COLUMNS} {_OBSERVATIONS_FROM} WHERE {condition}", params)]


def _observation_detail(row: SQLiteValues) -> ObservationDetail:
    """An ``_OBSERVATION_COLUMNS`` row followed by the session's row id, the event's id and its payload."""
    session_db_id, event_id, payload = row[_OBSERVATION_WIDTH:]
    tool_input = tool_response = None
    if payload is not None:  # the raw tool data lives in the journal row of the event
        event = decode_event(blob(payload))
        if isinstance(event, ObservationEvent):
            tool_input = event.tool_input
            tool_response = event.error if event.failed and event.tool_response is None else event.tool_response
    return ObservationDetail(**msgspec.structs.asdict(_observation_row(row)), session_db_id=integer(session_db_id),
                             event_id=integer(event_id), tool_input=tool_input, tool_response=tool_response)


_SUMMARY_COLUMNS = (
    "m.id, s.claude_session_id, m.project, m.prompt_number, m.request, m.investigated, m.learned, m.completed,"
    f" m.next_steps, m.notes, m.compressed, m.compressor, m.model, m.input_tokens, m.output_tokens, m.created_at,"
    f" {label_sql('m')}, m.provenance, m.flagged, s.agent"
)
_SUMMARIES_FROM = "FROM session_summaries m JOIN sessions s ON s.id = m.session_db_id"


def _summary_row(row: SQLiteValues) -> SummaryRow:
    return SummaryRow(
        id=integer(row[0]), claude_session_id=text(row[1]), project=text(row[2]), prompt_number=integer(row[3]),
        request=text(row[4]), investigated=text(row[5]), learned=text(row[6]), completed=text(row[7]),
        next_steps=text(row[8]), notes=text(row[9]), compressed=flag(row[10]), compressor=text(row[11]),
        model=optional_text(row[12]), input_tokens=integer(row[13]), output_tokens=integer(row[14]),
        created_at=real(row[15]), origin=text(row[16]), provenance=text(row[17]), flagged=flag(row[18]),
        agent=text(row[19]))


def _session_row(row: SQLiteValues) -> SessionRow:
    """A ``_SESSION_COLUMNS`` row as its record."""
    return SessionRow(
        session_db_id=integer(row[0]), claude_session_id=text(row[1]), project=text(row[2]),
        cwd=optional_text(row[3]), first_prompt=optional_text(row[4]), prompt_counter=integer(row[5]),
        status=text(row[6]), failure=optional_text(row[7]), input_tokens=integer(row[8]),
        output_tokens=integer(row[9]), created_at=real(row[10]), updated_at=real(row[11]),
        completed_at=optional_real(row[12]), observations=integer(row[13]), project_key=text(row[14]),
        share_file=flag(row[15]), agent=text(row[16]))


def journal_envelope(row: SQLiteValues) -> Envelope:
    """A journal row's id and payload (its first two columns) as the event it holds."""
    event_id, payload = row[0], row[1]
    return Envelope(integer(event_id), decode_event(blob(payload)))


@contextmanager
def snapshot(connection: apsw.Connection) -> Iterator[None]:
    """Reads inside see one state of the database (a read transaction)."""
    connection.execute("BEGIN")
    try:
        yield
    finally:
        connection.execute("COMMIT")


def _of_project(column: str, project: str | None) -> str:
    """The condition that rows are of ``project`` (``:project``), or none when ``project`` is ``None``.

    Written out only when asked for: ``(:project IS NULL OR column = :project)`` hides the
    column's index from SQLite, which then walks every project's rows newest first until
    enough are of this one -- the whole table, for a project with little stored, on every
    SessionStart.
    """
    return f"{column} = :project" if project is not None else "1"


def _session_heads(connection: apsw.Connection, *, claude_session_ids: Sequence[str]) -> list[SessionHead]:
    found = all_rows(
        connection, "SELECT claude_session_id, created_at, first_prompt FROM sessions"
        " WHERE claude_session_id IN (SELECT value FROM json_each(?))", (to_json(list(claude_session_ids)),))
    return [SessionHead(text(session), real(created_at), optional_text(first_prompt))
            for session, created_at, first_prompt in found]


def _recent_observation_ids(connection: apsw.Connection, *, project: str, limit: int,
                            origin: str | None = None) -> list[int]:
    params: dict[str, object] = {"project": project, "limit": limit}
    found = all_rows(  # observations_created (project, created_at) covers it (an origin is checked on the way)
        connection, f"SELECT id FROM observations o WHERE project = :project AND {origin_condition('o', origin, params)}"
        " ORDER BY created_at DESC, id DESC LIMIT :limit", params)
    return [integer(row_id) for (row_id,) in found]


def _only_flagged(alias: str, flagged: bool) -> str:
    """The condition that the row aliased ``alias`` is flagged (the viewer's filter), or none."""
    return f"{alias}.flagged = 1" if flagged else "1"


def list_summaries(connection: apsw.Connection, *, project: str | None, limit: int, offset: int,
                   origin: str | None = None, flagged: bool = False, agent: str | None = None) -> list[SummaryRow]:
    """The newest summaries of ``project`` (all: ``None``); ``origin``: of that origin only; ``flagged``:
    only those flagged (holding instruction-like text); ``agent``: of that agent's sessions only."""
    params: dict[str, object] = {"project": project, "limit": limit, "offset": offset}
    found = all_rows(
        connection,
        f"SELECT {_SUMMARY_COLUMNS} {_SUMMARIES_FROM} WHERE {_of_project('m.project', project)}"
        f" AND {origin_condition('m', origin, params)} AND {_only_flagged('m', flagged)}"
        f" AND {agent_condition('m', agent, params)}"
        " ORDER BY m.created_at DESC, m.id DESC LIMIT :limit OFFSET :offset",
        params,
    )
    return [_summary_row(row) for row in found]


def observations_by_ids(connection: apsw.Connection, *, ids: Sequence[int]) -> list[ObservationRow]:
    found = all_rows(
        connection,
        f"SELECT {_OBSERVATION_COLUMNS} {_OBSERVATIONS_FROM} WHERE o.id IN (SELECT value FROM json_each(?))",
        (to_json(list(ids)),))
    by_id = {row.id: row for row in map(_observation_row, found)}
    return [by_id[i] for i in dict.fromkeys(ids) if i in by_id]


# A prompt that says nothing to rank memories by (search_terms.says_what_about: "continue") is
# passed over: the focus is the newest prompt before it that does, among the newest
# FOCUS_LOOKBACK (else the newest, whatever it says).
FOCUS_LOOKBACK = 20


def _latest_prompt(connection: apsw.Connection, *, project: str, session: str = "",
                   origin: str | None = None) -> tuple[int, str] | None:
    """The newest prompt of ``session`` (resumed or compacted: its own work), else of the project, that says
    what the work is about (:func:`~sessionmem.storage.search_terms.says_what_about`).

    A slash command is judged, and returned, as the user typed it
    (:func:`~sessionmem.protocol.prompts.typed_prompt`): a stored prompt may hold its
    transcript tags, which would read as five words.
    """
    # The session's own first (a resumed session is about its own work, not another session's newer
    # prompt of the project), on its (session, prompt_number) key; then the project's, on the
    # prompts_project index (project, created_at), newest first: the cost does not grow with the store.
    params: dict[str, object] = {"session": session, "project": project, "limit": FOCUS_LOOKBACK}
    of_origin = origin_condition("p", origin, params)
    queries = [f"SELECT p.id, p.text FROM sessions s CROSS JOIN user_prompts p ON p.session_db_id = s.id"
               f" WHERE s.claude_session_id = :session AND p.project = :project AND {of_origin}"
               " ORDER BY p.prompt_number DESC, p.id DESC LIMIT :limit"] if session else []
    queries.append(f"SELECT id, text FROM user_prompts p WHERE project = :project AND {of_origin}"
                   " ORDER BY created_at DESC, id DESC LIMIT :limit")
    newest = None
    for sql in queries:
        for row_id, stored in connection.execute(sql, params):  # read no further than needed
            prompt = typed_prompt(text(stored))
            if says_what_about(prompt):
                return integer(row_id), prompt
            newest = newest or (integer(row_id), prompt)
    return newest


def read_context_start(connection: apsw.Connection, *, project: str, summaries: int, recent: int,
                       latest_prompt: bool, session: str = "", origin: str | None = None,
                       own: bool = False) -> ContextStart:
    """Where SessionStart's context starts, in one snapshot: the project's newest ``summaries``
    summaries, its ``recent`` newest observation ids, (``latest_prompt``) its focus prompt,
    ``session``'s own if it has one, and (``own``) ``session``'s own work so far (:func:`session_so_far`).

    Each read walks the project's own index: its cost does not grow with what other
    projects hold, so a new project's SessionStart does not walk every summary and prompt
    of the store. ``origin``: rows of that origin only (``SearchFilters.origin``).
    """
    with snapshot(connection):
        return ContextStart(
            list_summaries(connection, project=project, limit=summaries, offset=0, origin=origin),
            _recent_observation_ids(connection, project=project, limit=recent, origin=origin),
            _latest_prompt(connection, project=project, session=session, origin=origin) if latest_prompt else None,
            session_so_far(connection, claude_session_id=session, project=project, limit=recent)
            if own and session else None)


def session_so_far(connection: apsw.Connection, *, claude_session_id: str, project: str,
                   limit: int) -> SessionSoFar | None:
    """``claude_session_id``'s own work so far, if it is a session of ``project`` on this machine: its first and
    newest prompts, its newest summary, its ``limit`` newest observations (newest first).

    This machine's rows only: a session id in another machine's pulled rows is not this session's.
    Each read walks the session's own rows (its prompt, summary and observation indexes).
    """
    found = optional_row(
        connection, "SELECT s.id, coalesce(s.cwd, ''), coalesce(s.first_prompt, ''), coalesce((SELECT text"
        " FROM user_prompts p WHERE p.session_db_id = s.id ORDER BY prompt_number DESC LIMIT 1), '')"
        " FROM sessions s WHERE s.claude_session_id = ? AND s.project = ?", (claude_session_id, project))
    if found is None:
        return None
    session_db_id, cwd = integer(found[0]), text(found[1])
    first, latest = typed_prompt(text(found[2])), typed_prompt(text(found[3]))
    # On the project's (project, created_at) index, newest first: a session being compacted is among the newest.
    summary = optional_row(connection, f"SELECT {_SUMMARY_COLUMNS} {_SUMMARIES_FROM} WHERE m.project = ?"
                           " AND m.session_db_id = ? AND m.origin_machine = ''"
                           " ORDER BY m.created_at DESC, m.id DESC LIMIT 1", (project, session_db_id))
    observations = all_rows(
        connection, f"SELECT {_OBSERVATION_COLUMNS} {_OBSERVATIONS_FROM} WHERE o.session_db_id = ?"
        " AND o.origin_machine = '' ORDER BY o.id DESC LIMIT ?", (session_db_id, limit))
    return SessionSoFar(cwd, first, latest, _summary_row(summary) if summary is not None else None,
                        [_observation_row(row) for row in observations])

def context_rows(connection: apsw.Connection, candidates: Sequence[tuple[str, int]], filters: SearchFilters,
                 choose: Callable[[set[int]], list[int]]) -> ContextRows:
    """The observations ``choose`` picks among those of ``candidates`` that pass ``filters``, and the
    heads of their sessions, in one snapshot."""
    with snapshot(connection):
        kept = keep_matching(connection, candidates, filters) if candidates else set()
        observations = observations_by_ids(
            connection, ids=choose({row_id for kind, row_id in kept if kind == OBSERVATION}))
        named = list(dict.fromkeys(row.claude_session_id for row in observations))
        return ContextRows(observations, _session_heads(connection, claude_session_ids=named))


def session_info(connection: apsw.Connection, claude_session_id: str) -> SessionInfo | None:
    row = optional_row(
        connection,
        "SELECT s.id, s.claude_session_id, s.project, s.status, s.prompt_counter,"
        " coalesce((SELECT text FROM user_prompts p WHERE p.session_db_id = s.id"
        "           ORDER BY prompt_number DESC LIMIT 1), ''), s.input_tokens + s.output_tokens, s.agent"
        " FROM sessions s WHERE s.claude_session_id = ?",
        (claude_session_id,),
    )
    if row is None:
        return None
    session_db_id, session, project, status, prompt_counter, last_prompt, tokens_used, agent = row
    return SessionInfo(integer(session_db_id), text(session), text(project), text(status), integer(prompt_counter),
                       text(last_prompt), integer(tokens_used), text(agent))


def summary_inputs(connection: apsw.Connection, session: SessionInfo) -> SummaryInputs:
    prompts = [
        text(prompt)
        for (prompt,) in all_rows(
            connection,
            "SELECT text FROM user_prompts WHERE session_db_id = ? ORDER BY prompt_number",
            (session.session_db_id,),
        )
    ]
    observations = all_rows(
        connection,
        f"SELECT {_OBSERVATION_COLUMNS} {_OBSERVATIONS_FROM} WHERE o.session_db_id = ? ORDER BY o.id",
        (session.session_db_id,),
    )
    return SummaryInputs(prompts, [_observation_row(row) for row in observations])


def list_sessions(connection: apsw.Connection, *, project: str | None, limit: int, offset: int,
                  agent: str | None = None) -> list[SessionRow]:
    """The sessions of ``project`` (all: ``None``) most recently active first; ``agent``: that agent's only."""
    # The page first, then its observation counts: counted for every session of the project
    # before the sort, they would cost a count per session of the project on every page.
    of_agent = "agent = :agent" if agent is not None else "1"
    found = all_rows(
        connection,
        f"SELECT {_SESSION_COLUMNS} FROM (SELECT * FROM sessions WHERE {_of_project('project', project)}"
        f" AND {of_agent} ORDER BY updated_at DESC, id DESC LIMIT :limit OFFSET :offset) s"
        " ORDER BY updated_at DESC, id DESC",
        {"project": project, "limit": limit, "offset": offset, "agent": agent},
    )
    return [_session_row(row) for row in found]


def list_projects(connection: apsw.Connection, *, limit: int, offset: int = 0,
                  containing: str | None = None) -> list[ProjectRow]:
    found = all_rows(  # the sessions_project index (project, updated_at) covers it
        connection,
        "SELECT project, count(*), max(updated_at) FROM sessions"
        " WHERE ?1 IS NULL OR instr(lower(project), lower(?1)) > 0 GROUP BY project"
        " ORDER BY max(updated_at) DESC, project LIMIT ?2 OFFSET ?3", (containing, limit, offset))
    return [ProjectRow(text(project), integer(sessions), real(last_active_at))
            for project, sessions, last_active_at in found]


def session_by_db_id(connection: apsw.Connection, session_db_id: int) -> SessionRow | None:
    row = optional_row(connection, f"SELECT {_SESSION_COLUMNS} FROM sessions s WHERE id = ?", (session_db_id,))
    return _session_row(row) if row is not None else None


def list_observations(connection: apsw.Connection, *, project: str | None, limit: int, offset: int,
                      origin: str | None = None, flagged: bool = False,
                      agent: str | None = None) -> list[ObservationRow]:
    """The newest observations of ``project`` (all: ``None``); ``origin``: of that origin only; ``agent``: of
    that agent's sessions only;
    ``flagged``: only those flagged (holding instruction-like text)."""
    params: dict[str, object] = {"project": project, "limit": limit, "offset": offset}
    found = all_rows(
        connection,
        f"SELECT {_OBSERVATION_COLUMNS} {_OBSERVATIONS_FROM} WHERE {_of_project('o.project', project)}"
        f" AND {origin_condition('o', origin, params)} AND {_only_flagged('o', flagged)}"
        f" AND {agent_condition('o', agent, params)}"
        " ORDER BY o.created_at DESC, o.id DESC LIMIT :limit OFFSET :offset",
        params,
    )
    return [_observation_row(row) for row in found]


def get_observation(connection: apsw.Connection, observation_id: int) -> ObservationDetail | None:
    row = optional_row(
        connection,
        f"SELECT {_OBSERVATION_COLUMNS}, o.session_db_id, o.event_id, p.payload {_OBSERVATIONS_FROM}"
        " LEFT JOIN journal_payloads p ON p.id = o.event_id WHERE o.id = ?",
        (observation_id,),
    )
    return _observation_detail(row) if row is not None else None


def llm_tokens_since(connection: apsw.Connection, timestamp: float) -> int:
    (tokens,) = one_row(
        connection,
        "SELECT (SELECT coalesce(sum(input_tokens + output_tokens), 0) FROM observations WHERE stored_at >= ?1)"
        " + (SELECT coalesce(sum(input_tokens + output_tokens), 0) FROM session_summaries"
        "    WHERE stored_at >= ?1)", (timestamp,))
    return integer(tokens)


# The parked sessions /debug names, at most.
PARKED_SESSIONS_LISTED = 20


def journal_counts(connection: apsw.Connection) -> JournalCounts:
    # Open rows come from the small partial index; journal rows are never
    # deleted, so the rest are done: no scan of the whole journal per /debug.
    counts = {text(status): integer(count) for status, count in all_rows(
        connection, "SELECT status, count(*) FROM journal WHERE status != 'done' GROUP BY status")}
    (total,) = one_row(connection, "SELECT coalesce(max(id), 0) FROM journal")
    pending, parked = counts.get("pending", 0), counts.get("parked", 0)
    sessions = [text(session) for (session,) in all_rows(
        connection, "SELECT DISTINCT claude_session_id FROM journal WHERE status = 'parked' LIMIT ?",
        (PARKED_SESSIONS_LISTED,))] if parked else []
    return JournalCounts(pending, parked, integer(total) - pending - parked, sessions)


def pending_events(connection: apsw.Connection) -> list[Envelope]:
    """The journal's pending events, in journal order: what a start replays."""
    return [journal_envelope(row) for row in all_rows(
        connection, "SELECT j.id, p.payload FROM journal j JOIN journal_payloads p ON p.id = j.id"
        " WHERE j.status = 'pending' ORDER BY j.id")]
