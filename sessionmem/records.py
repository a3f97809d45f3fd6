"""What compression produces and what storage keeps and returns: typed, frozen records.

Compressors build :class:`CompressedObservation` and :class:`CompressedSummary`;
storage returns rows (:class:`ObservationRow`, :class:`SummaryRow`, :class:`SessionRow`
...). They live here, below both, so that compressors need not import storage.

Naming: ``claude_session_id`` is Claude Code's session id (a string);
``session_db_id`` is the integer key of its row in ``sessions``. Field names are
snake_case; the HTTP edge writes them in camelCase (``sessionmem.server.jsonapi``).
"""

from __future__ import annotations

import enum
from typing import Annotated, Any, Literal, get_args

import msgspec

from sessionmem.protocol.agents import AGENTS, DEFAULT_AGENT
from sessionmem.protocol.limits import MAX_IDENTIFIER, MAX_PATH, MAX_SESSION_ID, MAX_TOOL_NAME

ObservationType = Literal["bugfix", "feature", "refactor", "change", "discovery", "decision", "failure"]
OBSERVATION_TYPES: tuple[ObservationType, ...] = get_args(ObservationType)
# The concept the offline compressor gives a routine command (`git status`, `ls`, a formatter): the
# injected context puts such observations after the others.
ROUTINE_CONCEPT = "routine"


# The lengths of what names a session, a tool use or a path, wherever a body or a record is decoded
# (ingest, import): one side door less.
SessionId = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_SESSION_ID)]
Identifier = Annotated[str, msgspec.Meta(max_length=MAX_IDENTIFIER)]
PathText = Annotated[str, msgspec.Meta(max_length=MAX_PATH)]
ToolName = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TOOL_NAME)]

# The agents a record may name (sessionmem.protocol.agents.AGENTS, which the hook path reads without typing):
# what an import or a pull decodes a session's agent as, so an unknown name is a malformed record.
AgentName = Literal["claude-code", "codex", "gemini-cli", "opencode"]
if get_args(AgentName) != AGENTS:
    raise ImportError("records.AgentName must name exactly protocol.agents.AGENTS")

# -- provenance -------------------------------------------------------------------------


class Provenance(enum.StrEnum):
    """Where a stored memory's text came from (docs/search.md, "Provenance"); beside its origin (who).

    A memory is as trusted as its least trusted source: what came from a tool's output or from
    another machine may hold text planted to steer an agent, and is checked for it
    (:mod:`sessionmem.protocol.instructions`).
    """

    PROMPT = "prompt"  # the user's own words (a prompt)
    TOOL = "tool"  # built by sessionmem's rules from a tool's output (and the prompt it answered)
    MODEL = "model"  # written by a compressor's model from tool output (``compressor`` and ``model`` say which)
    TEAM = "team"  # another machine's, pulled from the team database, whatever it claims
    IMPORT = "import"  # read from an export file (another machine, or a backup), whatever it claims


PROVENANCES: tuple[str, ...] = tuple(member.value for member in Provenance)


class CompressedObservation(msgspec.Struct, frozen=True):
    """The structured, searchable form of one tool use."""

    type: str
    title: str
    subtitle: str = ""
    facts: tuple[str, ...] = ()
    narrative: str = ""
    concepts: tuple[str, ...] = ()
    files_read: tuple[str, ...] = ()
    files_modified: tuple[str, ...] = ()
    compressed: bool = True  # False: LLM output unusable, fields built from the raw tool data
    compressor: str = "offline"
    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    provenance: Provenance = Provenance.TOOL
    flagged: bool = False  # its text, or the tool output it was made from, held instruction-like text


class CompressedSummary(msgspec.Struct, frozen=True):
    request: str = ""
    investigated: str = ""
    learned: str = ""
    completed: str = ""
    next_steps: str = ""
    notes: str = ""
    compressed: bool = True
    compressor: str = "offline"
    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    provenance: Provenance = Provenance.TOOL
    flagged: bool = False  # its text, or an observation it was made from, held instruction-like text


# -- origins ----------------------------------------------------------------------------

# Where a row came from. This machine's own rows are stored without a name (both origin
# columns '', so they follow a renamed machine) and shown as "" ; a row another machine
# wrote is shown as "user@machine". A filter names them: LOCAL_ORIGIN for this machine's
# own, else a machine name, a user name, or "user@machine".
LOCAL_ORIGIN = "local"


