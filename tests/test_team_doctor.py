"""`sessionmem doctor` with a team database, against a real PostgreSQL with pgvector: up, down, a wrong
password, a password file others can read, a schema newer than the code. Each problem is one line that
says what to fix, doctor exits 1, and no line holds the password."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
import trio

from sessionmem.storage.pg.schema import LATEST
from sessionmem.storage.pg.store import open_team_store
from sessionmem.testing.postgres import PostgresServer, temporary_postgres
from sessionmem.testing.postgres_roles import add_password_role

pytestmark = pytest.mark.slow

PASSWORD = "Tr0ub4dor-and-3-more"


def doctor_env(tmp_path: Path, database_url: str, *, data_dir: Path | None = None, **extra: str) -> dict[str, str]:
    """A user with the hooks wired (so that the team database's lines are the only possible problems), and the
    data dir ``data_dir`` (default: one of its own, without a worker)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SESSIONMEM_", "PG", "ANTHROPIC_"))}
    env.update(HOME=str(tmp_path / "home"), CLAUDE_CONFIG_DIR=str(tmp_path / "claude"),
               SESSIONMEM_DATA_DIR=str(data_dir or tmp_path / "data"), SESSIONMEM_PORT="0", SESSIONMEM_COMPRESSOR="offline",
               SESSIONMEM_DATABASE_URL=database_url, **extra)
    (tmp_path / "home").mkdir(parents=True, exist_ok=True)
    (tmp_path / "claude").mkdir(exist_ok=True)
    if not (tmp_path / "claude" / "settings.json").exists():
        subprocess.run([sys.executable, "-m", "sessionmem", "install"], env=env, check=True, capture_output=True,
                       timeout=60)
    return env


def doctor(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sessionmem", "doctor"], env=env, capture_output=True, text=True,
                          timeout=120)


def team_lines(output: str) -> list[str]:
    return [line.strip() for line in output.splitlines()
            if line.strip()[5:].startswith(("team", "pgvector", "password file", "sharing:", "worker's team"))
            or "share-consent.json" in line]


def migrate(url: str) -> None:
    async def check() -> None:
        async with open_team_store(url) as store:
            await store.check()

    trio.run(check)


def test_doctor_checks_the_team_database_and_its_schema(tmp_path: Path, postgres: PostgresServer,
                                                        team_database_url: str) -> None:
    """A new database: reachable, pgvector available, no schema yet (exit 0); once a worker (here the store)
    has connected: pgvector created, the schema at this code's version; then a newer schema is a problem."""
    env = doctor_env(tmp_path, team_database_url, SESSIONMEM_SHARE_PROJECTS="webapp,infra")
    first = doctor(env)
    assert first.returncode == 0, first.stdout
    lines = team_lines(first.stdout)
    assert any(line.startswith("[ok] team database postgres@") and "PostgreSQL 18." in line and "unix socket" in line
               for line in lines), first.stdout
    assert any(line.startswith("[ok] pgvector 0.8") and "available: the first worker to connect creates it" in line
               for line in lines), first.stdout
    assert f"[ok] team schema not created yet: the first worker to connect creates it (version {LATEST})" in lines
    assert "[ok] sharing: webapp: shared (share_projects)" in lines and "[ok] sharing: infra: shared (share_projects)" \
        in lines, first.stdout

    migrate(team_database_url)
    second = doctor(env)
    assert second.returncode == 0, second.stdout
    lines = team_lines(second.stdout)
    assert any(line.startswith("[ok] pgvector 0.8.") for line in lines), second.stdout
    assert f"[ok] team schema version {LATEST} (this sessionmem's)" in lines, second.stdout

    with psycopg.connect(team_database_url, autocommit=True) as connection:
        connection.execute("INSERT INTO schema_version (version) VALUES (%s)", (LATEST + 7,))
    newer = doctor(env)
    assert newer.returncode == 1, newer.stdout
    assert (f"[!!] team schema version {LATEST + 7} is newer than this sessionmem's ({LATEST}): a newer sessionmem "
            f"upgraded it, and this one neither pushes nor pulls until it is upgraded too") in team_lines(newer.stdout)


@pytest.mark.postgres  # starts a server of its own
def test_doctor_says_when_the_team_database_is_down(tmp_path: Path) -> None:
    """A server stopped: one line naming the server and libpq's reason, exit 1; started again: all good."""
    with temporary_postgres() as server:
        url = server.create_database("team_down")
        migrate(url)
        env = doctor_env(tmp_path, url)
        assert doctor(env).returncode == 0
        server.stop()
        down = doctor(env)
        assert down.returncode == 1, down.stdout
        failure = [line for line in team_lines(down.stdout) if line.startswith("[!!] team database")]
        assert len(failure) == 1, down.stdout
        assert "cannot connect" in failure[0] and "Is the server running locally" in failure[0], failure
        server.start()
        assert doctor(env).returncode == 0


def test_doctor_says_the_password_is_wrong_without_showing_any(tmp_path: Path, postgres: PostgresServer) -> None:
    url = add_password_role(postgres, role="doctor_alice", password=PASSWORD, database="doctor_team")
    try:
        with_password = url.replace("doctor_alice@", f"doctor_alice:{PASSWORD}@")
        good = doctor(doctor_env(tmp_path, with_password))
        assert good.returncode == 0, good.stdout
        assert any(line.startswith("[ok] team database doctor_alice@") for line in team_lines(good.stdout))

        wrong = "W-r-o-n-g-" + PASSWORD[::-1]
        bad = doctor(doctor_env(tmp_path, url.replace("doctor_alice@", f"doctor_alice:{wrong}@")))
        assert bad.returncode == 1, bad.stdout
        assert any(line.startswith("[!!] team database doctor_alice@") and
                   'password authentication failed for user "doctor_alice"' in line and
                   "(the password is wrong: check PGPASSWORD, the password file or the URL)" in line
                   for line in team_lines(bad.stdout)), bad.stdout
        for output in (good.stdout + good.stderr, bad.stdout + bad.stderr):
            assert PASSWORD not in output and wrong not in output and PASSWORD[::-1] not in output
    finally:
        postgres.drop_database("doctor_team")


def test_doctor_names_a_password_file_others_can_read(tmp_path: Path, postgres: PostgresServer) -> None:
    """libpq ignores a password file of mode 0644 (a warning on stderr, then "no password supplied"):
    doctor says which file and how to fix it; at 0600 the password in it is used."""
    url = add_password_role(postgres, role="doctor_bob", password=PASSWORD, database="doctor_bob_team")
    try:
        passfile = tmp_path / "pgpass"
        passfile.write_text(f"*:*:doctor_bob_team:doctor_bob:{PASSWORD}\n")
        passfile.chmod(0o644)
        env = doctor_env(tmp_path, url, PGPASSFILE=str(passfile))
        loose = doctor(env)
        assert loose.returncode == 1, loose.stdout
        lines = team_lines(loose.stdout)
        assert (f"[!!] password file {passfile} can be read by other users (mode 0644): libpq ignores it, so no "
                f"password is sent (`chmod 600 {passfile}`)") in lines, loose.stdout
        assert any(line.startswith("[!!] team database doctor_bob@") and "no password supplied" in line
                   for line in lines), loose.stdout

        passfile.chmod(0o600)
        private = doctor(env)
        assert private.returncode == 0, private.stdout
        assert f"[ok] password file {passfile} (private to its owner)" in team_lines(private.stdout)
        for output in (loose.stdout + loose.stderr, private.stdout + private.stderr):
            assert PASSWORD not in output
    finally:
        postgres.drop_database("doctor_bob_team")


def test_doctor_without_a_team_database_says_it_is_off(tmp_path: Path) -> None:
    env = doctor_env(tmp_path, "")
    off = doctor(env)
    assert off.returncode == 0, off.stdout
    assert team_lines(off.stdout) == ["[ok] team memory off (database_url is not set)"]


def test_doctor_says_who_must_create_pgvector(tmp_path: Path, postgres: PostgresServer) -> None:
    """A role that is not a superuser cannot create pgvector (not a trusted extension): doctor says who must,
    and where."""
    url = add_password_role(postgres, role="doctor_carol", password=PASSWORD, database="doctor_carol_team",
                            vector=False)
    try:
        env = doctor_env(tmp_path, url.replace("doctor_carol@", f"doctor_carol:{PASSWORD}@"))
        missing = doctor(env)
        assert missing.returncode == 1, missing.stdout
        assert any(line.startswith("[!!] pgvector 0.8") and "is available but not created in database "
                   "doctor_carol_team, and only a superuser can create it: have one run `CREATE EXTENSION vector;` "
                   "there" in line for line in team_lines(missing.stdout)), missing.stdout
    finally:
        postgres.drop_database("doctor_carol_team")



def test_doctor_lists_what_is_shared_and_why_and_a_consent_file_it_cannot_trust(
        tmp_path: Path, team_database_url: str) -> None:
    from sessionmem.team.consent import Decision, answer, consent_path, database_label

    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    env = doctor_env(tmp_path, team_database_url, data_dir=data)
    path = consent_path(data)
    answer(path, database=database_label(team_database_url), project_key="github.com/acme/app", project="app",
           decision=Decision.ALLOWED)
    answer(path, database="elsewhere.example:5432/team", project_key="github.com/acme/other", project="other",
           decision=Decision.ALLOWED)  # another team database's approval: not this one's
    lines = team_lines(doctor(env).stdout)
    assert [line for line in lines if "sharing:" in line] == [
        line for line in lines if line.startswith("[ok] sharing: app (github.com/acme/app): shared (approved on this "
                                                  "machine at ")], lines
    assert len([line for line in lines if "sharing:" in line]) == 1

    path.write_text("{ not what sessionmem writes")
    broken = doctor(env)
    assert broken.returncode == 1
    lines = team_lines(broken.stdout)
    assert any(line.startswith("[!!] ") and "is malformed" in line and "nothing is shared by approval" in line
               for line in lines), lines
    assert "[ok] sharing: nothing (share_projects is empty and no repository is approved on this machine)" in lines
