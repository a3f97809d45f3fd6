"""TLS to the team database, with libpq's own checks: ``sslmode=require`` encrypts, ``verify-full`` also checks
the server's certificate against ``sslrootcert``, and a certificate signed by another authority is refused with
a clear error, by the team store and by ``sessionmem doctor``.

The test PostgreSQL is built without OpenSSL, so a TLS front (:mod:`sessionmem.testing.tls_front`)
terminates TLS before it, as a ``hostssl``-only server would; the certificates are made here
(:mod:`sessionmem.testing.certificates`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from sessionmem.storage.pg_store import TeamUnavailable, open_team_store
from sessionmem.testing.certificates import Authority, issue_server_certificate, make_authority
from sessionmem.testing.postgres import PostgresServer
from sessionmem.testing.postgres_roles import add_password_role, socket_path
from sessionmem.testing.tls_front import TLSFront
from sessionmem.testing.worker_process import start_worker
from tests.test_team_doctor import doctor, doctor_env, team_lines

PASSWORD = "c0rrect-h0rse-battery"


class Secured:
    def __init__(self, front: TLSFront, authority: Authority, stranger: Authority, database: str) -> None:
        self.front, self.authority, self.stranger, self.database = front, authority, stranger, database

    def url(self, sslmode: str, root: Authority | None = None, host: str = "127.0.0.1") -> str:
        query = f"sslmode={sslmode}" + (f"&sslrootcert={root.certificate}" if root else "")
        return f"postgresql://tls_alice:{PASSWORD}@{host}:{self.front.port}/{self.database}?{query}"


@pytest.fixture(scope="module")
def secured(postgres: PostgresServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    """The test PostgreSQL behind TLS only, a role that must give its password, the authority that signed
    the server's certificate, and another one."""
    directory = tmp_path_factory.mktemp("tls")
    url = add_password_role(postgres, role="tls_alice", password=PASSWORD, database="tls_team")
    authority = make_authority(directory, "team-ca")
    stranger = make_authority(directory, "stranger-ca")
    certificate = issue_server_certificate(authority, directory, hosts=("localhost",), addresses=("127.0.0.1",))
    try:
        with TLSFront(socket_path(url), certificate) as front:
            yield Secured(front, authority, stranger, "tls_team")
    finally:
        postgres.drop_database("tls_team")


def store_check(url: str) -> object:
    async def check() -> object:
        async with open_team_store(url, connect_timeout_s=5) as store:
            return await store.check()

    return trio.run(check)


def test_sslmode_require_encrypts_and_verify_full_checks_the_server(secured: Secured) -> None:
    before = secured.front.statistics().handshakes
    for url in (secured.url("require"), secured.url("verify-full", secured.authority),
                secured.url("verify-full", secured.authority, host="localhost")):
        check = store_check(url)
        assert check.pgvector_version.startswith("0.8")  # type: ignore[attr-defined]
    assert secured.front.statistics().handshakes > before  # every one of them over TLS


def test_a_server_the_root_certificate_did_not_sign_is_refused(secured: Secured) -> None:
    """What a machine in the middle would present: a certificate from another authority. libpq refuses it
    before any password is sent; the error says so, and holds no password."""
    with pytest.raises(TeamUnavailable) as refused:
        store_check(secured.url("verify-full", secured.stranger))
    assert "certificate verify failed" in str(refused.value)
    assert PASSWORD not in str(refused.value)
    # The right authority, but the certificate names another host than the one connected to.
    with pytest.raises(TeamUnavailable) as misnamed:
        misnamed_url = secured.url("verify-full", secured.authority, host="db.elsewhere.example")
        store_check(misnamed_url + "&hostaddr=127.0.0.1")  # no name lookup: the address, the name checked
    assert "does not match host name" in str(misnamed.value), misnamed.value


def test_a_server_that_requires_tls_refuses_plain_text(secured: Secured) -> None:
    with pytest.raises(TeamUnavailable) as refused:
        store_check(secured.url("disable"))
    assert "this server accepts TLS connections only" in str(refused.value)
    assert secured.front.statistics().refused_plain >= 1


@pytest.mark.slow
def test_doctor_says_how_the_connection_is_secured_and_why_it_fails(tmp_path: Path, secured: Secured) -> None:
    required = doctor(doctor_env(tmp_path / "a", secured.url("require")))
    assert required.returncode == 0, required.stdout
    assert any(line.startswith(f"[ok] team database tls_alice@127.0.0.1:{secured.front.port}/tls_team: PostgreSQL 18.")
               and "TLS, sslmode=require: the server's certificate is not checked (sslmode=verify-full checks it)"
               in line for line in team_lines(required.stdout)), required.stdout

    verified = doctor(doctor_env(tmp_path / "b", secured.url("verify-full", secured.authority)))
    assert verified.returncode == 0, verified.stdout
    assert any("TLS, sslmode=verify-full, round trip" in line for line in team_lines(verified.stdout)), (
        verified.stdout)

    stranger = doctor(doctor_env(tmp_path / "c", secured.url("verify-full", secured.stranger)))
    assert stranger.returncode == 1, stranger.stdout
    assert any(line.startswith(f"[!!] team database tls_alice@127.0.0.1:{secured.front.port}/tls_team: cannot connect")
               and "certificate verify failed (the server's certificate is not signed by a root certificate this "
                   "machine trusts: check sslrootcert (or ~/.postgresql/root.crt))" in line
               for line in team_lines(stranger.stdout)), stranger.stdout
    for output in (required, verified, stranger):
        assert PASSWORD not in output.stdout + output.stderr


@pytest.mark.slow
def test_a_worker_syncs_over_tls_and_says_why_when_the_server_is_not_the_one_it_trusts(
        tmp_path: Path, secured: Secured) -> None:
    """Real workers: one that trusts the server's authority pushes its memory through TLS; one that trusts
    another authority stores locally, pushes nothing, and its status says why."""
    from tests.test_team_credentials import sessionmem, store_a_session, team_env, team_state

    trusting_env = team_env(secured.url("verify-full", secured.authority), "laptop")
    wary_env = team_env(secured.url("verify-full", secured.stranger), "desktop")
    handshakes = secured.front.statistics().handshakes
    with start_worker(tmp_path / "trusting", env=trusting_env) as trusting, \
            start_worker(tmp_path / "wary", env=wary_env) as wary:
        store_a_session(trusting, "tls-1")
        store_a_session(wary, "tls-2")
        trusting.wait_until(lambda: (lambda t: t if t["connected"] and t["pushed"] and not t["backlog"] else None)(
            team_state(trusting)), timeout=60)
        refused = wary.wait_until(lambda: (lambda t: t if "certificate verify failed" in t["lastError"]
                                           and t["backlog"] > 0 else None)(team_state(wary)), timeout=60)
        assert not refused["connected"] and refused["pushed"] == 0
        status = sessionmem(wary.data_dir, "status", env=wary_env)
        assert "team: not connected (" in status.stdout and "certificate verify failed" in status.stdout, (
            status.stdout)
        assert wary.get("/api/observations/1")["title"]  # stored locally all the same
    assert secured.front.statistics().handshakes > handshakes
    for output in (json.dumps(refused), status.stdout):
        assert PASSWORD not in output
