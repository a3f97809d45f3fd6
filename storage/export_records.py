"""The records of an export file, which are also what a team row carries: a header, and one record per
session, prompt, observation and summary.

An export is JSON Lines: a header, then per session its ``session`` record followed by
its ``prompt``, ``observation`` and ``summary`` records, each naming its session by
Claude's session id (never by a row id of the database it came from). What an
observation was made from -- the raw tool data in the journal -- is not exported.

Identity between databases: a session is the same session if its Claude session id is; a
prompt is the same if its session and number are; an observation if its session and tool use
id are; a summary if its session, prompt number and time are. The fields are annotated with
the caps of :mod:`~sessionmem.storage.record_rules`, so a record from outside decodes within
them whatever its door (an export file, the team database). Reading and storing them in the
SQLite store: :mod:`~sessionmem.storage.sqlite.store.export_import`; in the team database:
:mod:`~sessionmem.storage.pg.transfer`.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

import msgspec

from sessionmem.protocol import routes
from sessionmem.records import AgentName, Identifier, ObservationType, PathText, SessionId, ToolName
from sessionmem.storage.record_rules import Items, LongText, Moment, TitleText

FORMAT = routes.EXPORT_FORMAT
VERSION = routes.EXPORT_VERSION


class Header(msgspec.Struct, frozen=True, rename="camel", tag="header", tag_field="kind"):
    format: str
    version: int
    exported_at: float
    project: str | None = None
    since: float | None = None


# What an imported record may say (pulled or from a file: storage/record_rules.py holds the caps and
# the clamp): a prompt number SQLite and the pages can hold, a session status the schema knows, ids and
# paths of the lengths ingest allows. (A createdAt of 1e300 once made every context of its project a
# 500; a prompt number of 2**63 the import itself.)
PromptNumber = Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)]
SessionStatus = Literal["initialized", "active", "completed", "failed"]  # the CHECK of sessions.status
SESSION_STATUSES: tuple[SessionStatus, ...] = get_args(SessionStatus)


class SessionRecord(msgspec.Struct, frozen=True, kw_only=True, rename="camel", tag="session", tag_field="kind"):
    claude_session_id: SessionId
    project: PathText
    cwd: PathText | None = None
    first_prompt: LongText | None = None
    status: SessionStatus = "completed"
    created_at: Moment = 0.0
    updated_at: Moment = 0.0
    completed_at: Moment | None = None
    agent: AgentName = "claude-code"  # whose hooks recorded it (protocol/agents.py); absent: Claude Code's


# Every record of a memory says where its text came from and whether it was flagged (docs/search.md,
# "Provenance"): optional, for exports written before they were (the defaults). An import believes
# neither: what it stores is an import's, or another machine's, and it is checked on arrival
# (arrived()); a "flagged" it is told is kept, an unflagged one is not believed.
ProvenanceValue = Annotated[str, msgspec.Meta(max_length=20)]


class PromptRecord(msgspec.Struct, frozen=True, rename="camel", tag="prompt", tag_field="kind"):
    claude_session_id: SessionId
    prompt_number: PromptNumber
    text: LongText
    created_at: Moment
    provenance: ProvenanceValue = "prompt"
    flagged: bool = False


class ObservationRecord(msgspec.Struct, frozen=True, kw_only=True, rename="camel", tag="observation",
                        tag_field="kind"):
    claude_session_id: SessionId
    project: PathText
    prompt_number: PromptNumber
    tool_name: ToolName
    tool_use_id: Identifier
    type: ObservationType  # what every page and filter knows (import refused "nonsense" no more)
    title: TitleText
    created_at: Moment
    agent_id: Identifier | None = None
    agent_type: Identifier | None = None
    failed: bool = False
    subtitle: TitleText = ""
    facts: Items = []
    narrative: LongText = ""
    concepts: Items = []
    files_read: Items = []
    files_modified: Items = []
    compressed: bool = True
    compressor: Identifier = "offline"
    model: Identifier | None = None
    provenance: ProvenanceValue = "tool"
    flagged: bool = False


class SummaryRecord(msgspec.Struct, frozen=True, kw_only=True, rename="camel", tag="summary", tag_field="kind"):
    claude_session_id: SessionId
    project: PathText
    prompt_number: PromptNumber
    created_at: Moment
    request: LongText = ""
    investigated: LongText = ""
    learned: LongText = ""
    completed: LongText = ""
    next_steps: LongText = ""
    notes: LongText = ""
    compressed: bool = True
    compressor: Identifier = "offline"
    model: Identifier | None = None
    provenance: ProvenanceValue = "tool"
    flagged: bool = False


Record = SessionRecord | PromptRecord | ObservationRecord | SummaryRecord
Line = Header | Record


class ImportCounts(msgspec.Struct, frozen=True):
    sessions: int = 0
    prompts: int = 0
    observations: int = 0
    summaries: int = 0
    already_there: int = 0  # records that were imported before (or stored live): nothing changed
    recorded_here: int = 0  # records from a file aimed at a session this machine recorded: left out
