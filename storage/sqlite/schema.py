"""SQLite schema and its migrations, keyed on ``PRAGMA user_version``.

Each entry of :data:`MIGRATIONS` moves the database from version ``i`` to ``i + 1``
and runs in one transaction with the version bump, so a crash mid-migration leaves
the previous version intact. Never edit a released migration: append a new one.
"""

from __future__ import annotations

from collections.abc import Callable

import apsw

from sessionmem.protocol.instructions import instruction_like
from sessionmem.storage.sqlite.values import all_rows, integer, one_row, text

_V1 = """
CREATE TABLE sessions (
    id                INTEGER PRIMARY KEY,
    claude_session_id TEXT NOT NULL UNIQUE,
    project           TEXT NOT NULL,
    cwd               TEXT,
    first_prompt      TEXT,
    prompt_counter    INTEGER NOT NULL DEFAULT 0,
    status            TEXT NOT NULL DEFAULT 'initialized'
                      CHECK (status IN ('initialized', 'active', 'completed', 'failed')),
    failure           TEXT,
    input_tokens      INTEGER NOT NULL DEFAULT 0,
    output_tokens     INTEGER NOT NULL DEFAULT 0,
    created_at        REAL NOT NULL,
    updated_at        REAL NOT NULL,
    completed_at      REAL
);
CREATE INDEX sessions_project ON sessions (project, updated_at);

CREATE TABLE user_prompts (
    id            INTEGER PRIMARY KEY,
    session_id    INTEGER NOT NULL REFERENCES sessions (id),
    prompt_number INTEGER NOT NULL,
    text          TEXT NOT NULL,
    created_at    REAL NOT NULL,
    UNIQUE (session_id, prompt_number)
);

CREATE TABLE observations (
    id             INTEGER PRIMARY KEY,
    session_id     INTEGER NOT NULL REFERENCES sessions (id),
    project        TEXT NOT NULL,
    prompt_number  INTEGER NOT NULL,
    -- the journal row holding the raw tool input and response (stored once, there)
    event_id       INTEGER NOT NULL,
    tool_name      TEXT NOT NULL,
    tool_use_id    TEXT NOT NULL,
    agent_id       TEXT,
    agent_type     TEXT,
    failed         INTEGER NOT NULL DEFAULT 0,
    type           TEXT NOT NULL,
    title          TEXT NOT NULL,
    subtitle       TEXT NOT NULL DEFAULT '',
    facts          TEXT NOT NULL DEFAULT '[]',
    narrative      TEXT NOT NULL DEFAULT '',
    concepts       TEXT NOT NULL DEFAULT '[]',
    files_read     TEXT NOT NULL DEFAULT '[]',
    files_modified TEXT NOT NULL DEFAULT '[]',
    compressed     INTEGER NOT NULL,
    compressor     TEXT NOT NULL,
    model          TEXT,
    input_tokens   INTEGER NOT NULL DEFAULT 0,
    output_tokens  INTEGER NOT NULL DEFAULT 0,
    created_at     REAL NOT NULL,
    -- a replayed event must not produce a second row
    UNIQUE (session_id, tool_use_id)
);
CREATE INDEX observations_project ON observations (project, id);

CREATE TABLE session_summaries (
    id            INTEGER PRIMARY KEY,
    session_id    INTEGER NOT NULL REFERENCES sessions (id),
    project       TEXT NOT NULL,
    prompt_number INTEGER NOT NULL,
    event_id      INTEGER NOT NULL UNIQUE,
    request       TEXT NOT NULL DEFAULT '',
    investigated  TEXT NOT NULL DEFAULT '',
    learned       TEXT NOT NULL DEFAULT '',
    completed     TEXT NOT NULL DEFAULT '',
    next_steps    TEXT NOT NULL DEFAULT '',
    notes         TEXT NOT NULL DEFAULT '',
    compressed    INTEGER NOT NULL,
    compressor    TEXT NOT NULL,
    model         TEXT,
    input_tokens  INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    created_at    REAL NOT NULL
);
CREATE INDEX summaries_project ON session_summaries (project, id);

-- Every accepted event, committed before the HTTP reply. `id` is arrival order.
-- The event itself (with the raw tool data) is in journal_payloads: marking an event
-- done then rewrites a small row instead of kilobytes of payload.
CREATE TABLE journal (
    id                INTEGER PRIMARY KEY,
    claude_session_id TEXT NOT NULL,
    kind              TEXT NOT NULL,
    status            TEXT NOT NULL DEFAULT 'pending'
                      CHECK (status IN ('pending', 'done', 'parked')),
    accepted_at       REAL NOT NULL,
    processed_at      REAL
);
CREATE TABLE journal_payloads (
    id      INTEGER PRIMARY KEY REFERENCES journal (id),
    payload BLOB NOT NULL
);
-- Only open (pending/parked) rows are ever looked up by status or session: a small
-- partial index keeps every insert cheap.
CREATE INDEX journal_open ON journal (status, id) WHERE status != 'done';

CREATE VIRTUAL TABLE observations_fts USING fts5 (
    title, subtitle, narrative, facts, concepts, content='observations', content_rowid='id'
);
CREATE TRIGGER observations_fts_ai AFTER INSERT ON observations BEGIN
    INSERT INTO observations_fts (rowid, title, subtitle, narrative, facts, concepts)
    VALUES (new.id, new.title, new.subtitle, new.narrative, new.facts, new.concepts);
END;
CREATE TRIGGER observations_fts_ad AFTER DELETE ON observations BEGIN
    INSERT INTO observations_fts (observations_fts, rowid, title, subtitle, narrative, facts, concepts)
    VALUES ('delete', old.id, old.title, old.subtitle, old.narrative, old.facts, old.concepts);
END;
CREATE TRIGGER observations_fts_au AFTER UPDATE ON observations BEGIN
    INSERT INTO observations_fts (observations_fts, rowid, title, subtitle, narrative, facts, concepts)
    VALUES ('delete', old.id, old.title, old.subtitle, old.narrative, old.facts, old.concepts);
    INSERT INTO observations_fts (rowid, title, subtitle, narrative, facts, concepts)
    VALUES (new.id, new.title, new.subtitle, new.narrative, new.facts, new.concepts);
END;

CREATE VIRTUAL TABLE summaries_fts USING fts5 (
    request, investigated, learned, completed, next_steps, notes,
    content='session_summaries', content_rowid='id'
);
CREATE TRIGGER summaries_fts_ai AFTER INSERT ON session_summaries BEGIN
    INSERT INTO summaries_fts (rowid, request, investigated, learned, completed, next_steps, notes)
    VALUES (new.id, new.request, new.investigated, new.learned, new.completed, new.next_steps, new.notes);
END;
CREATE TRIGGER summaries_fts_ad AFTER DELETE ON session_summaries BEGIN
    INSERT INTO summaries_fts (summaries_fts, rowid, request, investigated, learned, completed, next_steps, notes)
    VALUES ('delete', old.id, old.request, old.investigated, old.learned, old.completed, old.next_steps, old.notes);
END;
CREATE TRIGGER summaries_fts_au AFTER UPDATE ON session_summaries BEGIN
    INSERT INTO summaries_fts (summaries_fts, rowid, request, investigated, learned, completed, next_steps, notes)
    VALUES ('delete', old.id, old.request, old.investigated, old.learned, old.completed, old.next_steps, old.notes);
    INSERT INTO summaries_fts (rowid, request, investigated, learned, completed, next_steps, notes)
    VALUES (new.id, new.request, new.investigated, new.learned, new.completed, new.next_steps, new.notes);
END;

CREATE VIRTUAL TABLE prompts_fts USING fts5 (text, content='user_prompts', content_rowid='id');
CREATE TRIGGER prompts_fts_ai AFTER INSERT ON user_prompts BEGIN
    INSERT INTO prompts_fts (rowid, text) VALUES (new.id, new.text);
END;
CREATE TRIGGER prompts_fts_ad AFTER DELETE ON user_prompts BEGIN
    INSERT INTO prompts_fts (prompts_fts, rowid, text) VALUES ('delete', old.id, old.text);
END;
CREATE TRIGGER prompts_fts_au AFTER UPDATE ON user_prompts BEGIN
    INSERT INTO prompts_fts (prompts_fts, rowid, text) VALUES ('delete', old.id, old.text);
    INSERT INTO prompts_fts (rowid, text) VALUES (new.id, new.text);
END;
"""

