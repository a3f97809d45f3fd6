"""The one scrubber of passwords (sessionmem.protocol.credentials): every spelling of a password that the
team database's URL holds, or that a message quotes, is gone from what is shown; the worker's connections,
the sync's status and the doctor all use it."""

from __future__ import annotations

import pytest

from sessionmem.protocol import credentials
from sessionmem.protocol.credentials import sanitized

SECRET = "S3cr3t-pw"

# (the database URL, a message quoting it, the spellings of the password that must not survive)
SHAPES = [
    pytest.param("postgresql://ann:S3cr3t-pw@db.example:5432/team?sslmode=require",
                 "connection to server at postgresql://ann:S3cr3t-pw@db.example:5432/team failed",
                 [SECRET], id="url-userinfo"),
    pytest.param("postgres://ann:p%40ss%20w0rd@db.example/team",
                 "could not connect with password 'p@ss w0rd' (url postgres://ann:p%40ss%20w0rd@db.example), "
                 "p%40ss%20w0rd alone, p@ss w0rd alone",
                 ["p%40ss%20w0rd", "p@ss w0rd"], id="url-userinfo-percent-encoded"),
    pytest.param("postgresql://ann@db.example/team?sslmode=require&password=S3cr%26t",
                 "invalid parameter in ?sslmode=require&password=S3cr%26t; the password S3cr&t was refused",
                 ["S3cr%26t", "S3cr&t"], id="url-query-password"),
    pytest.param("host=db.example user=ann password=S3cr3t-pw dbname=team",
                 "conninfo host=db.example password=S3cr3t-pw: bad; it was S3cr3t-pw",
                 [SECRET], id="keyword-dsn"),
    pytest.param("host=db.example password='it\\'s S3cr3t' dbname=team",
                 "conninfo password='it\\'s S3cr3t' failed; libpq read it as it's S3cr3t",
                 ["it\\'s S3cr3t", "it's S3cr3t"], id="keyword-dsn-quoted"),
    pytest.param("postgresql:///team?host=/run/postgresql",
                 'PGPASSWORD=S3cr3t-pw psql: error; password = "S3cr3t-pw two" given; '
                 "Password='S3cr3t-pw' too; other postgresql://bob:S3cr3t-pw@elsewhere/x",
                 [SECRET], id="env-text-and-urls-of-other-servers"),
]


@pytest.mark.parametrize(("url", "message", "spellings"), SHAPES)
def test_no_spelling_of_a_password_survives(url: str, message: str, spellings: list[str]) -> None:
    shown = sanitized(message, url)
    survivors = [spelling for spelling in spellings if spelling in shown]
    assert not survivors, shown
    assert "***" in shown


def test_what_holds_no_password_is_left_as_it_is() -> None:
    assert sanitized("no password here", "postgresql:///memory?host=/run/pg") == "no password here"
    assert sanitized("server db.example refused", "") == "server db.example refused"
    assert sanitized("a URL it cannot read", "postgresql://[broken") == "a URL it cannot read"
    assert credentials.passwords("postgresql://ann:@db/team") == set()  # an empty password is no secret


def test_the_worker_the_sync_and_the_doctor_use_the_one_scrubber() -> None:
    from sessionmem.cli import team_doctor
    from sessionmem.storage.pg import connections
    from sessionmem.team import sync

    assert connections.sanitized is sync.sanitized is team_doctor.sanitized is sanitized
