"""TLS to the team database, with libpq's own checks: a URL that says nothing gets ``sslmode=verify-full``
against the system's root certificates and SCRAM, so a server without TLS, with a certificate no trusted
authority signed, or asking the password in clear or as md5 is refused; ``sslmode=require`` encrypts,
``verify-full`` also checks the server's certificate against ``sslrootcert``, and a certificate signed by another
authority is refused with a clear error, by the team store and by ``sessionmem doctor``. Every test names its
TLS choice in the URL, or tests the defaults.

The test PostgreSQL is built without OpenSSL, so a TLS front (:mod:`sessionmem.testing.tls_front`)
terminates TLS before it, as a ``hostssl``-only server would; the certificates are made here
(:mod:`sessionmem.testing.certificates`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import trio

from sessionmem.storage.pg.connections import connection_url, transport
from sessionmem.storage.pg.store import TeamUnavailable, open_team_store
from sessionmem.testing.certificates import Authority, issue_server_certificate, make_authority
from sessionmem.testing.postgres import PostgresServer
from sessionmem.testing.postgres_roles import add_password_role, socket_path
from sessionmem.testing.tls_front import TLSFront
from sessionmem.testing.worker_process import start_worker
from tests.test_team_doctor import doctor, doctor_env, team_lines

PASSWORD = "c0rrect-h0rse-battery"


class Secured:
    def __init__(self, front: TLSFront, plain: TLSFront, authority: Authority, stranger: Authority,
                 database: str) -> None:
        self.front, self.plain, self.authority, self.stranger, self.database = (front, plain, authority, stranger,
                                                                               database)

    def url(self, sslmode: str | None, root: Authority | None = None, host: str = "127.0.0.1", *,
            role: str = "tls_alice", front: TLSFront | None = None, extra: str = "") -> str:
        """The database's URL over TCP; ``sslmode`` None: the URL names none (sessionmem's defaults apply)."""
        query = "&".join(filter(None, (sslmode and f"sslmode={sslmode}", root and f"sslrootcert={root.certificate}",
                                       extra)))
        port = (front or self.front).port
        return f"postgresql://{role}:{PASSWORD}@{host}:{port}/{self.database}?{query}"


@pytest.fixture(scope="module")
def secured(postgres: PostgresServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    """The test PostgreSQL behind TLS only, a role that must give its password with SCRAM and one whose
    password the server asks for in clear, the authority that signed the server's certificate, and another
    one; and the same server on TCP without TLS (``plain``), as a machine in the middle that strips it."""
    directory = tmp_path_factory.mktemp("tls")
    url = add_password_role(postgres, role="tls_alice", password=PASSWORD, database="tls_team")
    with psycopg.connect(postgres.url, autocommit=True) as connection:
        connection.execute(f"CREATE ROLE tls_old LOGIN PASSWORD '{PASSWORD}'")
        connection.execute("GRANT ALL ON DATABASE tls_team TO tls_old")
    hba = postgres.directory / "pg_hba.conf"
    hba.write_text("local all tls_old password\n" + hba.read_text())
    with psycopg.connect(postgres.url, autocommit=True) as connection:
        connection.execute("SELECT pg_reload_conf()")
    authority = make_authority(directory, "team-ca")
    stranger = make_authority(directory, "stranger-ca")
    certificate = issue_server_certificate(authority, directory, hosts=("localhost",), addresses=("127.0.0.1",))
    try:
        with TLSFront(socket_path(url), certificate) as front, TLSFront(socket_path(url), None) as plain:
            yield Secured(front, plain, authority, stranger, "tls_team")
    finally:
        postgres.drop_database("tls_team")
        with psycopg.connect(postgres.url, autocommit=True) as connection:
            connection.execute("DROP ROLE IF EXISTS tls_old")


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


def test_by_default_a_server_without_tls_is_refused_not_used_in_plain_text(secured: Secured) -> None:
    """libpq's own default, sslmode=prefer, goes on in plain text when the server (or a machine in the middle
    that strips TLS) offers none; the team database's default refuses. Weakened in the URL, it connects,
    and is warned about."""
    with pytest.raises(TeamUnavailable) as refused:
        store_check(secured.url(None, front=secured.plain))
    assert "server does not support SSL" in str(refused.value), refused.value
    assert secured.plain.statistics().plain == 0  # nothing went on in plain text: no password, no query
    weakened = secured.url("prefer", front=secured.plain)
    store_check(weakened)
    assert secured.plain.statistics().plain >= 1
    assert [line.split(":")[0] for line in transport(weakened).weaker] == ["sslmode=prefer"]
    assert transport(secured.url(None)).weaker == [] and transport(secured.url(None)).sslmode == "verify-full"


def test_by_default_a_certificate_no_system_authority_signed_is_refused(secured: Secured) -> None:
    """The test authority is in no system store: with the defaults (verify-full, sslrootcert=system) the
    server it signed is refused, as one a machine in the middle presents would be."""
    with pytest.raises(TeamUnavailable) as refused:
        store_check(secured.url(None))
    assert "certificate verify failed" in str(refused.value), refused.value
    assert PASSWORD not in str(refused.value)
    store_check(secured.url(None, secured.authority))  # its own authority named: verify-full, and it connects


def test_by_default_a_server_asking_the_password_in_clear_is_refused(secured: Secured) -> None:
    """SCRAM is required: a server (or one posing as it) that asks for the password in clear never gets it."""
    with pytest.raises(TeamUnavailable) as refused:
        store_check(secured.url(None, secured.authority, role="tls_old"))
    assert "server requested a cleartext password" in str(refused.value), refused.value
    assert PASSWORD not in str(refused.value)
    allowed = secured.url(None, secured.authority, role="tls_old", extra="require_auth=password")
    psycopg.connect(connection_url(allowed, connect_timeout_s=5)).close()  # weakened knowingly in the URL
    assert [line.split(":")[0] for line in transport(allowed).weaker] == ["require_auth=password"]


def test_a_server_that_requires_tls_refuses_plain_text(secured: Secured) -> None:
    with pytest.raises(TeamUnavailable) as refused:
        store_check(secured.url("disable"))
    assert "this server accepts TLS connections only" in str(refused.value)
    assert secured.front.statistics().refused_plain >= 1


@pytest.mark.slow
def test_doctor_says_how_the_connection_is_secured_and_why_it_fails(tmp_path: Path, secured: Secured) -> None:
    required = doctor(doctor_env(tmp_path / "a", secured.url("require")))
    assert required.returncode == 1, required.stdout  # weaker than the default: a problem, said why
    assert any(line.startswith(f"[!!] team database tls_alice@127.0.0.1:{secured.front.port}/tls_team: database_url "
                               "weakens the default transport") and "sslmode=require: encrypted, but the server's "
               "certificate is not checked" in line for line in team_lines(required.stdout)), required.stdout
    assert any(line.startswith(f"[ok] team database tls_alice@127.0.0.1:{secured.front.port}/tls_team: PostgreSQL 18.")
               and "TLS, sslmode=require: the server's certificate is not checked (sslmode=verify-full checks it)"
               in line for line in team_lines(required.stdout)), required.stdout

    for name, sslmode in (("b", "verify-full"), ("d", None)):  # named, or the default
        verified = doctor(doctor_env(tmp_path / name, secured.url(sslmode, secured.authority)))
        assert verified.returncode == 0, verified.stdout
        assert any("TLS, sslmode=verify-full, round trip" in line for line in team_lines(verified.stdout)), (
            verified.stdout)
    plain = doctor(doctor_env(tmp_path / "e", secured.url(None, front=secured.plain)))
    assert plain.returncode == 1 and any(
        "cannot connect" in line and "server does not support SSL" in line and "team connections require by default"
        in line for line in team_lines(plain.stdout)), plain.stdout

    stranger = doctor(doctor_env(tmp_path / "c", secured.url("verify-full", secured.stranger)))
    assert stranger.returncode == 1, stranger.stdout
    assert any(line.startswith(f"[!!] team database tls_alice@127.0.0.1:{secured.front.port}/tls_team: cannot connect")
               and "certificate verify failed (the server's certificate is not signed by a root certificate this "
                   "machine trusts: check sslrootcert (or ~/.postgresql/root.crt))" in line
               for line in team_lines(stranger.stdout)), stranger.stdout
    for output in (required, verified, stranger, plain):
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
        synced = trusting.wait_until(lambda: (lambda t: t if t["connected"] and t["pushed"] and not t["backlog"]
                                              else None)(team_state(trusting)), timeout=60)
        assert synced["transport"] == f"TLS (sslmode=verify-full, {secured.authority.certificate}), SCRAM required"
        assert synced["transportWarnings"] == []
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