# Idempotency keys: a client (backfill, a retrying hook) may name an event; the same
# key is journaled once and later copies are answered as duplicates.
_V2 = """
ALTER TABLE journal ADD COLUMN idempotency_key TEXT;
CREATE UNIQUE INDEX journal_idempotency ON journal (idempotency_key) WHERE idempotency_key IS NOT NULL;
"""

# One name for one thing: the integer key of a session row is `session_db_id`
# everywhere (`claude_session_id` is Claude Code's string id).
_V3 = """
ALTER TABLE user_prompts RENAME COLUMN session_id TO session_db_id;
ALTER TABLE observations RENAME COLUMN session_id TO session_db_id;
ALTER TABLE session_summaries RENAME COLUMN session_id TO session_db_id;
"""

# The read half.
# - observation_files: which files each observation read or modified, one row each,
#   kept by a trigger, so file filters and file-aware recall are index lookups. A
#   path is found whole or by its end (``src/app.py``): ``basename`` narrows that.
# - The full-text tables again, with Porter stemming (``fixing`` finds ``fixed``), and
#   rebuilt from their content tables.
# - created_at indexes for the timeline.
_V4 = """
CREATE TABLE observation_files (
    observation_id INTEGER NOT NULL REFERENCES observations (id) ON DELETE CASCADE,
    path           TEXT NOT NULL,
    basename       TEXT NOT NULL,
    modified       INTEGER NOT NULL,
    PRIMARY KEY (observation_id, path, modified)
) WITHOUT ROWID;
CREATE INDEX observation_files_path ON observation_files (path, observation_id);
CREATE INDEX observation_files_basename ON observation_files (basename, observation_id);
CREATE TRIGGER observation_files_ai AFTER INSERT ON observations BEGIN
    INSERT OR IGNORE INTO observation_files (observation_id, path, basename, modified)
    SELECT new.id, value, replace(value, rtrim(value, replace(value, '/', '')), ''), 0
    FROM json_each(new.files_read) WHERE value != '';
    INSERT OR IGNORE INTO observation_files (observation_id, path, basename, modified)
    SELECT new.id, value, replace(value, rtrim(value, replace(value, '/', '')), ''), 1
    FROM json_each(new.files_modified) WHERE value != '';
END;
INSERT OR IGNORE INTO observation_files (observation_id, path, basename, modified)
SELECT o.id, j.value, replace(j.value, rtrim(j.value, replace(j.value, '/', '')), ''), 0
FROM observations o, json_each(o.files_read) j WHERE j.value != '';
INSERT OR IGNORE INTO observation_files (observation_id, path, basename, modified)
SELECT o.id, j.value, replace(j.value, rtrim(j.value, replace(j.value, '/', '')), ''), 1
FROM observations o, json_each(o.files_modified) j WHERE j.value != '';

CREATE INDEX observations_created ON observations (project, created_at);
CREATE INDEX summaries_created ON session_summaries (project, created_at);
CREATE INDEX prompts_created ON user_prompts (created_at);

DROP TABLE observations_fts;
CREATE VIRTUAL TABLE observations_fts USING fts5 (
    title, subtitle, narrative, facts, concepts, content='observations', content_rowid='id',
    tokenize='porter unicode61 remove_diacritics 2'
);
INSERT INTO observations_fts (observations_fts) VALUES ('rebuild');
DROP TABLE summaries_fts;
CREATE VIRTUAL TABLE summaries_fts USING fts5 (
    request, investigated, learned, completed, next_steps, notes,
    content='session_summaries', content_rowid='id', tokenize='porter unicode61 remove_diacritics 2'
);
INSERT INTO summaries_fts (summaries_fts) VALUES ('rebuild');
DROP TABLE prompts_fts;
CREATE VIRTUAL TABLE prompts_fts USING fts5 (
    text, content='user_prompts', content_rowid='id', tokenize='porter unicode61 remove_diacritics 2'
);
INSERT INTO prompts_fts (prompts_fts) VALUES ('rebuild');
"""

