"""Memories out of the SQLite store and in: its rows read page by page as export records, and records imported.

The records, their file format and their identity rules are :mod:`~sessionmem.storage.export_records`.
Import is idempotent and keeps ids apart: rows get new ids in the receiving database; a
session is the same session if its Claude session id is; a prompt is the same if its
session and number are; an observation if its session and tool use id are; a summary
if its session, prompt number and time are. Sessions already there keep their status,
and span the times of what is imported into them. Imported observations and summaries
have no journal event of their own: their ``event_id`` is 0 (observations) or a
negative number derived from the summary's identity (the column is unique). Every import
holds records to the rules of :mod:`~sessionmem.storage.record_rules` (the caps, as the
records decode; times from the future clamped, as they are stored), whatever their door.

Each function runs on a reader (export) or inside the writer's transaction (import).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, get_args

import apsw
import msgspec

from sessionmem.protocol.instructions import guard_observation, guard_summary, instruction_like, withhold
from sessionmem.records import OBSERVATION_TYPES, AgentName, Provenance
from sessionmem.storage.export_records import (
    SESSION_STATUSES,
    ImportCounts,
    ObservationRecord,
    PromptRecord,
    Record,
    SessionRecord,
    SummaryRecord,
)
from sessionmem.storage.record_rules import clamped, fitted
from sessionmem.storage.sqlite.values import (
    all_rows,
    flag,
    integer,
    one_of,
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

PAGE = 200  # sessions a page of an export
AGENT_NAMES: tuple[AgentName, ...] = get_args(AgentName)


# -- export -------------------------------------------------------------------------------


def export_page(connection: apsw.Connection, *, project: str | None, since: float | None,
                after_session: int) -> tuple[list[Record], int]:
    """The records of up to :data:`PAGE` sessions (by row id, after ``after_session``) of ``project``
    that have anything since ``since``; and the last session's row id (0: no more)."""
    sessions = all_rows(
        connection,
        "SELECT id, claude_session_id, project, cwd, first_prompt, status, created_at, updated_at, completed_at,"
        " agent FROM sessions WHERE id > ?1 AND (?2 IS NULL OR project = ?2) AND (?3 IS NULL OR updated_at >= ?3)"
        " ORDER BY id LIMIT ?4", (after_session, project, since, PAGE))
    records: list[Record] = []
    last = 0
    for row in sessions:
        last, session = integer(row[0]), session_record(row[1:])
        records.append(session)
        window = (last, since)
        claude_id = session.claude_session_id
        records += [prompt_record(claude_id, row) for row in all_rows(
            connection, "SELECT prompt_number, text, created_at, provenance, flagged FROM user_prompts"
            " WHERE session_db_id = ?1"
            " AND (?2 IS NULL OR created_at >= ?2) ORDER BY prompt_number", window)]
        records += [observation_record(claude_id, row) for row in all_rows(
            connection,
            f"SELECT {OBSERVATION_COLUMNS} FROM observations WHERE session_db_id = ?1"
            " AND (?2 IS NULL OR created_at >= ?2) ORDER BY id", window)]
        records += [summary_record(claude_id, row) for row in all_rows(
            connection,
            f"SELECT {SUMMARY_COLUMNS} FROM session_summaries WHERE session_db_id = ?1"
            " AND (?2 IS NULL OR created_at >= ?2) ORDER BY id", window)]
    return records, (last if len(sessions) == PAGE else 0)


def prompt_record(claude_id: str, row: SQLiteValues) -> PromptRecord:
    """A prompt's record from its columns (number, text, time, provenance, flagged), within the caps of an import."""
    number, prompt, at, provenance, flagged = row
    return fitted(PromptRecord(claude_id, integer(number), text(prompt), real(at), text(provenance), flag(flagged)))


