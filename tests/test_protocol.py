"""The client/worker contract (sessionmem.protocol): each thing defined once and both sides agreeing on it,
and the one delivery policy every client follows."""

from __future__ import annotations

import collections
import dataclasses
import os
import stat
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import msgspec
import pytest

from sessionmem.protocol import client_settings, fastjson, routes
from sessionmem.protocol.client_settings import ClientConfig
from sessionmem.protocol.delivery import NO_LIVE_WORKER, Patience, deliver
from sessionmem.protocol.fields import clean_value
from sessionmem.protocol.limits import FIELD_CAP, MAX_BODY_BYTES
from sessionmem.protocol.requests import encoded_call
from sessionmem.protocol.spool import (
    SpoolFormatError,
    parse_spool_file,
    pending_spool_files,
    reject_spool_file,
    write_spool_file,
)
from sessionmem.protocol.state import STATE_FILE, WorkerState, read_state, remove_state, write_state
from sessionmem.redaction import Redactor
from sessionmem.server.ingest import EdgeCleaner, Ingestor
from sessionmem.settings import ENV, Settings

from .processes import our_worker_on

# -- one definition, both sides ---------------------------------------------------------------


def test_ingest_structs_have_exactly_the_contract_fields() -> None:
    assert set(Ingestor.PATHS) == set(routes.INGEST) == set(routes.BODY_FIELDS)
    for path, kind in Ingestor.PATHS.items():
        assert set(kind.__struct_fields__) == set(routes.BODY_FIELDS[path]), path


def test_every_request_a_hook_builds_uses_only_contract_fields(payloads: list[dict[str, Any]]) -> None:
    strict = {path: msgspec.json.Decoder(msgspec.defstruct(kind.__name__, [
        (f.name, f.type, f.default) for f in msgspec.structs.fields(kind)], forbid_unknown_fields=True, kw_only=True))
        for path, kind in Ingestor.PATHS.items()}
    sent = collections.Counter()
    for payload in payloads:
        call = encoded_call(payload, project="calcproj", key="k")
        if call is None or call[2] is None:
            continue
        _, path, body = call
        strict[path].decode(body)  # raises on a field the worker does not know
        sent[path] += 1
    assert set(sent) == set(routes.INGEST)


def test_each_report_of_a_subagent_is_an_observation_of_its_own(payloads: list[dict[str, Any]]) -> None:
    """A resumed subagent stops again: its new report must not be taken for the first one sent again."""
    from sessionmem.protocol.requests import api_call

    (stop,) = [p for p in payloads if p["hook_event_name"] == "SubagentStop"]
    first = api_call(stop, project="calcproj")
    again = api_call(dict(stop), project="calcproj")
    resumed = api_call({**stop, "last_assistant_message": "Also checked div: it now raises."}, project="calcproj")
    assert first is not None and again is not None and resumed is not None
    assert first[2]["tool_use_id"] == again[2]["tool_use_id"] != resumed[2]["tool_use_id"]
    assert first[2]["tool_use_id"].startswith(f"subagent-{stop['agent_id']}-")
    # Claude Code's own agents (/compact's summarizer, as recorded from 2.1.328) have no type:
    # their report is a recap of the conversation, not work done, and is not stored.
    compaction = {**stop, "agent_type": "", "last_assistant_message": "<analysis>…</analysis><summary>recap"}
    assert api_call(compaction, project="calcproj") is None