# Times of their own: ``created_at`` is when a prompt, observation or summary happened
# (for backfill, the transcript's time), ``stored_at`` when this database stored it
# (what the LLM token budget counts). Indexes for newest-first lists of all projects.
_V5 = """
ALTER TABLE observations ADD COLUMN stored_at REAL;
UPDATE observations SET stored_at = created_at;
ALTER TABLE session_summaries ADD COLUMN stored_at REAL;
UPDATE session_summaries SET stored_at = created_at;
CREATE INDEX observations_stored ON observations (stored_at);
CREATE INDEX summaries_stored ON session_summaries (stored_at);
CREATE INDEX observations_time ON observations (created_at);
CREATE INDEX summaries_time ON session_summaries (created_at);
"""

# A prompt's project beside it, as observations and summaries have theirs: the newest
# prompts of a project were found by walking every project's prompts newest first until
# enough were of it -- cheap for the busiest project, every prompt of the store for a
# new one (0.9 ms at 7,700 prompts, on every SessionStart). Its full-text rows follow
# the text alone, so filling the column does not index every prompt again.
_V6 = """
ALTER TABLE user_prompts ADD COLUMN project TEXT NOT NULL DEFAULT '';
DROP TRIGGER prompts_fts_au;
CREATE TRIGGER prompts_fts_au AFTER UPDATE OF text ON user_prompts BEGIN
    INSERT INTO prompts_fts (prompts_fts, rowid, text) VALUES ('delete', old.id, old.text);
    INSERT INTO prompts_fts (rowid, text) VALUES (new.id, new.text);
END;
UPDATE user_prompts SET project = (SELECT project FROM sessions s WHERE s.id = user_prompts.session_db_id);
CREATE INDEX prompts_project ON user_prompts (project, created_at);
"""

