"""The team database's schema (PostgreSQL with pgvector) and its migrations, kept in ``schema_version``.

Each entry of :data:`MIGRATIONS` moves the database from version ``i`` to ``i + 1`` in one
transaction with the version bump, under a transaction-scoped advisory lock: workers of
several machines starting together on an empty database migrate it once, the others
wait and then find it done. Never edit a released migration: append a new one. A
database of a newer version than this code is refused (:class:`TeamSchemaTooNew`),
never changed.

Tables: ``sessions``, ``prompts``, ``observations``, ``summaries``, one row per record of
the export format (:mod:`sessionmem.storage.export_records`) and keyed by its identity rules
between machines: a session by its Claude session id; a prompt by (session, number); an
observation by (session, tool use id); a summary by (session, prompt number, created
at). No foreign keys: a row may arrive before its session's. Every row carries its
project's identity between machines (``project_key``, :func:`~sessionmem.storage.team_records.shared_key`)
and display name (``project``), its origin (``origin_machine_id``, ``origin_machine``,
``origin_user``), and the pull order: ``xid`` (the writing transaction,
``pg_current_xact_id()``) and ``seq`` (one sequence, ``row_seq``, for every table).
Sessions also keep ``changed_by``, the machine that last changed them (a merge), so
that the machine whose own session another changed is told. Observations and summaries
carry the embedder's ``vector`` (384 dimensions, NULL until a vector is pushed) and its
``model``; the compressor's model is ``compressor_model``. A session's working
directory, a path of one machine, is not a column: it never leaves the machine.

Indexes on ``created_at`` (alone, and after the project's name or key) serve the newest
rows first: lists, and full-text search's newest candidates (:mod:`sessionmem.storage.pg.search`).

Version 2 adds search: a generated, stored ``search`` tsvector per searchable table over
the fields SQLite's FTS5 tables index (:mod:`sessionmem.storage.sqlite.schema`), weighted as
their bm25 weights rank them (titles and requests first), with a GIN index; and an
HNSW index (cosine) on each ``vector`` column.

Version 3 adds CHECK constraints, the rules of an import (:mod:`~sessionmem.storage.record_rules`)
in the database: finite times from 1970 to the year 3000, lists that are JSON arrays of
strings, texts within their caps. They are ``NOT VALID``: rows written before stay (the
pull passes over those that break the rules), new and changed rows are checked.

Version 4 adds ``sessions.agent``, the coding agent whose hooks recorded the session
(``claude-code`` for every session before). A session keeps the agent it was first pushed
with; a pull decodes it as an import does, so a name sessionmem does not serve is refused.
"""

from __future__ import annotations

import psycopg

from sessionmem.protocol.limits import MAX_PATH, MAX_SESSION_ID
from sessionmem.storage.record_rules import MAX_ITEMS, MAX_TEXT_CHARS, MAX_TITLE_CHARS, MOMENT_MAX

# The columns every shared row ends with: its project, its origin, and the pull order.
_ROW_TAIL = """
    project_key       text NOT NULL,
    project           text NOT NULL,
    origin_machine_id text NOT NULL,
    origin_machine    text NOT NULL,
    origin_user       text NOT NULL,"""
_PULL_ORDER = """
    xid               xid8 NOT NULL DEFAULT pg_current_xact_id(),
    seq               bigint NOT NULL DEFAULT nextval('row_seq')"""
_VECTOR = """
    vector            vector(384),
    model             text NOT NULL DEFAULT '',"""


def _row_indexes(table: str) -> str:
    """A table's pull order, and its newest rows first: of a project (by key, by name), of all."""
    return (f"CREATE INDEX {table}_pull ON {table} (xid, seq);\n"
            f"CREATE INDEX {table}_project ON {table} (project_key, created_at);\n"
            f"CREATE INDEX {table}_project_name ON {table} (project, created_at);\n"
            f"CREATE INDEX {table}_time ON {table} (created_at);\n")


