"""Consent to share: a repository that commits ``.sessionmem-share`` asks, the user alone answers.

A real worker over HTTP, the real hook processes, the real command line and a real PostgreSQL
read directly: with ``database_url`` set and ``share_projects`` empty, nothing of a cloned
repository that asks to share reaches the team database and nothing of the team's reaches
this machine; SessionStart tells the user once; ``sessionmem share allow`` shares both ways,
``sessionmem share deny`` stops both ways, the worker running throughout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import apsw
import psycopg
import pytest

from sessionmem.protocol.git_remote import SHARE_FILE
from sessionmem.storage.sqlite import team_rows
from sessionmem.team.consent import consent_path, database_label, read_consent
from sessionmem.testing.harness import ThreadedWorker, serve_in_thread

from .test_hooks import run_hook

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("team")]

SYNC_WAIT_S = 60.0  # a busy 2-core CI machine: the promise is "arrives" or "never", not how fast
KEY = "github.com/acme/app"


def team_settings(url: str, machine: str, **extra: Any) -> dict[str, Any]:
    return {"database_url": url, "machine_name": machine, "user_name": f"{machine}-user", "embedder": "none",
            "batch_quiet_s": 0.05, "team_pull_interval_s": 0.2, **extra}


def cloned_repository(root: Path) -> Path:
    """A clone of a repository whose author committed the share file."""
    repository = root / "src" / "app"
    (repository / ".git").mkdir(parents=True)
    (repository / ".git" / "config").write_text('[remote "origin"]\n\turl = git@github.com:acme/app.git\n')
    (repository / SHARE_FILE).write_text("")
    return repository


def work_in(data: Path, repository: Path, session: str, marker: str) -> None:
    """One prompt, one tool use and the turn's end, through the hook processes as Claude Code runs them."""
    base = {"session_id": session, "cwd": str(repository)}
    for stage, payload in (
            ("UserPromptSubmit", {"prompt": f"work on the {marker} plan"}),
            ("PostToolUse", {"tool_name": "Edit", "tool_use_id": f"{session}-edit",
                             "tool_input": {"file_path": f"{repository}/{marker}.py", "old_string": "a",
                                            "new_string": "b"}, "tool_response": "ok"}),
            ("Stop", {"last_assistant_message": f"The {marker} plan is written."})):
        result = run_hook(stage, {**base, "hook_event_name": stage, **payload}, data)
        assert result.returncode == 0 and result.stderr == b"", result.stderr


def session_start(data: Path, repository: Path, session: str, **env: str) -> dict[str, Any]:
    result = run_hook("SessionStart", {"hook_event_name": "SessionStart", "session_id": session,
                                       "cwd": str(repository), "source": "startup"}, data, **env)
    assert result.returncode == 0, result.stderr
    output: dict[str, Any] = json.loads(result.stdout)
    return output


def teammate_session(teammate: ThreadedWorker, session: str, marker: str) -> None:
    """A teammate who shares the repository (by share_projects) works in their clone of it."""
    cwd = "/home/bob/app"
    teammate.post("/api/sessions/init", {"claudeSessionId": session, "cwd": cwd, "project": "app",
                                         "projectKey": KEY, "prompt": f"the {marker} change"})
    status, answer = teammate.request("POST", "/api/sessions/observations", {
        "claudeSessionId": session, "cwd": cwd, "project": "app", "tool_name": "Bash", "tool_use_id": f"{session}-0",
        "tool_input": {"command": f"make {marker}"}, "tool_response": "ok"})
    assert status == 202, answer
    teammate.wait_idle()


def pg_rows_of(url: str, machine: str) -> int:
    """Rows of ``machine`` in the team database, every table."""
    with psycopg.connect(url) as connection:
        if connection.execute("SELECT to_regclass('sessions')").fetchone() == (None,):
            return 0
        return sum(int(connection.execute(f"SELECT count(*) FROM {table} WHERE origin_machine = %s",
                                          (machine,)).fetchone()[0])  # type: ignore[index]
                   for table in ("sessions", "prompts", "observations", "summaries"))


def pg_prompts(url: str) -> set[str]:
    with psycopg.connect(url) as connection:
        if connection.execute("SELECT to_regclass('prompts')").fetchone() == (None,):
            return set()  # no worker has made the schema yet
        return {str(text) for (text,) in connection.execute("SELECT text FROM prompts").fetchall()}