# Team memory (team/, docs/team.md). A session's project key is its normalized git remote
# ("github.com/owner/repo"; "" without one), the identity machines agree on; ``share_file``
# says its repository root held the opt-in file when it began. A row's origin is the
# machine and user it came from: both "" for this machine's own rows, so they follow a
# renamed machine. ``team_cursors`` holds how far pushing and pulling have got.
_V7 = """
ALTER TABLE sessions ADD COLUMN project_key TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN share_file INTEGER NOT NULL DEFAULT 0;
ALTER TABLE observations ADD COLUMN origin_machine TEXT NOT NULL DEFAULT '';
ALTER TABLE observations ADD COLUMN origin_user TEXT NOT NULL DEFAULT '';
ALTER TABLE session_summaries ADD COLUMN origin_machine TEXT NOT NULL DEFAULT '';
ALTER TABLE session_summaries ADD COLUMN origin_user TEXT NOT NULL DEFAULT '';
ALTER TABLE user_prompts ADD COLUMN origin_machine TEXT NOT NULL DEFAULT '';
ALTER TABLE user_prompts ADD COLUMN origin_user TEXT NOT NULL DEFAULT '';
CREATE TABLE team_cursors (name TEXT PRIMARY KEY, value TEXT NOT NULL);
-- A pulled row finds the local project of its key; each pull reads the keys of the repositories
-- that hold the share file (a few rows, not every session).
CREATE INDEX sessions_project_key ON sessions (project_key);
CREATE INDEX sessions_project_keys ON sessions (project, project_key);
CREATE INDEX sessions_share_file ON sessions (project_key, project) WHERE share_file = 1;
"""