_V1 = f"""
CREATE EXTENSION IF NOT EXISTS vector;
CREATE SEQUENCE row_seq;

CREATE TABLE sessions (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    claude_session_id text NOT NULL UNIQUE,
    project_key       text NOT NULL,
    project           text NOT NULL,
    first_prompt      text,
    status            text NOT NULL CHECK (status IN ('initialized', 'active', 'completed', 'failed')),
    created_at        double precision NOT NULL,
    updated_at        double precision NOT NULL,
    completed_at      double precision,
    origin_machine_id text NOT NULL,
    origin_machine    text NOT NULL,
    origin_user       text NOT NULL,
    changed_by        text NOT NULL,{_PULL_ORDER}
);
CREATE INDEX sessions_pull ON sessions (xid, seq);
CREATE INDEX sessions_project ON sessions (project_key, updated_at);

CREATE TABLE prompts (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    claude_session_id text NOT NULL,
    prompt_number     integer NOT NULL,
    text              text NOT NULL,
    created_at        double precision NOT NULL,{_ROW_TAIL}{_PULL_ORDER},
    UNIQUE (claude_session_id, prompt_number)
);
{_row_indexes("prompts")}
CREATE TABLE observations (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    claude_session_id text NOT NULL,
    prompt_number     integer NOT NULL,
    tool_name         text NOT NULL,
    tool_use_id       text NOT NULL,
    agent_id          text,
    agent_type        text,
    failed            boolean NOT NULL,
    type              text NOT NULL,
    title             text NOT NULL,
    subtitle          text NOT NULL,
    facts             jsonb NOT NULL,
    narrative         text NOT NULL,
    concepts          jsonb NOT NULL,
    files_read        jsonb NOT NULL,
    files_modified    jsonb NOT NULL,
    compressed        boolean NOT NULL,
    compressor        text NOT NULL,
    compressor_model  text,
    created_at        double precision NOT NULL,{_ROW_TAIL}{_VECTOR}{_PULL_ORDER},
    UNIQUE (claude_session_id, tool_use_id)
);
{_row_indexes("observations")}
CREATE TABLE summaries (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    claude_session_id text NOT NULL,
    prompt_number     integer NOT NULL,
    created_at        double precision NOT NULL,
    request           text NOT NULL,
    investigated      text NOT NULL,
    learned           text NOT NULL,
    completed         text NOT NULL,
    next_steps        text NOT NULL,
    notes             text NOT NULL,
    compressed        boolean NOT NULL,
    compressor        text NOT NULL,
    compressor_model  text,{_ROW_TAIL}{_VECTOR}{_PULL_ORDER},
    UNIQUE (claude_session_id, prompt_number, created_at)
);
{_row_indexes("summaries")}"""

# Search. The weights follow the bm25 column weights of SQLite's full-text tables
# (storage/sqlite/fulltext.py TABLES): A > B > C > D. ``to_tsvector`` of a jsonb array indexes
# its strings (facts, concepts), as FTS5 indexed their JSON text. 'english': stems as
# FTS5's porter tokenizer does, and drops English stopwords.
_V2 = """
ALTER TABLE observations ADD COLUMN search tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('english', title), 'A')
    || setweight(to_tsvector('english', subtitle), 'B')
    || setweight(to_tsvector('english', narrative), 'C')
    || setweight(to_tsvector('english', facts), 'C')
    || setweight(to_tsvector('english', concepts), 'D')
) STORED;
ALTER TABLE summaries ADD COLUMN search tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('english', request), 'A')
    || setweight(to_tsvector('english', learned), 'B')
    || setweight(to_tsvector('english', completed), 'B')
    || setweight(to_tsvector('english', investigated), 'C')
    || setweight(to_tsvector('english', next_steps), 'C')
    || setweight(to_tsvector('english', notes), 'D')
) STORED;
ALTER TABLE prompts ADD COLUMN search tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED;
CREATE INDEX observations_search ON observations USING gin (search);
CREATE INDEX summaries_search ON summaries USING gin (search);
CREATE INDEX prompts_search ON prompts USING gin (search);
CREATE INDEX observations_vector ON observations USING hnsw (vector vector_cosine_ops);
CREATE INDEX summaries_vector ON summaries USING hnsw (vector vector_cosine_ops);
"""



def _moment(column: str) -> str:
    """A time of a record: finite, 1970 to the year 3000 (NaN is greater than every number in PostgreSQL)."""
    return f"{column} >= 0 AND {column} <= {MOMENT_MAX!r}"


def _length(column: str, cap: int) -> str:
    return f"char_length({column}) <= {cap}"


def _texts(column: str) -> str:
    """A list of a record: a JSON array of at most MAX_ITEMS strings (jsonb_array_length only of an array)."""
    return (f"CASE WHEN jsonb_typeof({column}) = 'array' THEN jsonb_array_length({column}) <= {MAX_ITEMS}"
            f" AND NOT jsonb_path_exists({column}, '$[*] ? (@.type() != \"string\")') ELSE false END")