def local(data: Path, sql: str) -> list[tuple[Any, ...]]:
    connection = apsw.Connection(str(data / "sessionmem.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return list(connection.execute(sql))
    finally:
        connection.close()


def pulled_prompts(data: Path) -> set[str]:
    return {str(text) for (text,) in local(data, "SELECT text FROM user_prompts WHERE origin_machine != ''")}


def outbox_passed(data: Path) -> bool:
    """The pusher has read past every row stored here (pushed, or passed over as not shared)."""
    found = local(data, f"SELECT value FROM team_cursors WHERE name = '{team_rows.OUTBOX}'")
    cursor = json.loads(found[0][0]) if found else {}
    (observations, prompts) = local(data, "SELECT (SELECT coalesce(max(id), 0) FROM observations),"
                                          " (SELECT coalesce(max(id), 0) FROM user_prompts)")[0]
    return cursor.get("observation", 0) >= observations and cursor.get("prompt", 0) >= prompts


def wait_for_pulls(worker: ThreadedWorker, passes: int = 2) -> None:
    """``passes`` pull passes finished after now: the last of them began after now, with the answers as they are."""
    def last_pull() -> float:
        return float(worker.get("/debug")["team"]["lastPullAt"] or 0.0)

    for _ in range(passes):
        after = max(last_pull(), time.time())
        worker.wait_until(lambda after=after: last_pull() > after, timeout=SYNC_WAIT_S)


def share(data: Path, repository: Path, url: str, verb: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``sessionmem share VERB`` run by the user in the repository, as from their terminal."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SESSIONMEM_", "CLAUDECODE"))}
    clean.update({"SESSIONMEM_DATA_DIR": str(data), "SESSIONMEM_DATABASE_URL": url, **env})
    return subprocess.run([sys.executable, "-m", "sessionmem", "share", verb], cwd=repository, env=clean,
                          capture_output=True, text=True, timeout=120)


def test_a_repository_asks_the_user_alone_shares_and_takes_it_back(tmp_path: Path, team_database_url: str) -> None:
    url = team_database_url
    data, repository = tmp_path / "laptop", cloned_repository(tmp_path / "home")
    database = database_label(url)
    with serve_in_thread(data, **team_settings(url, "laptop")) as laptop, \
            serve_in_thread(tmp_path / "desk", **team_settings(url, "desk", share_projects="app")) as teammate:
        # The teammate's memory of the repository is in the team database.
        teammate_session(teammate, "bob-1", "before")
        teammate.wait_until(lambda: "the before change" in pg_prompts(url), timeout=SYNC_WAIT_S)

        # A clone that asks: SessionStart tells the user, in the system message, once (even with the
        # usual "memories loaded" line turned off: consent is asked for whatever that setting says).
        first = session_start(data, repository, "me-1", SESSIONMEM_SYSTEM_MESSAGE="0")
        message = first["systemMessage"]
        assert message.startswith("sessionmem: this repository") and "memories" not in message
        assert f"this repository (app) asks to share its memory with the team database {database}" in message
        # The commands as this install has them, with this data dir (not the default).
        assert f"sessionmem share allow --data-dir {data}` in it to share" in message
        assert f"sessionmem share deny --data-dir {data}` to refuse" in message
        assert "asks to share" not in first.get("hookSpecificOutput", {}).get("additionalContext", "")  # user only
        work_in(data, repository, "me-1", "private")
        laptop.wait_idle()
        again = session_start(data, repository, "me-2")
        assert "asks to share" not in again.get("systemMessage", "")

        # Nothing leaves, nothing arrives: the pusher passed over the rows, pulls ran, nothing moved.
        laptop.wait_until(lambda: outbox_passed(data), timeout=SYNC_WAIT_S)
        wait_for_pulls(laptop)
        assert pg_rows_of(url, "laptop") == 0
        assert pulled_prompts(data) == set()
        team = laptop.get("/api/team")
        assert team["connected"]
        assert [(e["project"], e["projectKey"], e["shared"], e["reason"]) for e in team["sharing"]] == [
            ("app", KEY, False, "requested")]

        # The user accepts: new memory is pushed, the team's pulled (what was there before too).
        allowed = share(data, repository, url, "allow")
        assert allowed.returncode == 0, allowed.stderr
        assert f"app ({KEY}) is shared with the team database {database}" in allowed.stdout
        work_in(data, repository, "me-3", "shared")
        laptop.wait_until(lambda: "work on the shared plan" in pg_prompts(url), timeout=SYNC_WAIT_S)
        laptop.wait_until(lambda: pulled_prompts(data) == {"the before change"}, timeout=SYNC_WAIT_S)
        assert "work on the private plan" not in pg_prompts(url)  # what was stored before asking stays here
        (entry,) = laptop.get("/api/team")["sharing"]
        assert (entry["project"], entry["shared"], entry["reason"]) == ("app", True, "approved") and entry["at"] > 0
        status = subprocess.run([sys.executable, "-m", "sessionmem", "status", "--data-dir", str(data)],
                                capture_output=True, text=True, timeout=60,
                                env={k: v for k, v in os.environ.items() if not k.startswith("SESSIONMEM_")})
        assert f"app ({KEY}): shared (approved on this machine at " in status.stdout, status.stdout

        # The user takes it back: within a pull interval, neither direction moves.
        denied = share(data, repository, url, "deny")
        assert denied.returncode == 0, denied.stderr
        wait_for_pulls(laptop)
        work_in(data, repository, "me-4", "after")
        teammate_session(teammate, "bob-2", "later")
        teammate.wait_until(lambda: "the later change" in pg_prompts(url), timeout=SYNC_WAIT_S)
        laptop.wait_idle()
        laptop.wait_until(lambda: outbox_passed(data), timeout=SYNC_WAIT_S)
        wait_for_pulls(laptop)
        assert "work on the after plan" not in pg_prompts(url)
        assert pulled_prompts(data) == {"the before change"}
        (entry,) = laptop.get("/api/team")["sharing"]
        assert (entry["shared"], entry["reason"]) == (False, "denied")
        # A refusal is an answer: the request is not shown again.
        assert "asks to share" not in session_start(data, repository, "me-5").get("systemMessage", "")