# The sessions this machine changed, in the order it changed them, for the team push
# (storage/sqlite/team_rows.py): a session's row is re-pushed when its status, times, first prompt or
# project key change. Its ``updated_at`` cannot serve as the cursor: it is the time of the
# event, not of the write, and an actor may store a session's completion after another
# session's later prompt. One row a session (replaced: a new ``seq``, always the largest),
# written in the transaction that changed the session, by the one writer: a reader seeing a
# ``seq`` sees every smaller one.
_V8 = """
CREATE TABLE team_session_changes (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused, even of a replaced row
    session_db_id INTEGER NOT NULL UNIQUE
);
CREATE TRIGGER team_session_changes_ai AFTER INSERT ON sessions BEGIN
    INSERT OR REPLACE INTO team_session_changes (session_db_id) VALUES (new.id);
END;
CREATE TRIGGER team_session_changes_au AFTER UPDATE ON sessions
WHEN old.status IS NOT new.status OR old.created_at IS NOT new.created_at
  OR old.updated_at IS NOT new.updated_at OR old.completed_at IS NOT new.completed_at
  OR old.first_prompt IS NOT new.first_prompt OR old.project_key IS NOT new.project_key
BEGIN
    INSERT OR REPLACE INTO team_session_changes (session_db_id) VALUES (new.id);
END;
"""

# Provenance (docs/search.md): where each memory's text came from, beside its origin (who), and
# whether it holds instruction-like text (sessionmem/protocol/instructions.py). Rows stored before
# are given what can be known of them: another machine's rows (an origin) came from the team
# database; rows without a journal event (an observation's event id 0, a summary's negative one)
# from an import; a model wrote what an LLM compressor compressed; the rest was built by rules from
# tool output, or is the user's prompt. ``flagged`` is filled by a check of their text after this
# step (_recheck_flags): SQL cannot run the detector. The full-text rows follow the texts alone (as
# the prompts' have since version 6), so filling the columns does not index every row again.
_V9 = """
DROP TRIGGER observations_fts_au;
CREATE TRIGGER observations_fts_au AFTER UPDATE OF title, subtitle, narrative, facts, concepts ON observations BEGIN
    INSERT INTO observations_fts (observations_fts, rowid, title, subtitle, narrative, facts, concepts)
    VALUES ('delete', old.id, old.title, old.subtitle, old.narrative, old.facts, old.concepts);
    INSERT INTO observations_fts (rowid, title, subtitle, narrative, facts, concepts)
    VALUES (new.id, new.title, new.subtitle, new.narrative, new.facts, new.concepts);
END;
DROP TRIGGER summaries_fts_au;
CREATE TRIGGER summaries_fts_au AFTER UPDATE OF request, investigated, learned, completed, next_steps, notes
ON session_summaries BEGIN
    INSERT INTO summaries_fts (summaries_fts, rowid, request, investigated, learned, completed, next_steps, notes)
    VALUES ('delete', old.id, old.request, old.investigated, old.learned, old.completed, old.next_steps, old.notes);
    INSERT INTO summaries_fts (rowid, request, investigated, learned, completed, next_steps, notes)
    VALUES (new.id, new.request, new.investigated, new.learned, new.completed, new.next_steps, new.notes);
END;
ALTER TABLE observations ADD COLUMN provenance TEXT NOT NULL DEFAULT 'tool';
ALTER TABLE observations ADD COLUMN flagged INTEGER NOT NULL DEFAULT 0;
ALTER TABLE session_summaries ADD COLUMN provenance TEXT NOT NULL DEFAULT 'tool';
ALTER TABLE session_summaries ADD COLUMN flagged INTEGER NOT NULL DEFAULT 0;
ALTER TABLE user_prompts ADD COLUMN provenance TEXT NOT NULL DEFAULT 'prompt';
ALTER TABLE user_prompts ADD COLUMN flagged INTEGER NOT NULL DEFAULT 0;
UPDATE observations SET provenance = CASE
    WHEN origin_machine != '' THEN 'team' WHEN event_id <= 0 THEN 'import'
    WHEN compressed = 1 AND compressor != 'offline' THEN 'model' ELSE 'tool' END;
UPDATE session_summaries SET provenance = CASE
    WHEN origin_machine != '' THEN 'team' WHEN event_id < 0 THEN 'import'
    WHEN compressed = 1 AND compressor != 'offline' THEN 'model' ELSE 'tool' END;
UPDATE user_prompts SET provenance = 'team' WHERE origin_machine != '';
-- The viewer's filter: a project's flagged memories, newest first.
CREATE INDEX observations_flagged ON observations (project, created_at) WHERE flagged = 1;
CREATE INDEX summaries_flagged ON session_summaries (project, created_at) WHERE flagged = 1;
"""

