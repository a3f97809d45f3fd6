"""The team database's password is used, and written nowhere: real workers against a real PostgreSQL whose
role must give its password (SCRAM), with the password in the URL, in a 0600 password file, and wrong.

Where a password could leak: the settings' repr, the worker's log and stderr, ``/debug``,
``GET /api/team``, ``sessionmem status`` and ``doctor``, every error text (a wrong password, an
unreadable URL), and the data dir's files. Each is searched for every spelling of the
password (as typed, and percent-encoded as a URL holds it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from sessionmem.protocol import routes
from sessionmem.protocol.routes import TEAM
from sessionmem.settings import load_settings
from sessionmem.testing.postgres import PostgresServer
from sessionmem.testing.postgres_roles import add_password_role
from sessionmem.testing.worker_process import WorkerProcess, start_worker
from tests.test_team_doctor import doctor, doctor_env

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("team")]

# Characters a URL must percent-encode, so that both spellings are looked for.
PASSWORD = "pg-S3cret/with@odd:chars%and#more"
WRONG = "not-the-S3cret?really"
SPELLINGS = (PASSWORD, quote(PASSWORD, safe=""), WRONG, quote(WRONG, safe=""))
SYNC_WAIT_S = 60.0


@pytest.fixture(scope="module")
def role_url(postgres: PostgresServer) -> Iterator[str]:
    """The team database of a role that must give ``PASSWORD``, over the unix socket, without the password."""
    url = add_password_role(postgres, role="cred_alice", password=PASSWORD, database="cred_team")
    yield url
    postgres.drop_database("cred_team")


def with_password(url: str, password: str) -> str:
    return url.replace("cred_alice@", f"cred_alice:{quote(password, safe='')}@")


def team_env(url: str, machine: str, **extra: str) -> dict[str, str]:
    return {"SESSIONMEM_DATABASE_URL": url, "SESSIONMEM_SHARE_PROJECTS": "*", "SESSIONMEM_MACHINE_NAME": machine,
            "SESSIONMEM_EMBEDDER": "none", "SESSIONMEM_COMPRESSOR": "offline", "SESSIONMEM_BATCH_QUIET": "0.05",
            "SESSIONMEM_TEAM_PULL_INTERVAL": "0.2", **extra}


def store_a_session(worker: WorkerProcess, session: str) -> None:
    worker.post("/api/sessions/init", {"claudeSessionId": session, "cwd": "/w/webapp", "project": "webapp",
                                       "prompt": "make the login page remember the user"})
    worker.post("/api/sessions/observations", {"claudeSessionId": session, "cwd": "/w/webapp", "project": "webapp",
                                               "tool_name": "Read", "tool_use_id": f"{session}-t1",
                                               "tool_input": {"file_path": "/w/webapp/login.py"},
                                               "tool_response": "def login(): ..."})
    worker.wait_idle()


def team_state(worker: WorkerProcess) -> dict[str, Any]:
    team = worker.get(routes.DEBUG_JSON)["team"]
    assert isinstance(team, dict)
    return team


def sessionmem(data_dir: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONMEM_")}
    full.update(env, SESSIONMEM_DATA_DIR=str(data_dir))
    return subprocess.run([sys.executable, "-m", "sessionmem", *args], env=full, capture_output=True, text=True,
                          timeout=120)


def leaks(texts: dict[str, str], data_dir: Path | None = None) -> list[str]:
    """Where any spelling of a password is found: the name of each text, and each file of ``data_dir``."""
    found = [name for name, text in texts.items() for spelling in SPELLINGS if spelling in text]
    if data_dir is not None:
        for path in data_dir.rglob("*"):
            if path.is_file():
                content = path.read_bytes()
                found += [str(path) for spelling in SPELLINGS if spelling.encode() in content]
    return found


def test_a_password_in_the_url_is_never_shown(tmp_path: Path, role_url: str) -> None:
    good_url, wrong_url = with_password(role_url, PASSWORD), with_password(role_url, WRONG)
    texts: dict[str, str] = {"settings repr": repr(load_settings({"SESSIONMEM_DATABASE_URL": good_url},
                                                                 data_dir=str(tmp_path / "settings")))}
    good_env, wrong_env = team_env(good_url, "laptop"), team_env(wrong_url, "desktop")
    with start_worker(tmp_path / "good", env=good_env) as good, start_worker(tmp_path / "wrong", env=wrong_env) as wrong:
        store_a_session(good, "cred-1")
        store_a_session(wrong, "cred-2")
        # The right password is used: the session reaches the team database.
        connected = good.wait_until(lambda: (lambda t: t if t["connected"] and t["pushed"] and not t["backlog"]
                                             else None)(team_state(good)), timeout=SYNC_WAIT_S)
        # The wrong one is refused, and the worker says so, and keeps what waits to be pushed.
        refused = wrong.wait_until(lambda: (lambda t: t if "password authentication failed" in t["lastError"]
                                            and t["backlog"] > 0 else None)(team_state(wrong)), timeout=SYNC_WAIT_S)
        assert not refused["connected"] and refused["pushed"] == 0
        assert 'password authentication failed for user "cred_alice"' in refused["lastError"]
        assert wrong.get("/api/observations/1")["title"]  # stored all the same
        for name, worker, env in (("good", good, good_env), ("wrong", wrong, wrong_env)):
            texts[f"{name} /debug.json"] = json.dumps(worker.get(routes.DEBUG_JSON))
            texts[f"{name} /debug page"] = str(worker.get(routes.DEBUG))
            texts[f"{name} /api/team"] = json.dumps(worker.get(TEAM))
            status = sessionmem(worker.data_dir, "status", env=env)
            assert status.returncode == 0, status.stderr
            texts[f"{name} status"] = status.stdout + status.stderr
        assert "team: connected" in texts["good status"], texts["good status"]
        assert "password authentication failed" in texts["wrong status"], texts["wrong status"]
        for name, worker, url in (("good", good, good_url), ("wrong", wrong, wrong_url)):
            checked = doctor(doctor_env(tmp_path / f"doctor-{name}", url, data_dir=worker.data_dir))
            texts[f"{name} doctor"] = checked.stdout + checked.stderr
        assert "[ok] worker's team sync: connected as laptop (" in texts["good doctor"], texts["good doctor"]
        assert "[!!] worker's team sync: not connected as desktop (" in texts["wrong doctor"], texts["wrong doctor"]
        assert 'password authentication failed for user "cred_alice"' in texts["wrong doctor"]
        assert connected["pushed"] > 0
    # After the workers stopped: their logs, stderr and everything else in their data dirs.
    assert leaks(texts, tmp_path) == []


def test_an_unreadable_url_is_reported_without_its_password(tmp_path: Path, role_url: str) -> None:
    """A URL libpq cannot read (a port that is not a number): the worker starts and works locally, and the
    error it reports holds no password."""
    broken = with_password(role_url, PASSWORD).replace("/cred_team?", "/cred_team?port=not-a-port&")
    env = team_env(broken, "laptop")
    with start_worker(tmp_path / "data", env=env) as worker:
        store_a_session(worker, "cred-3")
        team = worker.wait_until(lambda: (lambda t: t if t["lastError"] else None)(team_state(worker)),
                                 timeout=SYNC_WAIT_S)
        assert not team["connected"] and "port" in team["lastError"], team
        texts = {"/debug.json": json.dumps(worker.get(routes.DEBUG_JSON)),
                 "status": sessionmem(worker.data_dir, "status", env=env).stdout}
    checked = doctor(doctor_env(tmp_path / "doctor", broken))
    assert checked.returncode == 1
    texts["doctor"] = checked.stdout + checked.stderr
    assert leaks(texts, tmp_path) == []


def test_a_password_file_is_used_and_never_shown(tmp_path: Path, role_url: str) -> None:
    """A 0600 PGPASSFILE: the worker connects with the password in it, and writes it nowhere."""
    passfile = tmp_path / "pgpass"
    escaped = PASSWORD.replace("\\", "\\\\").replace(":", "\\:")  # .pgpass escapes ':' and '\'
    passfile.write_text(f"*:*:cred_team:cred_alice:{escaped}\n")
    passfile.chmod(0o600)
    env = team_env(role_url, "laptop", PGPASSFILE=str(passfile))
    data_dir = tmp_path / "data"
    with start_worker(data_dir, env=env) as worker:
        store_a_session(worker, "cred-4")
        worker.wait_until(lambda: (lambda t: t if t["connected"] and t["pushed"] and not t["backlog"] else None)(
            team_state(worker)), timeout=SYNC_WAIT_S)
        texts = {"/debug.json": json.dumps(worker.get(routes.DEBUG_JSON)),
                 "status": sessionmem(data_dir, "status", env=env).stdout}
    passfile.unlink()  # the one place it is meant to be
    assert leaks(texts, tmp_path) == []


def test_a_settings_file_with_a_malformed_url_is_refused_without_quoting_it(tmp_path: Path) -> None:
    from sessionmem.settings import SettingsError

    (tmp_path / "settings.json").write_text(json.dumps({"database_url": [f"postgresql://a:{PASSWORD}@h/db"]}))
    with pytest.raises(SettingsError) as refused:
        load_settings({}, data_dir=str(tmp_path))
    assert "database_url must be str, got a value of type list" in str(refused.value)
    assert leaks({"error": str(refused.value)}) == []