def origin_label(machine: str, user: str) -> str:
    """How a row's origin is shown: ``""`` for this machine's own, ``user@machine`` (or the machine alone)."""
    if not machine:
        return ""
    return f"{user}@{machine}" if user else machine


# -- rows -------------------------------------------------------------------------------


class SessionInfo(msgspec.Struct, frozen=True):
    """What a session actor needs to know about its session."""

    session_db_id: int
    claude_session_id: str
    project: str
    status: str
    prompt_counter: int
    last_prompt: str
    tokens_used: int = 0  # LLM input + output tokens of its stored results
    agent: str = DEFAULT_AGENT  # the agent whose hooks recorded it (protocol/agents.py)


class SessionRow(msgspec.Struct, frozen=True, kw_only=True):
    session_db_id: int
    claude_session_id: str
    project: str
    cwd: str | None
    first_prompt: str | None
    prompt_counter: int
    status: str  # initialized | active | completed | failed
    failure: str | None
    input_tokens: int
    output_tokens: int
    created_at: float
    updated_at: float
    completed_at: float | None
    observations: int
    project_key: str = ""  # the repository between machines: its normalized git remote ("" without one)
    share_file: bool = False  # its repository root held the team opt-in file when it began
    agent: str = DEFAULT_AGENT  # the agent whose hooks recorded it (protocol/agents.py): its first event's


class SessionHead(msgspec.Struct, frozen=True):
    """What a context plan says of a session: when it started and with what request."""

    claude_session_id: str
    created_at: float
    first_prompt: str | None


class ProjectRow(msgspec.Struct, frozen=True):
    project: str
    sessions: int
    last_active_at: float  # the latest update of any of its sessions