def test_an_agent_cannot_approve_and_without_a_database_nothing_is_asked(tmp_path: Path,
                                                                         team_database_url: str) -> None:
    data, repository = tmp_path / "laptop", cloned_repository(tmp_path / "home")
    refused = share(data, repository, team_database_url, "allow", CLAUDECODE="1")  # a shell of Claude Code's agent
    assert refused.returncode == 1 and "not an agent's" in refused.stderr
    assert not consent_path(data).exists()
    with serve_in_thread(data, batch_quiet_s=0.05):  # no database_url: there is nothing to ask about
        output = session_start(data, repository, "s-1")
        assert "asks to share" not in output.get("systemMessage", "")
    assert not consent_path(data).exists()
    off = share(data, repository, "", "allow")
    assert off.returncode == 2 and "database_url is not set" in off.stderr
    # The user, in their terminal, with no worker running: the answer is recorded for the next worker.
    allowed = share(data, repository, team_database_url, "allow")
    assert allowed.returncode == 0, allowed.stderr
    assert read_consent(consent_path(data)).allowed(database_label(team_database_url)) == {KEY}


def test_a_malformed_consent_file_shares_nothing_and_says_so(tmp_path: Path, team_database_url: str) -> None:
    url = team_database_url
    data, repository = tmp_path / "laptop", cloned_repository(tmp_path / "home")
    data.mkdir(mode=0o700)
    consent_path(data).write_text(json.dumps({"version": 1, "answers": [
        {"database": database_label(url), "project_key": KEY, "project": "app", "decision": "allowed", "at": 1}]})
        .replace('"answers": [', '"answers": [{"broken": true},'))
    consent_path(data).chmod(0o600)
    with serve_in_thread(data, **team_settings(url, "laptop")) as laptop:
        work_in(data, repository, "me-1", "private")
        laptop.wait_idle()
        laptop.wait_until(lambda: outbox_passed(data), timeout=SYNC_WAIT_S)
        assert pg_rows_of(url, "laptop") == 0
        team = laptop.get("/api/team")
        assert "is malformed" in team["consentError"] and "nothing is shared by approval" in team["consentError"]
        allowed = share(data, repository, url, "allow")
        assert allowed.returncode == 1 and "is malformed" in allowed.stderr