def session_record(row: SQLiteValues) -> SessionRecord:
    """A session's record from its columns: those of :func:`export_page` after the row id."""
    claude_id, project, cwd, first_prompt, status, created_at, updated_at, completed_at, agent = row
    return fitted(SessionRecord(
        claude_session_id=text(claude_id), project=text(project), cwd=optional_text(cwd),
        first_prompt=optional_text(first_prompt), status=one_of(status, SESSION_STATUSES),
        created_at=real(created_at), updated_at=real(updated_at), completed_at=optional_real(completed_at),
        agent=one_of(agent, AGENT_NAMES)))


# In the order observation_record reads them.
OBSERVATION_COLUMNS = (
    "project, prompt_number, tool_name, tool_use_id, type, title, created_at, agent_id, agent_type, failed, subtitle,"
    " facts, narrative, concepts, files_read, files_modified, compressed, compressor, model, provenance, flagged")


def observation_record(claude_id: str, row: SQLiteValues) -> ObservationRecord:
    """An observation's record from its columns (:data:`OBSERVATION_COLUMNS`), within the caps of an import."""
    return fitted(ObservationRecord(
        claude_session_id=claude_id, project=text(row[0]), prompt_number=integer(row[1]), tool_name=text(row[2]),
        tool_use_id=text(row[3]), type=one_of(row[4], OBSERVATION_TYPES), title=text(row[5]),
        created_at=real(row[6]), agent_id=optional_text(row[7]), agent_type=optional_text(row[8]),
        failed=flag(row[9]), subtitle=text(row[10]), facts=text_list(row[11]), narrative=text(row[12]),
        concepts=text_list(row[13]), files_read=text_list(row[14]), files_modified=text_list(row[15]),
        compressed=flag(row[16]), compressor=text(row[17]), model=optional_text(row[18]), provenance=text(row[19]),
        flagged=flag(row[20])))


# In the order summary_record reads them.
SUMMARY_COLUMNS = ("project, prompt_number, created_at, request, investigated, learned, completed, next_steps, notes,"
                    " compressed, compressor, model, provenance, flagged")


def summary_record(claude_id: str, row: SQLiteValues) -> SummaryRecord:
    """A summary's record from its columns (:data:`SUMMARY_COLUMNS`), within the caps of an import."""
    return fitted(SummaryRecord(
        claude_session_id=claude_id, project=text(row[0]), prompt_number=integer(row[1]), created_at=real(row[2]),
        request=text(row[3]), investigated=text(row[4]), learned=text(row[5]), completed=text(row[6]),
        next_steps=text(row[7]), notes=text(row[8]), compressed=flag(row[9]), compressor=text(row[10]),
        model=optional_text(row[11]), provenance=text(row[12]), flagged=flag(row[13])))


# -- import -------------------------------------------------------------------------------


def _summary_event_id(record: SummaryRecord) -> int:
    """A negative id, the same for the same summary: imported summaries have no journal event."""
    identity = f"{record.claude_session_id}\0{record.prompt_number}\0{record.created_at!r}".encode()
    return -(zlib.crc32(identity) | ((zlib.adler32(identity) & 0x3FFFFFFF) << 32)) - 1  # within SQLite's int64


def _session(connection: apsw.Connection, claude_session_id: str, project: str, at: float,
             project_key: str = "") -> tuple[int, bool]:
    """The row id of the session, and whether it was made now (a record came without its session's)."""
    row = optional_row(connection, "SELECT id FROM sessions WHERE claude_session_id = ?", (claude_session_id,))
    if row is not None:
        return integer(row[0]), False
    connection.execute(
        "INSERT INTO sessions (claude_session_id, project, project_key, status, created_at, updated_at)"
        " VALUES (?, ?, ?, 'completed', ?, ?)", (claude_session_id, project, project_key, at, at))
    return connection.last_insert_rowid(), True


class PulledFrom(msgspec.Struct, frozen=True, kw_only=True):
    """Where an imported record comes from, when not from a file: another machine, through the team database.

    Its rows keep their origin (``origin_machine``, ``origin_user``: never both empty, which
    means this machine's own), its sessions their project key, and a pulled session merges
    into the one already here by the team's rule (``merge``) rather than keeping its state.
    """

    machine: str
    user: str
    project_key: str  # sessions.project_key: a normalized git remote, "" for a project known by name
    project: str  # the project's name on this machine (it may live under another directory name here)