# What an import takes (storage/record_rules.py), said by the database itself: a row written
# straight into it that breaks these is refused there. NOT VALID: a database already holding
# such rows still migrates (their pullers pass them over), and no table is scanned under lock.
_CHECKS: dict[str, dict[str, str]] = {
    "sessions": {
        "times": f"{_moment('created_at')} AND {_moment('updated_at')}"
                 f" AND (completed_at IS NULL OR ({_moment('completed_at')}))",
        "lengths": f"{_length('claude_session_id', MAX_SESSION_ID)} AND {_length('project', MAX_PATH)}"
                   f" AND {_length('project_key', MAX_PATH)} AND (first_prompt IS NULL"
                   f" OR {_length('first_prompt', MAX_TEXT_CHARS)})",
    },
    "prompts": {
        "times": _moment("created_at"),
        "lengths": f"{_length('claude_session_id', MAX_SESSION_ID)} AND {_length('project_key', MAX_PATH)}"
                   f" AND {_length('text', MAX_TEXT_CHARS)} AND prompt_number >= 0",
    },
    "observations": {
        "times": _moment("created_at"),
        "lists": " AND ".join(_texts(column) for column in ("facts", "concepts", "files_read", "files_modified")),
        "lengths": f"{_length('claude_session_id', MAX_SESSION_ID)} AND {_length('project', MAX_PATH)}"
                   f" AND {_length('project_key', MAX_PATH)} AND {_length('title', MAX_TITLE_CHARS)}"
                   f" AND {_length('subtitle', MAX_TITLE_CHARS)} AND {_length('narrative', MAX_TEXT_CHARS)}"
                   " AND prompt_number >= 0",
    },
    "summaries": {
        "times": _moment("created_at"),
        "lengths": " AND ".join([
            _length("claude_session_id", MAX_SESSION_ID), _length("project", MAX_PATH), _length("project_key", MAX_PATH),
            *(_length(column, MAX_TEXT_CHARS)
              for column in ("request", "investigated", "learned", "completed", "next_steps", "notes")),
            "prompt_number >= 0"]),
    },
}
_V3 = "".join(f"ALTER TABLE {table} ADD CONSTRAINT {table}_{name} CHECK ({check}) NOT VALID;\n"
              for table, checks in _CHECKS.items() for name, check in checks.items())

# The coding agent whose hooks recorded a session (sessionmem/protocol/agents.py): every session before was
# Claude Code's. A constant default: PostgreSQL adds the column without rewriting the table.
_V4 = """
ALTER TABLE sessions ADD COLUMN agent text NOT NULL DEFAULT 'claude-code';
"""

MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3, _V4)
LATEST = len(MIGRATIONS)
VECTOR_DIMENSIONS = 384  # vector(384): the default embedder's (all-MiniLM-L6-v2)
# The advisory lock the migrations take (any constant of our own: "sessionmem" in ASCII, cut to 63 bits).
_MIGRATION_LOCK = 0x73657373696F6E6D & 0x7FFF_FFFF_FFFF_FFFF


class TeamSchemaTooNew(RuntimeError):
    """The team database was migrated by a newer sessionmem: this one leaves it as it is."""


def schema_version(connection: psycopg.Connection[tuple[object, ...]]) -> int:
    """The database's schema version; 0 for a database this code never migrated."""
    row = connection.execute("SELECT to_regclass('schema_version') IS NOT NULL").fetchone()
    if row is None or not row[0]:
        return 0
    version = connection.execute("SELECT max(version) FROM schema_version").fetchone()
    return int(str(version[0])) if version is not None and version[0] is not None else 0


def migrate(connection: psycopg.Connection[tuple[object, ...]], *, to: int = LATEST) -> int:
    """Bring the database up to version ``to`` (the newest by default); returns the version it has.

    ``connection`` is in autocommit mode; each step is a transaction of its own.

    Error handling:
        A database newer than this code raises :class:`TeamSchemaTooNew` and is left as it
        is; an SQL error rolls back the step that raised it (earlier steps stay done).
    """
    if not 0 <= to <= LATEST:
        raise ValueError(f"no schema version {to}")
    version = 0
    for target in range(1, LATEST + 1):
        with connection.transaction():
            connection.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            connection.execute("CREATE TABLE IF NOT EXISTS schema_version (version integer NOT NULL)")
            version = schema_version(connection)
            if version > LATEST:
                raise TeamSchemaTooNew(f"the team database has schema version {version}, newer than this "
                                       f"sessionmem's ({LATEST}): upgrade sessionmem")
            if version >= target or target > to:
                continue
            connection.execute(MIGRATIONS[target - 1])
            connection.execute("DELETE FROM schema_version")
            connection.execute("INSERT INTO schema_version (version) VALUES (%s)", (target,))
            version = target
    return version