class ObservationRow(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    claude_session_id: str
    project: str
    prompt_number: int
    tool_name: str
    tool_use_id: str
    agent_id: str | None
    agent_type: str | None
    failed: bool
    type: str
    title: str
    subtitle: str
    facts: list[str]
    narrative: str
    concepts: list[str]
    files_read: list[str]
    files_modified: list[str]
    compressed: bool
    compressor: str
    model: str | None
    input_tokens: int
    output_tokens: int
    created_at: float
    origin: str = ""  # "" this machine's own; else "user@machine" (origin_label)
    provenance: str = Provenance.TOOL.value  # a Provenance value: where its text came from
    flagged: bool = False  # it holds (quoted) instruction-like text, or was made from some
    agent: str = DEFAULT_AGENT  # the agent whose session made it (protocol/agents.py)


class ObservationDetail(ObservationRow, frozen=True, kw_only=True):
    """An observation with the raw tool data it was made from (kept once, in the journal)."""

    session_db_id: int
    event_id: int
    tool_input: Any = None
    tool_response: Any = None


class SummaryRow(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    claude_session_id: str
    project: str
    prompt_number: int
    request: str
    investigated: str
    learned: str
    completed: str
    next_steps: str
    notes: str
    compressed: bool
    compressor: str
    model: str | None
    input_tokens: int
    output_tokens: int
    created_at: float
    origin: str = ""  # "" this machine's own; else "user@machine" (origin_label)
    provenance: str = Provenance.TOOL.value  # a Provenance value: where its text came from
    flagged: bool = False  # it holds (quoted) instruction-like text, or was made from some
    agent: str = DEFAULT_AGENT  # the agent whose session made it (protocol/agents.py)


class SummaryInputs(msgspec.Struct, frozen=True):
    """What a summary is made from: the session's prompts and observations so far."""

    prompts: list[str]
    observations: list[ObservationRow]


class JournalCounts(msgspec.Struct, frozen=True):
    pending: int
    parked: int
    done: int
    # Sessions whose events are parked (failed, waiting for `sessionmem replay`), the first few: after
    # a restart the database is the only place that still knows them.
    parked_sessions: list[str] = []


# -- the read half: documents, search, timeline -------------------------------------------

# What is searchable, each kind from its own table; a search result or a vector is
# labelled by its kind and its row id there.
OBSERVATION, SUMMARY, PROMPT = "observation", "summary", "prompt"
DOCUMENT_KINDS = (OBSERVATION, SUMMARY, PROMPT)


class Document(msgspec.Struct, frozen=True):
    """One searchable row as the text its vector is made from."""

    kind: str
    row_id: int
    text: str


class SearchFilters(msgspec.Struct, frozen=True, kw_only=True):
    """What narrows a search; ``None`` or empty means no restriction.

    ``kinds`` is the kinds of document wanted; ``types`` narrows observations to
    those types, ``file`` and ``concept`` narrow them to those touching a file (a path,
    or its end: ``src/app.py`` matches ``/home/me/proj/src/app.py``) or naming a
    concept. Any filter that only observations have leaves only observations.
    ``origin`` keeps the rows of one origin (:data:`LOCAL_ORIGIN`: this machine's own);
    ``agent`` those whose session an agent recorded (``sessionmem.protocol.agents``).
    """

    project: str | None = None
    kinds: tuple[str, ...] = DOCUMENT_KINDS
    types: tuple[str, ...] = ()
    since: float | None = None  # created at or after (Unix seconds)
    until: float | None = None  # created before
    file: str | None = None
    concept: str | None = None
    claude_session_id: str | None = None
    # LOCAL_ORIGIN (this machine's own rows), "user@machine", or a machine or user name
    origin: str | None = None
    flagged: bool = False  # only memories holding (quoted) instruction-like text (this machine's memory)
    agent: str | None = None  # only memories of sessions that agent recorded (protocol/agents.py AGENTS)

    def wanted_kinds(self) -> tuple[str, ...]:
        if self.types or self.file or self.concept:
            return tuple(kind for kind in self.kinds if kind == OBSERVATION)
        return self.kinds


class RankedKey(msgspec.Struct, frozen=True, array_like=True):
    """A document found by one retriever, with that retriever's score (higher is better)."""

    kind: str
    row_id: int
    score: float


class DocumentCard(msgspec.Struct, frozen=True, kw_only=True):
    """What a search result or a timeline entry shows of a document: enough to choose, not all of it."""

    kind: str
    id: int
    claude_session_id: str
    project: str
    prompt_number: int
    created_at: float
    type: str  # the observation's type; "summary" or "prompt" for the others
    title: str
    text: str  # the body a snippet is cut from (narrative and facts; a summary's fields; the prompt)
    files: list[str]  # files read or modified (observations)
    origin: str = ""  # "" this machine's own; else "user@machine" (origin_label)
    provenance: str = Provenance.TOOL.value  # a Provenance value (a prompt's: "prompt", "team" or "import")
    flagged: bool = False  # it holds (quoted) instruction-like text, or was made from some
    agent: str = DEFAULT_AGENT  # the agent whose session made it (protocol/agents.py)


class FileMemory(msgspec.Struct, frozen=True, kw_only=True):
    """A past observation touching a file (file-aware recall)."""

    id: int
    claude_session_id: str
    created_at: float
    type: str
    title: str
    subtitle: str
    facts: list[str]
    modified: bool  # the file was modified (not only read)
    origin: str = ""  # "" this machine's own; else "user@machine"
    provenance: str = Provenance.TOOL.value  # a Provenance value
    flagged: bool = False  # it holds (quoted) instruction-like text, or was made from some
    agent: str = DEFAULT_AGENT  # the agent whose session made it (protocol/agents.py)


class SessionSoFar(msgspec.Struct, frozen=True):
    """One session's own work so far, as stored: what a compacted session is handed back first."""

    cwd: str
    request: str  # its first prompt, as typed
    latest_request: str  # its newest prompt, as typed
    summary: SummaryRow | None  # its newest (the checkpoint its PreCompact stored, when there is one)
    observations: list[ObservationRow]  # its newest, newest first


class ContextStart(msgspec.Struct, frozen=True):
    """What a SessionStart context plan starts from, read together (one read, one snapshot)."""

    summaries: list[SummaryRow]  # the project's newest first
    recent: list[int]  # ids of the project's newest observations, newest first
    latest_prompt: tuple[int, str] | None  # (row id, text) of its newest prompt, when asked for
    own: SessionSoFar | None = None  # the session's own work so far, when asked for (after a compaction)


class ContextRows(msgspec.Struct, frozen=True):
    """The observations a context plan chose, in its order, and the sessions they belong to."""

    observations: list[ObservationRow]
    sessions: list[SessionHead]
