"""The team sync's small rules, without a database: its pauses on the mock clock, passwords kept out of
what it shows, which keys a pull catches up on, NULs kept out of pushed texts, a worker without a
team database not loading its driver, and the upgrade that makes pulls start over."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import apsw
import trio
import trio.testing

from sessionmem.protocol.credentials import sanitized
from sessionmem.storage.export_records import PromptRecord
from sessionmem.storage.pg.text import without_nul
from sessionmem.storage.sqlite.schema import MIGRATIONS, migrate
from sessionmem.storage.sqlite.team_rows import OUTBOX, PULL, PULL_KEYS
from sessionmem.team.pull import _new_keys
from sessionmem.team.sync import BACKOFF_MAX_S, Backoff


async def test_backoff_doubles_from_half_a_second_to_thirty_and_starts_over_after_a_success(
        autojump_clock: trio.testing.MockClock) -> None:
    waited: list[float] = []
    backoff = Backoff()

    async def one_pause() -> None:
        started = trio.current_time()
        await backoff.wait()
        waited.append(trio.current_time() - started)

    for _ in range(9):
        await one_pause()
    backoff.reset()
    await one_pause()
    assert waited == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, BACKOFF_MAX_S, BACKOFF_MAX_S, BACKOFF_MAX_S, 0.5]


def test_a_password_never_shows_in_what_the_sync_reports() -> None:
    url = "postgresql://team:p%40ss%20word@db.example:5432/memory?sslmode=require"
    message = "connection to postgresql://team:p%40ss%20word@db.example failed (password 'p@ss word' rejected)"
    shown = sanitized(message, url)
    assert "p%40ss%20word" not in shown and "p@ss word" not in shown and "db.example" in shown
    assert sanitized("no password here", "postgresql:///memory?host=/run/pg") == "no password here"


def test_a_pull_catches_up_on_the_projects_it_did_not_pull_before() -> None:
    assert _new_keys(["name:a", "name:b"], ["name:a"]) == ["name:b"]
    assert _new_keys(["name:a"], ["name:a", "name:b"]) == []  # fewer: nothing to catch up on
    assert _new_keys(None, ["name:a"]) is None  # every project now: all of them from the start
    assert _new_keys(["name:a"], None) == []  # every project was pulled


def test_texts_lose_their_nuls_and_records_without_any_stay_the_same() -> None:
    record = PromptRecord("s\x00", 1, "a\x00b", 1.0)
    assert without_nul(record) == PromptRecord("s\ufffd", 1, "a\ufffdb", 1.0)
    clean = PromptRecord("s", 1, "ab", 1.0)
    assert without_nul(clean) is clean


def test_a_worker_without_a_team_database_does_not_load_its_driver() -> None:
    """psycopg and pgvector are about a tenth of a worker's start: loaded only where database_url is set."""
    code = ("import sys\n"
            "import sessionmem.worker, sessionmem.server.app, sessionmem.server.debug\n"
            "print(sorted(m for m in ('psycopg', 'pgvector', 'sessionmem.team.sync') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": ""}, check=True).stdout
    assert out.split() == ["[]"]


def test_the_upgrade_past_the_pull_order_fix_pulls_again_from_the_start(tmp_path: Path) -> None:
    """Pulls before version 12 may have moved past rows they never read (ordered by the text of transaction
    ids): the pull cursor goes, the push cursors and the keys pulled stay."""
    connection = apsw.Connection(str(tmp_path / "old.db"))
    for version, script in enumerate(MIGRATIONS[:11], 1):
        with connection:
            connection.execute(script)
            connection.execute(f"PRAGMA user_version = {version}")
    kept = {OUTBOX: '{"session": 3}', PULL_KEYS: "null"}
    with connection:
        for name, value in {**kept, PULL: '{"xid": 1000, "seq": 252}'}.items():
            connection.execute("INSERT INTO team_cursors (name, value) VALUES (?, ?)", (name, value))
    assert migrate(connection) == len(MIGRATIONS) >= 12
    assert dict(connection.execute("SELECT name, value FROM team_cursors")) == kept
