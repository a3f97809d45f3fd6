"""Nothing private, nothing secret and no local path reaches the team database, nor comes back from it.

A real worker shares a project with a real PostgreSQL. It is given a session whose prompts,
tool inputs and outputs and final message hold ``<private>`` spans (in several spellings) and
secrets of many kinds, and which ran in a local directory; the offline compressor makes its
observations and summary, and the sync task pushes them. Then every column of every table in
the team database is read back as text, and none of those strings is in it. What the session
did (its words without the secrets) is there: the dump does see the rows. The same holds for
a worker with ``redact_secrets=false``: it keeps its secrets on its own disk, and pushes none.

The other way: rows written straight into the team database, holding secrets and private
spans, are pulled by a worker with ``redact_secrets=false``, and none of it reaches its disk.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import psycopg
import pytest
from pgvector.psycopg import register_vector
from psycopg import sql

from sessionmem.protocol import routes
from sessionmem.storage.export_records import ObservationRecord, PromptRecord, SessionRecord, SummaryRecord
from sessionmem.storage.pg import schema as pg_schema
from sessionmem.storage.pg.transfer import push_rows
from sessionmem.storage.team_records import NAME_KEY_PREFIX, Origin, SharedRow
from sessionmem.testing.worker_process import WorkerProcess, start_worker

from .conftest import data_dir_contains
from .test_redaction import KEPT_RUN_IN_STORE, TOKENS, kept_runs

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("team")]

SYNC_WAIT_S = 60.0
AWS = "AKIAIOSFODNN7EXAMPLE"
ANTHROPIC = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789-ABCDEFGH"
GITHUB = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
PEM_BODY = "ZmFrZSBrZXkgbWF0ZXJpYWw"
PEM = f"-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAzQ8\n{PEM_BODY}=\n-----END RSA PRIVATE KEY-----"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
SLACK = "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"

# (where it is written, the secret that must not survive): one of each kind the ingest edge knows.
SECRETS = {
    "aws": (f"export AWS_ACCESS_KEY_ID={AWS}", AWS),
    "anthropic": (f"ANTHROPIC_API_KEY={ANTHROPIC}", ANTHROPIC),
    "github": (f"git remote set-url origin https://x:{GITHUB}@github.com/o/r", GITHUB),
    "pem": (f"key:\n{PEM}\nafter", PEM_BODY),
    "password=": ("password=hunter2x and more", "hunter2x"),
    "json": ('config = {"db_password": "correct horse battery"}', "correct horse"),
    "bearer": ("curl -H 'Authorization: Bearer abcdef0123456789abcdef' https://api.example.com",
               "abcdef0123456789abcdef"),
    "url": ("postgresql://admin:S3cr3tPass@db.example.com:5432/app", "S3cr3tPass"),
    "slack": (SLACK, "AbCdEfGhIjKl"),
    "jwt": (f"Authorization: {JWT}", "dozjgNryP4J3jVmNHl0w5N"),
    "mysql": ("mysql -u root -pS3cretPw shop", "S3cretPw"),
    "curl -u": ("curl -sS -u deploy:S3cretDeployPw https://ci.example.com/api", "S3cretDeployPw"),
    "netrc": ("machine api.example.com login bob password hunter22z", "hunter22z"),
    "docker": ("docker login -u me -p Dk3rPassw0rd registry.example.com", "Dk3rPassw0rd"),
    "stripe": ("STRIPE_KEY=sk_live_51HabcdefghijklmnopqrstuvWXyz", "sk_live_51Habcdefghij"),
    "env file": ("DB_PASSWORD=correcthorse42\nDEBUG=1", "correcthorse42"),
}
# <private> spans, in the spellings people type; their contents must vanish.
PRIVATE = {
    "plain": ("<private>my bank PIN is PRIV-ALPHA-4411</private>", "PRIV-ALPHA-4411"),
    "upper": ('<PRIVATE reason="x">PRIV-BETA-9902</PRIVATE>', "PRIV-BETA-9902"),
    "spaced": ("< private >PRIV-GAMMA-1234</ private>", "PRIV-GAMMA-1234"),
    "square": ("[private]PRIV-DELTA-5678[/private]", "PRIV-DELTA-5678"),
    "unclosed": ("the rest is mine <private>PRIV-EPSILON-3141 never closed", "PRIV-EPSILON-3141"),
}


def text_of(*kinds: str, private: tuple[str, ...] = ()) -> str:
    return "\n".join([SECRETS[kind][0] for kind in kinds] + [PRIVATE[name][0] for name in private])


def store_the_session(worker: WorkerProcess, session: str, cwd: str) -> None:
    """A session of the shared project: two prompts, six tool uses, a summary, its end; each field holding
    secrets and private spans, and the session's directory and its user's home named in commands and files."""
    base = {"claudeSessionId": session, "cwd": cwd}
    worker.post(routes.INIT, {**base, "prompt": "make deploys use the vault, " + text_of("aws", private=("plain",))})

    def tool(n: int, name: str, tool_input: object, response: object) -> None:
        worker.post(routes.OBSERVATIONS, {**base, "tool_name": name, "tool_use_id": f"{session}-t{n}",
                                          "tool_input": tool_input, "tool_response": response})

    tool(1, "Bash", {"command": f"cd {cwd} && {SECRETS['bearer'][0]}", "description": "call the API"},
         {"stdout": text_of("pem", "jwt", private=("upper",)), "stderr": f"warning: {GITHUB}"})
    tool(2, "Read", {"file_path": f"{cwd}/.env"}, text_of("env file", "stripe", "slack"))
    tool(3, "Edit", {"file_path": f"{cwd}/src/db.py", "old_string": SECRETS["url"][0],
                     "new_string": "os.environ['DATABASE_URL'] " + PRIVATE["square"][0]},
         {"filePath": f"{cwd}/src/db.py", "structuredPatch": []})
    worker.post(routes.INIT, {**base, "prompt": "now the CI login: " + text_of("anthropic", "json",
                                                                                private=("spaced",))})
    tool(4, "Bash", {"command": text_of("mysql"), "description": "check the shop database"},
         {"stdout": text_of("curl -u", "docker"), "stderr": ""})
    tool(5, "Write", {"file_path": f"{cwd}/.netrc", "content": text_of("netrc", "password=")},
         {"filePath": f"{cwd}/.netrc"})
    home = cwd.rsplit("/src/", 1)[0]
    tool(6, "Read", {"file_path": f"{home}/.aws/config"}, "[default]\nregion = eu-west-1\n" + text_of("aws"))
    tool(7, "Bash", {"command": "cat notes.txt", "description": "every token format"},
         {"stdout": "\n".join(text.format(token=token) for _, text, token, _ in TOKENS), "stderr": ""})
    worker.post(routes.SUMMARIZE, {**base, "last_assistant_message": "Moved the keys to the vault. "
                                                                      + text_of("github", private=("unclosed",))})
    worker.post(routes.COMPLETE, base)
    worker.wait_idle()


def team_database_text(url: str) -> str:
    """Every column of every table of the team database (information_schema), cast to text."""
    parts: list[str] = []
    with psycopg.connect(url) as connection:
        columns = connection.execute(
            "SELECT table_schema, table_name, column_name FROM information_schema.columns"
            " JOIN information_schema.tables USING (table_catalog, table_schema, table_name)"
            " WHERE table_type = 'BASE TABLE' AND table_schema NOT IN ('pg_catalog', 'information_schema')"
            " ORDER BY 1, 2, 3").fetchall()
        assert {table for _, table, _ in columns} >= {"sessions", "prompts", "observations", "summaries"}
        for schema, table, column in columns:
            query = sql.SQL("SELECT {}::text FROM {}.{}").format(sql.Identifier(column), sql.Identifier(schema),
                                                                 sql.Identifier(table))
            parts += [value for (value,) in connection.execute(query) if value is not None]
    return "\n".join(parts)


def where_in_team_database(url: str, needle: str) -> list[str]:
    """``table.column: value`` of each value in the team database that holds ``needle``."""
    found: list[str] = []
    with psycopg.connect(url) as connection:
        for table in ("sessions", "prompts", "observations", "summaries"):
            cursor = connection.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(table)))
            names = [column.name for column in cursor.description or ()]
            for row in cursor:
                found += [f"{table}.{name}: {value}" for name, value in zip(names, row, strict=True)
                          if needle in str(value)]
    return found


@pytest.mark.parametrize("redact_secrets", ["true", "false"])
def test_nothing_private_or_secret_and_no_local_path_reaches_the_team_database(tmp_path: Path, team_database_url: str,
                                                                              redact_secrets: str) -> None:
    """With ``redact_secrets=false`` the secrets stay on this machine's disk (the user's choice), and
    the push redacts them by the default rules all the same (it pushed them raw once)."""
    home = f"/home/u{uuid.uuid4().hex[:12]}"  # a user's home nobody else has: found anywhere, it leaked
    cwd = f"{home}/src/webapp"
    env = {"SESSIONMEM_DATABASE_URL": team_database_url, "SESSIONMEM_SHARE_PROJECTS": "webapp",
           "SESSIONMEM_REDACT_SECRETS": redact_secrets,
           "SESSIONMEM_MACHINE_NAME": "laptop", "SESSIONMEM_USER_NAME": "ann", "SESSIONMEM_EMBEDDER": "none",
           "SESSIONMEM_COMPRESSOR": "offline", "SESSIONMEM_BATCH_QUIET": "0.05", "HOME": home}
    expected = {"sessions": 1, "prompts": 2, "observations": 7, "summaries": 1}

    def team_counts() -> dict[str, int]:
        with psycopg.connect(team_database_url) as connection:
            return {table: connection.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table)))
                    .fetchone()[0] for table in expected}

    with start_worker(tmp_path / "data", env=env) as worker:
        store_the_session(worker, "private-1", cwd)
        # Every row in the team database (the push's promise), not a statistic that a busy machine reads early.
        worker.wait_until(lambda: team_counts() == expected, timeout=SYNC_WAIT_S)
    assert team_counts() == expected
    dumped = team_database_text(team_database_url)
    # The dump sees the rows: what the session did is there, with its secrets marked as removed.
    assert "make deploys use the vault" in dumped and "Moved the keys to the vault." in dumped
    assert "[REDACTED:" in dumped
    assert "src/db.py" in dumped and "~/.aws/config" in dumped  # paths, relative to the project or from ~
    found = {kind: secret for kind, (_, secret) in SECRETS.items() if secret in dumped}
    found |= {f"<private> {name}": secret for name, (_, secret) in PRIVATE.items() if secret in dumped}
    found |= {name: kept[:3] for name, _, token, prefix in TOKENS
              if (kept := kept_runs(token, prefix, dumped, KEPT_RUN_IN_STORE))}
    assert found == {}, found
    assert home not in dumped, where_in_team_database(team_database_url, home)
    if redact_secrets == "false":  # they were kept here: what was pushed was redacted on the way
        assert data_dir_contains(tmp_path / "data", SECRETS["aws"][1].encode())


def written_straight_into_the_team_database(url: str, session: str) -> None:
    """A session of the project ``webapp`` from another machine, its texts holding every token format and
    private spans, encoded ones too: inserted as the team's push would, without the pusher's boundary."""
    every_token = "\n".join(text.format(token=token) for _, text, token, _ in TOKENS)
    private = "\n".join(text for text, _ in PRIVATE.values())
    secrets = text_of(*SECRETS)
    origin = Origin("machine-elsewhere", "elsewhere", "eve")
    records = [
        SessionRecord(claude_session_id=session, project="webapp", first_prompt=f"deploy {secrets}",
                      created_at=1795550000.0, updated_at=1795550000.0),
        PromptRecord(session, 1, f"deploy {private} {secrets}", 1795550000.0),
        ObservationRecord(claude_session_id=session, project="webapp", prompt_number=1, tool_name="Bash",
                          tool_use_id=f"{session}-t1", type="change", title="Deployed the app",
                          created_at=1795550001.0, narrative=secrets,  # each fact within its cap (4,096)
                          facts=[*(text.format(token=token) for _, text, token, _ in TOKENS), private]),
        SummaryRecord(claude_session_id=session, project="webapp", prompt_number=1, created_at=1795550002.0,
                      request="deploy", completed=f"Deployed. {every_token}", notes=private),
    ]
    with psycopg.connect(url, autocommit=True) as connection:
        pg_schema.migrate(connection)
        register_vector(connection)
        push_rows(connection, [SharedRow(record=record, project_key=NAME_KEY_PREFIX + "webapp", origin=origin)
                               for record in records])


def test_rows_pulled_from_the_team_database_bring_no_secret_and_no_private_span(tmp_path: Path,
                                                                                team_database_url: str) -> None:
    written_straight_into_the_team_database(team_database_url, "elsewhere-1")
    data = tmp_path / "data"
    env = {"SESSIONMEM_DATABASE_URL": team_database_url, "SESSIONMEM_SHARE_PROJECTS": "webapp",
           "SESSIONMEM_REDACT_SECRETS": "false", "SESSIONMEM_EMBEDDER": "none", "SESSIONMEM_COMPRESSOR": "offline"}
    with start_worker(data, env=env) as worker:
        worker.wait_until(lambda: worker.get(routes.DEBUG_JSON)["team"]["pulled"] >= 4, timeout=SYNC_WAIT_S)
        exported = json.dumps(worker.get(f"{routes.EXPORT}?project=webapp")["records"])
        assert "Deployed the app" in exported and "[REDACTED:" in exported  # the rows are here, redacted
    found = {kind: secret for kind, (_, secret) in SECRETS.items() if data_dir_contains(data, secret.encode())}
    found |= {f"<private> {name}": secret for name, (_, secret) in PRIVATE.items()
              if data_dir_contains(data, secret.encode())}
    stored = b"".join(path.read_bytes() for path in data.rglob("*") if path.is_file()).decode("utf-8", "replace")
    found |= {name: kept[:3] for name, _, token, prefix in TOKENS
              if (kept := kept_runs(token, prefix, stored, KEPT_RUN_IN_STORE))}
    assert found == {}, found