# A session's status moves only forward when a pulled copy merges into it: the furthest wins.
_STATUS_RANK = "CASE {} WHEN 'initialized' THEN 0 WHEN 'active' THEN 1 ELSE 2 END"


def import_records(connection: apsw.Connection, records: Sequence[Record], now: float,
                   pulled_from: Sequence[PulledFrom] | None = None) -> ImportCounts:
    """Store ``records`` (a page of an export; a session record before its rows); see the module docstring.

    ``pulled_from``: one for each record, when they come from another machine (see :class:`PulledFrom`).
    Either way each is checked on arrival (:func:`arrived`): its provenance is the import's or the
    team's, and it is flagged when its text is instruction-like.
    """
    counts: dict[str, int] = {"sessions": 0, "prompts": 0, "observations": 0, "summaries": 0, "already_there": 0,
                              "recorded_here": 0}
    projects: dict[str, str] = {}
    recorded_here: dict[str, bool] = {}
    for number, record in enumerate(records):
        source = pulled_from[number] if pulled_from else None
        if source is None and _recorded_here(connection, record.claude_session_id, recorded_here):
            counts["recorded_here"] += 1
            continue
        _import_record(connection, arrived(clamped(record, now), Provenance.TEAM if source else Provenance.IMPORT),
                       now, counts, projects, source,
                       _summary_event_id(record) if isinstance(record, SummaryRecord) else 0)
    return ImportCounts(**counts)


def _recorded_here(connection: apsw.Connection, claude_session_id: str, known: dict[str, bool]) -> bool:
    """Whether this machine recorded the session (its hooks sent a prompt or a tool use of it), as of the
    import's start (``known``: the answers so far). Not its status: an exported session keeps its own.

    A file is anyone's, and a session id is all it takes to write into a session: a file's records
    would widen its times, set its prompt counter to 2**31 - 1 (its next prompt's number then one no
    export takes) or take the tool use id of its next tool use. So a file adds nothing to such a
    session; a session an import made is the import's to add to.
    """
    if claude_session_id not in known:
        row = optional_row(connection, "SELECT id FROM sessions WHERE claude_session_id = ?", (claude_session_id,))
        known[claude_session_id] = row is not None and (
            optional_row(connection, "SELECT 1 FROM user_prompts WHERE session_db_id = ?1 AND provenance = 'prompt'"
                                        " AND origin_machine = '' LIMIT 1", (row[0],)) is not None
            or optional_row(connection, "SELECT 1 FROM observations WHERE session_db_id = ?1 AND event_id > 0 LIMIT 1",
                            (row[0],)) is not None)
    return known[claude_session_id]


def _import_record(connection: apsw.Connection, record: Record, now: float, counts: dict[str, int],
                   projects: dict[str, str], source: PulledFrom | None, summary_event_id: int) -> None:
    """Store ``record`` (its times clamped: storage/record_rules.py). ``summary_event_id``: of the record as it
    came, before the clamp, so that a summary from the future imported twice is stored once."""
    if isinstance(record, SessionRecord):
        _import_session(connection, record, counts, projects, source)
        return
    if source is not None:
        project = source.project
    else:
        project = getattr(record, "project", None) or projects.get(record.claude_session_id, "unknown")
    session, made = _session(connection, record.claude_session_id, project, record.created_at,
                             source.project_key if source else "")
    counts["sessions"] += made
    origin = (source.machine, source.user) if source else ("", "")
    if isinstance(record, PromptRecord):
        kind, stored = "prompts", _import_prompt(connection, record, session, origin)
    elif isinstance(record, ObservationRecord):
        kind, stored = "observations", _import_observation(connection, record, session, project, now, origin)
    else:
        kind, stored = "summaries", _import_summary(connection, record, session, project, now, origin,
                                                    summary_event_id)
    counts[kind if stored else "already_there"] += 1