# Consolidation (storage/sqlite/consolidation.py, docs/search.md): what the background pass learned of the
# memories, never a change of their text.
# - observation_links: a memory merged into a group of near-duplicates (``duplicate``: ``group_id``), or a
#   decision a later one about the same thing replaced (``superseded``: ``by_id``, the later one).
# - duplicate_groups: a group of near-duplicates, handed over as its ``survivor`` (the newest); ``merged``:
#   the older ones merged into it. A new near-duplicate becomes the survivor by one row's update.
# - consolidation_heads: per project and rule key, the newest observation a new one is compared with, and
#   its group if it has one, so the pass reads one row for each it consolidates.
# - memory_told, memory_used: which sessions were handed a memory, and which of them then read or
#   changed one of its files (or fetched it through MCP); observation_use counts them for the ranking.
# - consolidation_cursor: the last observation the pass consolidated; the pass resumes after it.
_V10 = """
CREATE TABLE observation_links (
    observation_id INTEGER PRIMARY KEY REFERENCES observations (id),
    kind           TEXT NOT NULL CHECK (kind IN ('duplicate', 'superseded')),
    group_id       INTEGER REFERENCES duplicate_groups (id),
    by_id          INTEGER REFERENCES observations (id),
    linked_at      REAL NOT NULL,
    CHECK ((kind = 'duplicate') = (group_id IS NOT NULL) AND (kind = 'superseded') = (by_id IS NOT NULL))
);
CREATE INDEX observation_links_by ON observation_links (by_id) WHERE by_id IS NOT NULL;
CREATE TABLE duplicate_groups (
    id       INTEGER PRIMARY KEY,
    survivor INTEGER NOT NULL REFERENCES observations (id),
    merged   INTEGER NOT NULL
);
CREATE INDEX duplicate_groups_survivor ON duplicate_groups (survivor);
CREATE TABLE consolidation_heads (
    project        TEXT NOT NULL,
    rule_key       TEXT NOT NULL,
    observation_id INTEGER NOT NULL,
    group_id       INTEGER,
    PRIMARY KEY (project, rule_key)
) WITHOUT ROWID;
CREATE TABLE memory_told (
    claude_session_id TEXT NOT NULL,
    observation_id    INTEGER NOT NULL,
    PRIMARY KEY (claude_session_id, observation_id)
) WITHOUT ROWID;
CREATE TABLE memory_used (
    claude_session_id TEXT NOT NULL,
    observation_id    INTEGER NOT NULL,
    PRIMARY KEY (claude_session_id, observation_id)
) WITHOUT ROWID;
CREATE TABLE observation_use (
    observation_id INTEGER PRIMARY KEY REFERENCES observations (id),
    told           INTEGER NOT NULL DEFAULT 0,
    used           INTEGER NOT NULL DEFAULT 0
);
-- A new decision is compared with its project's newest ones.
CREATE INDEX observations_decisions ON observations (project, id) WHERE type = 'decision';
CREATE TABLE consolidation_cursor (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
"""

# The agent whose hooks recorded each session (sessionmem/protocol/agents.py): every session before was
# Claude Code's. A memory's agent is its session's, read through the join every read of a row makes
# already; a filter by agent checks the row's session (docs/search.md, "Agents").
_V11 = """
ALTER TABLE sessions ADD COLUMN agent TEXT NOT NULL DEFAULT 'claude-code';
"""

# The team pull starts over: pulls before ordered the team database's rows by the text of their
# transaction ids, so a pull across an id that gained a digit (999 to 1000) moved its cursor past rows it
# never read (storage/pg/transfer.py). Pulling again from the start fetches them; what is here already
# is recognised and left as it is (an import is idempotent).
_V12 = """
DELETE FROM team_cursors WHERE name = 'pull';
"""

MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9, _V10, _V11, _V12)


class SchemaTooNew(RuntimeError):
    """The database was written by a newer sessionmem (a downgrade): nothing is changed."""


def migrate(connection: apsw.Connection) -> int:
    """Bring the database up to the newest schema; returns the resulting version.

    Error handling:
        A database newer than this code (a downgrade) raises :class:`SchemaTooNew`
        rather than guessing; any SQL error rolls back the step that raised it.
    """
    version = integer(one_row(connection, "PRAGMA user_version")[0])
    if version > len(MIGRATIONS):
        raise SchemaTooNew(f"database schema version {version} is newer than this sessionmem ({len(MIGRATIONS)})")
    if version and "payload" in _columns(connection, "journal"):
        with connection:
            _move_payloads_out(connection)
    for target in range(version + 1, len(MIGRATIONS) + 1):
        with connection:
            connection.execute(MIGRATIONS[target - 1])
            if (follow_up := _FOLLOW_UPS.get(target)) is not None:
                follow_up(connection)
            connection.execute(f"PRAGMA user_version = {target}")
    return len(MIGRATIONS)


def _recheck_flags(connection: apsw.Connection) -> None:
    """Version 9's second half: the memories stored before flagged when their text is instruction-like.

    A poisoned memory written before the upgrade is marked as one written after would be. Run in
    the migration's transaction, once; the detector reads at most a few kilobytes of each row
    (``instructions.MAX_SCAN``), so a store of 100,000 rows takes seconds, once.
    """
    connection.create_scalar_function("sessionmem_instruction_like", _instruction_like_sql, 1, deterministic=True)
    try:
        connection.execute(
            "UPDATE observations SET flagged = 1 WHERE sessionmem_instruction_like("
            "title || char(10) || subtitle || char(10) || narrative || char(10) || facts || char(10) || concepts)")
        connection.execute(
            "UPDATE session_summaries SET flagged = 1 WHERE sessionmem_instruction_like(request || char(10)"
            " || investigated || char(10) || learned || char(10) || completed || char(10) || next_steps"
            " || char(10) || notes)")
        connection.execute("UPDATE user_prompts SET flagged = 1 WHERE origin_machine != ''"
                           " AND sessionmem_instruction_like(text)")
    finally:
        connection.create_scalar_function("sessionmem_instruction_like", None, 1)


def _instruction_like_sql(*values: apsw.SQLiteValue) -> int:
    return int(isinstance(values[0], str) and instruction_like(values[0]))


# Python run after a version's SQL, in its transaction.
_FOLLOW_UPS: dict[int, Callable[[apsw.Connection], None]] = {9: _recheck_flags}


def _columns(connection: apsw.Connection, table: str) -> set[str]:
    return {text(name) for (name,) in all_rows(connection, "SELECT name FROM pragma_table_info(?)", (table,))}


def _move_payloads_out(connection: apsw.Connection) -> None:
    """A database of the first releases (e94329e, fa128a4): bring it to the layout version 1 has had since.

    7768d28 moved the journal's payloads into ``journal_payloads`` and the observations'
    raw tool data out of them by rewriting version 1 in place, not by a step of its own.
    So a database of before still says version 1 or 2, yet has ``journal.payload`` (NOT
    NULL: every insert of today failed) and no ``journal_payloads`` (the start failed).
    The payloads move; the observations' copies of the raw tool data go (the journal's
    payload holds the same, and retention prunes it there).
    """
    connection.execute("CREATE TABLE IF NOT EXISTS journal_payloads ("
                       " id INTEGER PRIMARY KEY REFERENCES journal (id), payload BLOB NOT NULL)")
    connection.execute("INSERT OR IGNORE INTO journal_payloads (id, payload) SELECT id, payload FROM journal")
    connection.execute("ALTER TABLE journal DROP COLUMN payload")
    for column in ("tool_input", "tool_response"):
        if column in _columns(connection, "observations"):
            connection.execute(f"ALTER TABLE observations DROP COLUMN {column}")