@pytest.mark.parametrize("value", [
    # Words shorter than a token: the worker redacts the piece of a long word at a cut (test_redaction).
    {"stdout": "word " * (3 * FIELD_CAP // 5), "stderr": "", "interrupted": False},
    ["line " * 40 for _ in range(2000)],
    {"content": "é" * FIELD_CAP, "nested": [{"deep": "<private>p</private>ok" * 3}]},
    "plain " * 30_000,
])
def test_a_field_cleaned_by_a_hook_is_left_alone_by_the_worker(value: Any) -> None:
    from_hook = clean_value(value, FIELD_CAP)  # the hook's stdlib encoder
    assert EdgeCleaner(FIELD_CAP, Redactor()).value(from_hook) == from_hook  # the worker's pass changes nothing
    assert len(msgspec.json.encode(from_hook)) <= FIELD_CAP + 100
    assert "<private>" not in fastjson.dumps(from_hook)


def test_three_capped_fields_fit_the_body_limit() -> None:
    assert Settings().max_body_bytes == MAX_BODY_BYTES and Settings().tool_response_cap == FIELD_CAP
    payload = {"hook_event_name": "PostToolUseFailure", "session_id": "s", "cwd": "/p", "tool_name": "Bash",
               "tool_input": {"command": "y" * 10_000_000}, "tool_response": "z" * 10_000_000,
               "error": "e" * 10_000_000}
    call = encoded_call(payload, project="p", key="k")
    assert call is not None and call[2] is not None and len(call[2]) < 3 * FIELD_CAP + 4096 < MAX_BODY_BYTES


def test_worker_settings_share_the_clients_defaults_and_names() -> None:
    settings = {f.name: f.default for f in dataclasses.fields(Settings)}
    for key, default in client_settings.DEFAULTS.items():
        assert settings[key] == default, key
    for name, key in client_settings.ENV.items():
        assert ENV[name] == key
    assert ENV[client_settings.DATA_DIR_ENV] == "data_dir"


def test_client_config_reads_file_then_environment_and_survives_nonsense(tmp_path: Path) -> None:
    (tmp_path / "settings.json").write_text('{"port": 4100, "hook_timeout_s": "soon", "unknown": 1}')
    config = ClientConfig({"SESSIONMEM_DATA_DIR": str(tmp_path), "SESSIONMEM_SYSTEM_MESSAGE": "off"})
    assert (config.port, config.hook_timeout_s, config.system_message) == (4100, 2.0, False)
    assert config.problems == ["hook_timeout_s='soon' is invalid; using 2.0"]
    (tmp_path / "settings.json").write_text("{broken")
    assert ClientConfig({"SESSIONMEM_DATA_DIR": str(tmp_path)}).problems[0].startswith("settings.json unreadable")


def test_spool_files_round_trip_and_bad_ones_are_set_aside(tmp_path: Path) -> None:
    data_dir = str(tmp_path)
    assert write_spool_file(data_dir, routes.OBSERVATIONS, b'{"a": 1}') == (True, "")
    assert write_spool_file(data_dir, routes.INIT, b'{"b": 2}') == (True, "")
    first, second = pending_spool_files(data_dir)
    assert parse_spool_file(Path(first).read_bytes(), routes.INGEST) == (routes.OBSERVATIONS, b'{"a": 1}')
    assert parse_spool_file(Path(second).read_bytes(), routes.INGEST)[0] == routes.INIT
    for raw in (b"/debug\n{}", b"no newline at all", b"\xff\xfe\n{}"):
        with pytest.raises(SpoolFormatError):
            parse_spool_file(raw, routes.INGEST)
    moved = reject_spool_file(first, "not wanted")
    assert pending_spool_files(data_dir) == [second]
    assert Path(moved + ".reason").read_text() == "not wanted\n"


def test_state_file_is_trusted_only_while_its_process_lives(tmp_path: Path) -> None:
    data_dir = str(tmp_path)
    assert read_state(data_dir) is None
    write_state(data_dir, WorkerState(os.getpid(), "127.0.0.1", 4321, 1.0, "t"))
    state = read_state(data_dir)
    assert state is not None and (state.pid, state.port) == (os.getpid(), 4321)
    remove_state(data_dir, os.getpid() + 1)  # someone else's: kept
    assert read_state(data_dir) is not None
    write_state(data_dir, WorkerState(2**22 + 7, "127.0.0.1", 1, 1.0, "t"))  # no such process
    assert read_state(data_dir) is None
    remove_state(data_dir, 2**22 + 7)
    assert not (tmp_path / "worker.json").exists()


# -- the delivery policy --------------------------------------------------------------------


class ScriptedWorker:
    """An HTTP server answering each request with the next scripted (status, headers) pair."""

    def __init__(self, script: list[tuple[int, dict[str, str]]]) -> None:
        self.script = collections.deque(script)
        self.seen: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def _answer(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                owner.seen.append(f"{self.command} {self.path}")
                status, headers = owner.script.popleft() if owner.script else (202, {})
                body = b'{"status": "accepted"}' if status < 300 else b'{"error": "scripted"}'
                self.send_response(status)
                for name, value in {**headers, "Content-Length": str(len(body))}.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer  # noqa: N815 (stdlib names)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return self.server.server_address[1]


@pytest.fixture
def scripted(tmp_path: Path) -> Iterator[Any]:
    servers: list[ScriptedWorker] = []

    def start(*script: tuple[int, dict[str, str]], ours: bool = True) -> tuple[ScriptedWorker, ClientConfig]:
        """A server answering ``script`` in turn; with ``ours``, named in worker.json by a live process of this
        user's (the test's), as a worker of ours is: a client sends nothing to a port no worker of its holds."""
        server = ScriptedWorker(list(script))
        servers.append(server)
        (tmp_path / STATE_FILE).unlink(missing_ok=True)
        if ours:
            our_worker_on(tmp_path, server.port)
        return server, ClientConfig({"SESSIONMEM_DATA_DIR": str(tmp_path), "SESSIONMEM_PORT": str(server.port)})

    yield start
    for server in servers:
        server.server.shutdown()


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


BODY = b'{"claudeSessionId": "s", "tool_name": "Read", "idempotencyKey": "k"}'


def send(config: ClientConfig, patience: Patience, time: FakeTime, *, method: str = "POST",
         path: str = routes.OBSERVATIONS) -> Any:
    return deliver(config, method, path, BODY if method == "POST" else None, patience=patience,
                   sleep=time.sleep, clock=time.clock)


def test_nothing_is_sent_to_a_port_no_worker_of_ours_holds(scripted: Any) -> None:
    """With no live worker in worker.json (the worker down), whatever listens on its port may be another user's:
    a hook spools, a patient client gives up, and neither sends it a byte (the token least of all)."""
    server, config = scripted((202, {}), (202, {}), ours=False)
    assert send(config, Patience.hook(config), FakeTime()).status == "spooled"
    outcome = send(config, Patience.patient(), FakeTime())
    assert outcome.status == "spooled" and outcome.detail == NO_LIVE_WORKER
    assert server.seen == []


def test_a_503_is_retried_after_its_retry_after_within_the_budget(scripted: Any) -> None:
    server, config = scripted((503, {"Retry-After": "1"}), (202, {}))
    time = FakeTime()
    outcome = send(config, Patience.hook(config), time)
    assert outcome.status == "delivered" and outcome.attempts == 2 and time.slept == [1.0]
    assert len(server.seen) == 2 and pending_spool_files(config.data_dir) == []


def test_a_503_past_the_budget_is_spooled_at_once(scripted: Any) -> None:
    _, config = scripted((503, {"Retry-After": "5"}))
    time = FakeTime()
    outcome = send(config, Patience.hook(config), time)  # 5 s > the hook's 2 s
    assert outcome.status == "spooled" and time.slept == [] and "HTTP 503" in outcome.detail
    (spooled,) = pending_spool_files(config.data_dir)
    assert parse_spool_file(Path(spooled).read_bytes(), routes.INGEST) == (routes.OBSERVATIONS, BODY)


def test_a_5xx_is_spooled_by_a_hook_and_retried_by_a_patient_client(scripted: Any) -> None:
    _, config = scripted((500, {}))
    assert send(config, Patience.hook(config), FakeTime()).status == "spooled"
    _, config = scripted((500, {}), (502, {}), (202, {}))
    time = FakeTime()
    outcome = send(config, Patience.patient(), time)
    assert outcome.status == "delivered" and time.slept == [0.25, 0.5]


def test_a_503_without_retry_after_is_a_failure_a_read_reports_at_once(scripted: Any) -> None:
    # Not back-pressure but something the worker needs that is away (the team database): a command
    # does not wait and ask again; it gets the worker's answer to report.
    _, config = scripted((503, {}))
    time = FakeTime()
    outcome = send(config, Patience(120.0, 120.0, retry_failures=False), time, method="GET", path=routes.SEARCH)
    assert outcome.status == "unavailable" and time.slept == []
    assert outcome.reply is not None and outcome.reply.status == 503
    _, config = scripted((503, {}), (202, {}))
    time = FakeTime()
    assert send(config, Patience.patient(), time).status == "delivered" and time.slept == [0.25]


def test_a_4xx_is_refused_and_not_spooled(scripted: Any) -> None:
    _, config = scripted((400, {}))
    outcome = send(config, Patience.patient(), FakeTime())
    assert outcome.status == "refused" and outcome.reply is not None and outcome.reply.status == 400
    assert pending_spool_files(config.data_dir) == []


def test_nothing_listening_spools_ingest_and_fails_reads(tmp_path: Path) -> None:
    config = ClientConfig({"SESSIONMEM_DATA_DIR": str(tmp_path), "SESSIONMEM_PORT": "9"})
    assert send(config, Patience.hook(config), FakeTime()).status == "spooled"
    time = FakeTime()
    outcome = send(config, Patience.patient(2.0), time, method="GET", path=routes.HEALTH)
    assert outcome.status == "unavailable" and sum(time.slept) < 2.0 and len(time.slept) >= 2
    assert len(pending_spool_files(config.data_dir)) == 1  # the GET was not spooled


def test_a_hook_queues_behind_spooled_events_and_a_patient_client_does_not(scripted: Any) -> None:
    server, config = scripted()
    # The session's init was spooled while its worker started; the worker is up now.
    write_spool_file(config.data_dir, routes.INIT, b'{"claudeSessionId": "s"}')
    outcome = send(config, Patience.hook(config), FakeTime())
    assert outcome.status == "spooled" and outcome.detail == "behind spooled events" and server.seen == []
    first, second = pending_spool_files(config.data_dir)
    assert parse_spool_file(Path(first).read_bytes(), routes.INGEST)[0] == routes.INIT
    assert parse_spool_file(Path(second).read_bytes(), routes.INGEST) == (routes.OBSERVATIONS, BODY)

    assert send(config, Patience.patient(), FakeTime()).status == "delivered"  # backfill: past sessions
    assert send(config, Patience.hook(config), FakeTime(), method="GET", path=routes.HEALTH).delivered
    for file in pending_spool_files(config.data_dir):
        os.unlink(file)
    assert send(config, Patience.hook(config), FakeTime()).status == "delivered"  # the spool drained
    assert len(server.seen) == 3


def test_a_full_spool_loses_the_event_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sessionmem.protocol.spool as spool

    monkeypatch.setattr(spool, "MAX_FILES", 0)
    config = ClientConfig({"SESSIONMEM_DATA_DIR": str(tmp_path), "SESSIONMEM_PORT": "9"})
    outcome = send(config, Patience.hook(config), FakeTime())
    assert outcome.status == "lost" and "spool full" in outcome.detail


@pytest.mark.parametrize(("cwd", "project"), [
    ("/home/me/projects/spotter-worktrees/spotter-0rt", "spotter"),  # side by side (seen in the corpus)
    ("/home/me/projects/spotter-worktrees/spotter-fum/assets", "spotter"),  # a directory below one
    ("C:\\Users\\Mischa\\.claude-worktrees\\M-Claude\\unruffled-mcclintock", "M-Claude"),  # Claude Desktop
    ("C:\\Users\\Mischa\\Documents\\M-Claude", "M-Claude"),  # a Windows path read on Linux
    ("/gone/repo/.claude/worktrees/agent-1/src", "repo"),  # Claude Code --worktree
    ("/gone/repo/.worktrees/feature", "repo"),
    ("/Users/me/conductor/workspaces/shop/lisbon", "shop"),
    ("/gone/plain/project", "project"),  # nothing to go by: the directory's name
    ("/gone/foo-worktrees", "foo-worktrees"),  # the container itself is no worktree
    ("C:\\", "unknown"),
    ("", "unknown"),
])
def test_worktrees_that_are_gone_still_name_their_repository(cwd: str, project: str) -> None:
    from sessionmem.protocol.project import project_of

    assert project_of(cwd) == project


def test_a_spool_file_is_on_the_disk_under_its_name_before_the_hook_says_spooled(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The spooled event is nowhere else: its bytes are synced before the rename, and the directory after
    it, or a machine that crashes right after could come back with an empty file or none."""
    from sessionmem.protocol import oskit
    from sessionmem.protocol.spool import pending_spool_files, spool_dir, write_spool_file

    steps: list[str] = []
    real_sync, real_replace = oskit.sync_file, os.replace

    def sync_file(fd: int) -> None:  # fsync, or F_FULLFSYNC on macOS
        steps.append("sync directory" if stat.S_ISDIR(os.fstat(fd).st_mode) else "sync file")
        real_sync(fd)

    def replace(source: str, target: str) -> None:
        steps.append("rename")
        real_replace(source, target)

    monkeypatch.setattr(oskit, "sync_file", sync_file)
    monkeypatch.setattr(os, "replace", replace)
    assert write_spool_file(str(tmp_path), "/api/sessions/observations", b"{}") == (True, "")
    assert steps == ["sync file", "rename", "sync directory"]
    assert [Path(p).parent for p in pending_spool_files(str(tmp_path))] == [Path(spool_dir(str(tmp_path)))]


def test_a_spool_file_the_disk_cannot_hold_is_not_left_half_written(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A nearly full disk takes part of a write: the hook must say the event was not spooled, and leave
    no file (the worker would reject a truncated one: the event lost while the hook said "spooled")."""
    from sessionmem.protocol import datadir
    from sessionmem.protocol.spool import pending_spool_files, spool_dir, write_spool_file

    real_write = os.write
    room = [20]

    def nearly_full(fd: int, data: bytes) -> int:
        if not room[0]:
            raise OSError(28, "No space left on device")
        taken = min(room[0], len(data))
        room[0] -= taken
        return real_write(fd, bytes(data[:taken]))

    monkeypatch.setattr(datadir.os, "write", nearly_full)
    saved, reason = write_spool_file(str(tmp_path), "/api/sessions/observations", b'{"claudeSessionId": "s"}' * 10)
    assert not saved and "No space left" in reason
    assert pending_spool_files(str(tmp_path)) == [] and os.listdir(spool_dir(str(tmp_path))) == []
    room[0] = 10_000
    assert write_spool_file(str(tmp_path), "/api/sessions/observations", b"{}") == (True, "")
    (written,) = pending_spool_files(str(tmp_path))
    assert Path(written).read_bytes() == b"/api/sessions/observations\n{}"