def _import_session(connection: apsw.Connection, record: SessionRecord, counts: dict[str, int],
                    projects: dict[str, str], source: PulledFrom | None) -> None:
    """A session, new or merged into the one already here (its times widened; a pulled one by the team's rule)."""
    project = source.project if source else record.project
    connection.execute(
        "INSERT OR IGNORE INTO sessions (claude_session_id, project, project_key, cwd, first_prompt, status,"
        " created_at, updated_at, completed_at, agent) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (record.claude_session_id, project, source.project_key if source else "", record.cwd,
         record.first_prompt, record.status if record.status != "failed" else "completed", record.created_at,
         record.updated_at, record.completed_at, record.agent))
    counts["sessions" if connection.changes() else "already_there"] += 1
    projects[record.claude_session_id] = project
    connection.execute(
        "UPDATE sessions SET created_at = min(created_at, ?1), updated_at = max(updated_at, ?2)"
        " WHERE claude_session_id = ?3", (record.created_at, record.updated_at, record.claude_session_id))
    if source is not None:
        # The team's merge (docs/team.md): status the furthest (a session that failed here stays
        # failed: its events wait here for a replay), completed_at the latest, the first prompt
        # kept, the project key learnt. Only what changes is written (the push follows changes).
        status = record.status if record.status != "failed" else "completed"
        connection.execute(
            "UPDATE sessions SET"
            f" status = CASE WHEN status != 'failed' AND {_STATUS_RANK.format('?1')} >"
            f" {_STATUS_RANK.format('status')} THEN ?1 ELSE status END,"
            " completed_at = CASE WHEN ?2 IS NOT NULL AND (completed_at IS NULL OR completed_at < ?2)"
            " THEN ?2 ELSE completed_at END,"
            " first_prompt = coalesce(first_prompt, ?3),"
            " project_key = CASE project_key WHEN '' THEN ?4 ELSE project_key END"
            " WHERE claude_session_id = ?5",
            (status, record.completed_at, record.first_prompt, source.project_key, record.claude_session_id))


def _import_prompt(connection: apsw.Connection, record: PromptRecord, session: int, origin: tuple[str, str]) -> bool:
    """Whether the prompt was new here; the session's prompt counter and first prompt follow it."""
    connection.execute(
        "INSERT OR IGNORE INTO user_prompts (session_db_id, project, prompt_number, text, created_at,"
        " origin_machine, origin_user, provenance, flagged)"
        " VALUES (?1, (SELECT project FROM sessions WHERE id = ?1), ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        (session, record.prompt_number, record.text, record.created_at, *origin, record.provenance,
         int(record.flagged)))
    stored = connection.changes() > 0
    connection.execute(
        "UPDATE sessions SET prompt_counter = max(prompt_counter, ?1), first_prompt = coalesce(first_prompt, ?2)"
        " WHERE id = ?3", (record.prompt_number, record.text, session))
    return stored


def _import_observation(connection: apsw.Connection, record: ObservationRecord, session: int, project: str,
                        now: float, origin: tuple[str, str]) -> bool:
    """Whether the observation was new here."""
    connection.execute(
        "INSERT OR IGNORE INTO observations (session_db_id, project, prompt_number, event_id, tool_name,"
        " tool_use_id, agent_id, agent_type, failed, type, title, subtitle, facts, narrative, concepts,"
        " files_read, files_modified, compressed, compressor, model, created_at, stored_at, origin_machine,"
        " origin_user, provenance, flagged)"
        " VALUES (?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (session, project, record.prompt_number, record.tool_name, record.tool_use_id,
         record.agent_id, record.agent_type, int(record.failed), record.type, record.title, record.subtitle,
         to_json(record.facts), record.narrative, to_json(record.concepts), to_json(record.files_read),
         to_json(record.files_modified), int(record.compressed), record.compressor, record.model,
         record.created_at, now, *origin, record.provenance, int(record.flagged)))
    return connection.changes() > 0


