"""The user's answers to repositories that ask to share (team/consent.py) and the sharing rule (team/sharing.py).

The file is the one place an approval lives: written atomically and private to its owner,
bound to one team database, and read strictly: a file that cannot be trusted approves
nothing, and nothing is written over it.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from sessionmem.team.consent import (
    CONSENT_FILE,
    ConsentUnreadable,
    Decision,
    answer,
    consent_path,
    consent_stamp,
    database_label,
    mark_asked,
    read_consent,
)
from sessionmem.team.sharing import SharingReason, describe, is_shared, sharing_list

DB = "db.example.com:5432/team"
OTHER_DB = "evil.example:5432/team"
KEY = "github.com/acme/app"


def allow(path: Path, key: str = KEY, database: str = DB, now: float = 100.0) -> None:
    answer(path, database=database, project_key=key, project=key.rpartition("/")[2].removeprefix("name:"),
           decision=Decision.ALLOWED, now=now)


def deny(path: Path, key: str = KEY, database: str = DB, now: float = 200.0) -> None:
    answer(path, database=database, project_key=key, project=key.rpartition("/")[2].removeprefix("name:"),
           decision=Decision.DENIED, now=now)


def test_no_file_approves_nothing(tmp_path: Path) -> None:
    consent = read_consent(consent_path(tmp_path))
    assert consent.allowed(DB) == frozenset() and consent.answers(DB) == []


def test_the_stamp_changes_with_every_answer_and_with_the_files_mode(tmp_path: Path) -> None:
    path = consent_path(tmp_path)
    assert consent_stamp(path) is None
    allow(path)
    first = consent_stamp(path)
    assert first is not None and consent_stamp(path) == first  # unchanged: the worker need not read it again
    deny(path)
    second = consent_stamp(path)
    assert second not in (None, first)
    os.chmod(path, 0o666)  # the answers untouched, the file no longer private: read again (and refused)
    assert consent_stamp(path) != second


def test_allow_then_deny_takes_the_approval_back_and_binds_it_to_one_database(tmp_path: Path) -> None:
    path = consent_path(tmp_path)
    allow(path)
    consent = read_consent(path)
    assert consent.allowed(DB) == {KEY}
    assert consent.allowed(OTHER_DB) == frozenset()  # an approval for one team database does not carry to another
    deny(path)
    consent = read_consent(path)
    assert consent.allowed(DB) == frozenset()
    refused = consent.answer(DB, KEY)
    assert refused is not None and refused.decision is Decision.DENIED and refused.at == 200.0
    allow(path, now=300.0)  # and approved again
    assert read_consent(path).allowed(DB) == {KEY}


def test_the_file_is_written_atomically_and_private_whatever_the_umask(tmp_path: Path) -> None:
    path = consent_path(tmp_path)
    previous = os.umask(0)
    try:
        allow(path)
        deny(path, key="name:notes")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == [CONSENT_FILE, "share-consent.lock"]  # no temporary left
    assert stat.S_IMODE((tmp_path / "share-consent.lock").stat().st_mode) == 0o600
    written = json.loads(path.read_text())
    assert [(a["project_key"], a["decision"]) for a in written["answers"]] == [(KEY, "allowed"), ("name:notes", "denied")]


@pytest.mark.parametrize("content", [
    b"{not json",
    b'{"version": 1, "answers": {"github.com/acme/app": "allowed"}}',  # a map, not a list
    b'{"version": 1, "answers": [{"database": "db.example.com:5432/team", "project_key": "github.com/acme/app",'
    b' "project": "app", "decision": "yes", "at": 1}]}',  # an unknown decision
    b'{"version": 2, "answers": []}',  # a newer format
    b"[]",
])
def test_a_malformed_file_fails_closed_and_is_never_written_over(tmp_path: Path, content: bytes) -> None:
    path = consent_path(tmp_path)
    path.write_bytes(content)
    path.chmod(0o600)
    with pytest.raises(ConsentUnreadable, match="nothing is shared by approval"):
        read_consent(path)
    with pytest.raises(ConsentUnreadable):
        allow(path)
    with pytest.raises(ConsentUnreadable):
        mark_asked(path, database=DB, project_key=KEY, project="app")
    assert path.read_bytes() == content  # the user's file is left for them to look at


def test_a_file_another_user_may_write_approves_nothing(tmp_path: Path) -> None:
    path = consent_path(tmp_path)
    allow(path)
    path.chmod(0o622)
    with pytest.raises(ConsentUnreadable, match="writable by another user"):
        read_consent(path)
    path.unlink()
    os.symlink(tmp_path / "elsewhere.json", path)  # a link is not followed
    (tmp_path / "elsewhere.json").write_text('{"version": 1, "answers": []}')
    with pytest.raises(ConsentUnreadable):
        read_consent(path)


def test_a_request_is_marked_asked_once_and_never_after_an_answer(tmp_path: Path) -> None:
    path = consent_path(tmp_path)
    assert mark_asked(path, database=DB, project_key=KEY, project="app") is True
    assert mark_asked(path, database=DB, project_key=KEY, project="app") is False
    assert read_consent(path).allowed(DB) == frozenset()  # asked is not approved
    assert mark_asked(path, database=OTHER_DB, project_key=KEY, project="app") is True  # another database asks anew
    deny(path, key="name:notes")
    assert mark_asked(path, database=DB, project_key="name:notes", project="notes") is False


def test_the_database_label_names_no_user_nor_password() -> None:
    assert database_label("postgresql://mem:s3cret@DB.Example.com/team?sslmode=verify-full") == DB
    assert database_label("postgresql://mem@db.example.com:6543/team") == "db.example.com:6543/team"
    assert database_label("") == ""
    assert "s3cret" not in database_label("postgresql://mem:s3cret@db.example.com/team")


def test_only_the_user_shares_a_committed_file_only_asks() -> None:
    # share_projects and approvals share; nothing else does (a repository's request is no argument here).
    assert is_shared("app", KEY, share_projects=("app",), approved=())
    assert is_shared("app", KEY, share_projects=("*",), approved=())
    assert is_shared("app", KEY, share_projects=(), approved={KEY})
    assert is_shared("notes", "", share_projects=(), approved={"name:notes"})
    assert not is_shared("app", KEY, share_projects=(), approved=())
    assert not is_shared("app", KEY, share_projects=("other",), approved={"github.com/acme/other"})


def test_the_sharing_list_says_what_is_shared_and_why(tmp_path: Path) -> None:
    path = consent_path(tmp_path)
    allow(path, key=KEY)
    deny(path, key="github.com/acme/refused")
    mark_asked(path, database=DB, project_key="github.com/acme/asked", project="asked", now=50.0)
    requests = [("github.com/acme/asked", "asked"), ("github.com/acme/quiet", "quiet"), (KEY, "app"),
                ("github.com/acme/shop", "shop")]
    entries = sharing_list(("shop",), read_consent(path).answers(DB), requests)
    reasons = {(entry.project, entry.shared, entry.reason, entry.at) for entry in entries}
    assert reasons == {
        ("shop", True, SharingReason.SHARE_PROJECTS, None),
        ("app", True, SharingReason.APPROVED, 100.0),
        ("refused", False, SharingReason.DENIED, 200.0),
        ("asked", False, SharingReason.REQUESTED, 50.0),
        ("quiet", False, SharingReason.REQUESTED, None),
    }
    lines = [describe(entry) for entry in entries]
    assert "app (github.com/acme/app): shared (approved on this machine at " in "\n".join(lines)
    assert any(line.startswith("quiet (github.com/acme/quiet): not shared (requested by its repository, not approved")
               for line in lines)


def test_answers_written_at_once_are_all_kept(tmp_path: Path) -> None:
    """The command line and the worker may write at once: a read-modify-write under the lock loses none."""
    from concurrent.futures import ThreadPoolExecutor

    path = consent_path(tmp_path)

    def writer(number: int) -> None:
        for index in range(20):
            if number % 2:
                allow(path, key=f"github.com/acme/repo-{number}-{index}")
            else:
                mark_asked(path, database=DB, project_key=f"github.com/acme/repo-{number}-{index}", project="r")

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(writer, range(4)))
    consent = read_consent(path)
    assert len(consent.answers(DB)) == 80
    assert len(consent.allowed(DB)) == 40