def _import_summary(connection: apsw.Connection, record: SummaryRecord, session: int, project: str, now: float,
                    origin: tuple[str, str], summary_event_id: int) -> bool:
    """Whether the summary was new here: the same summary is known by what it is, not by its event id (one
    the worker made itself has its journal event's: an import of a store into itself made every summary twice)."""
    if optional_row(
            connection,
            "SELECT 1 FROM session_summaries WHERE session_db_id = ? AND prompt_number = ? AND created_at = ?",
            (session, record.prompt_number, record.created_at)) is not None:
        return False
    connection.execute(
        "INSERT OR IGNORE INTO session_summaries (session_db_id, project, prompt_number, event_id, request,"
        " investigated, learned, completed, next_steps, notes, compressed, compressor, model, created_at,"
        " stored_at, origin_machine, origin_user, provenance, flagged)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (session, project, record.prompt_number, summary_event_id, record.request,
         record.investigated, record.learned, record.completed, record.next_steps, record.notes,
         int(record.compressed), record.compressor, record.model, record.created_at, now, *origin,
         record.provenance, int(record.flagged)))
    return connection.changes() > 0


# -- checked on arrival ---------------------------------------------------------------------

_SOURCES = {Provenance.TEAM: "another machine", Provenance.IMPORT: "an imported file"}


def arrived(record: Record, provenance: Provenance) -> Record:
    """``record`` as it is stored: nothing it says of itself is believed.

    Its provenance becomes the way it came (``provenance``: an import's or the team's, whatever
    it claims); it is flagged when its text is instruction-like
    (:mod:`sessionmem.protocol.instructions`; a record that says it is flagged stays so, one that
    says it is not is checked), or when what it names is (its project, tool, ids, agent, files, model:
    not rewritten here, so a re-import finds the record); and such text is never kept in an observation's title or
    subtitle, or a summary's "Learned" or "Next steps": it moves, quoted, into the facts or the
    notes, as a compressor here would have done. A prompt keeps its text (what was typed) and is
    flagged. Never raises for what a record holds (the detector reads a bounded part of each text).
    """
    source = _SOURCES.get(provenance, str(provenance))
    if isinstance(record, PromptRecord):
        return msgspec.structs.replace(record, provenance=provenance.value,
                                       flagged=record.flagged or instruction_like(record.text))
    if isinstance(record, ObservationRecord):
        guarded = guard_observation(
            title=record.title, subtitle=record.subtitle, facts=record.facts, narrative=record.narrative,
            concepts=record.concepts, source=source, tainted=record.flagged or _names_give_orders(record),
            fallback_title=f"{withhold(record.tool_name)[0]}: instruction-like text withheld (quoted in the facts)")
        return msgspec.structs.replace(
            record, title=guarded.title, subtitle=guarded.subtitle, facts=list(guarded.facts),
            narrative=guarded.narrative, concepts=list(guarded.concepts), provenance=provenance.value,
            flagged=guarded.flagged)
    if isinstance(record, SummaryRecord):
        fields, flagged = guard_summary(
            {"request": record.request, "investigated": record.investigated, "learned": record.learned,
             "completed": record.completed, "next_steps": record.next_steps, "notes": record.notes},
            source=source, tainted=record.flagged or _names_give_orders(record))
        return msgspec.structs.replace(record, **fields, provenance=provenance.value, flagged=flagged)
    return record


# What else a record names, and every page and answer shows, though no guard rewrites it (a re-import must
# find the record by it): an order there flags the memory.
_NAMES = ("project", "tool_name", "tool_use_id", "agent_id", "agent_type", "compressor", "model", "claude_session_id")


def _names_give_orders(record: ObservationRecord | SummaryRecord) -> bool:
    names = [value for name in _NAMES if isinstance(value := getattr(record, name, None), str)]
    if isinstance(record, ObservationRecord):
        names += [*record.files_read, *record.files_modified]
    return any(instruction_like(name) for name in names if name)
