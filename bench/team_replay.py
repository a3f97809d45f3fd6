"""Three workers sharing one team database (PostgreSQL), replaying the corpus at once.

    .venv/bin/python bench/team_replay.py [--corpus DIR] [--work DIR] [--kill] [--pg-restart] [--out FILE.json]
    .venv/bin/python bench/team_replay.py --database-url URL --corpus tests/fixtures/transcripts --kill   # the test

Three real worker processes (``sessionmem serve``, the offline compressor), each with its own
data dir, port and machine name, all with ``SESSIONMEM_DATABASE_URL`` set to one database and
every project shared (``SESSIONMEM_SHARE_PROJECTS=*``), as three machines of one team. The
corpus's sessions are dealt to the workers in turn (a session is one machine's); each worker
is sent its sessions ``--sessions`` at a time, each session's events in order on a keep-alive
connection, every event with its idempotency key (the one ``sessionmem backfill`` sends), as
fast as they are answered. A refused connection or a 503 is retried every 0.1 s with the same
key, as a hook's spool would deliver it later: an event answered ``accepted`` or ``duplicate``
counts as accepted once.

Beside the load, **probes**: every ``--probe-interval`` seconds one worker (in turn) is sent a
tool use holding a word of its own; the probe notes when that worker's full-text search first
finds it (stored there), then polls the other two workers' search until each finds it: the
**delay until another machine can find a new observation**.

Faults, when asked: ``--kill`` sends SIGKILL to the second worker once half the events are
sent, waits ``--down-seconds`` and starts it again on the same data dir and port;
``--pg-restart`` stops PostgreSQL once three quarters are sent (fast shutdown: connections
dropped) and starts it again after ``--down-seconds``.

After the replay, the run waits until every worker is idle and nothing moves any more, then
counts, for every accepted tool use (and probe): its rows in PostgreSQL's observations (by
Claude session id and tool use id) and in each worker's SQLite. Lost: none in a place;
duplicated: more than one. Exit status 1 when anything is lost or duplicated.

Resource handling:
    Workers and the PostgreSQL server this script started are stopped on the way out, also on
    an error (their data dirs stay in ``--work``).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import apsw
import psycopg
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

import loadgen  # noqa: E402
from json_out import write_json  # noqa: E402
from scenarios import TOOL_STAGES, percentiles  # noqa: E402

from sessionmem.protocol import routes  # noqa: E402
from sessionmem.protocol.project import project_of  # noqa: E402
from sessionmem.protocol.requests import encoded_call  # noqa: E402
from sessionmem.replay.convert import ConversionStats, ReplaySession, convert, transcript_files  # noqa: E402
from sessionmem.testing.worker_process import WorkerProcess, start_worker  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CORPUS = REPO.parent / "shared" / "corpus" / "transcripts"
WORKERS = 3
PROBE_PROJECT = "team-probe"
RETRY_S = 0.1
POLL_S = 0.05


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Machine:
    """One worker process of the team: its data dir, fixed port and settings; restartable."""

    def __init__(self, index: int, work: Path, database_url: str, embedder: str) -> None:
        self.index = index
        self.name = f"machine-{index}"
        self.data_dir = work / self.name
        self.port = free_port()
        self.env = {"SESSIONMEM_DATABASE_URL": database_url, "SESSIONMEM_SHARE_PROJECTS": "*",
                    "SESSIONMEM_MACHINE_NAME": self.name, "SESSIONMEM_USER_NAME": "bench",
                    "SESSIONMEM_COMPRESSOR": "offline", "SESSIONMEM_EMBEDDER": embedder,
                    "SESSIONMEM_PORT": str(self.port)}
        self.worker: WorkerProcess | None = None
        self.kills = 0

    def start(self) -> None:
        self.worker = start_worker(self.data_dir, env=self.env, timeout=120)

    def kill(self) -> None:
        assert self.worker is not None
        self.worker.kill()
        self.kills += 1

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.stop()

    @property
    def token(self) -> str:
        assert self.worker is not None
        return self.worker.token or ""


class Replay:
    """What the senders accepted, and the probes' delays."""

    def __init__(self, machines: list[Machine], total_events: int) -> None:
        self.machines = machines
        self.total_events = total_events
        self.sent = 0
        self.accepted: set[tuple[str, str]] = set()
        self.retries = 0
        self.statuses: dict[str, int] = {}
        self.delays_ms: list[float] = []
        self.probes: list[dict[str, Any]] = []
        self.faults: list[dict[str, Any]] = []
        self.done = trio.Event()

    async def send(self, machine: Machine, stage: str, payload: dict[str, Any], key: str, project: str,
                   holder: list[loadgen.Connection | None]) -> None:
        """One event, until the worker answers it (refused, reset or 503: again, same key)."""
        request = encoded_call(payload, project=project, key=key)
        if request is None:
            return
        method, path, body = request
        while True:
            try:
                if holder[0] is None:
                    holder[0] = await loadgen.Connection.open("127.0.0.1", machine.port)
                raw = loadgen.encode_post("127.0.0.1", machine.port, path, body, machine.token) if body is not None \
                    else loadgen.encode_get("127.0.0.1", machine.port, path, machine.token)
                status, reply = await holder[0].roundtrip(raw)
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError, AssertionError):
                await self._drop(holder)
                self.retries += 1
                await trio.sleep(RETRY_S)
                continue
            if status == 503:
                self.retries += 1
                await trio.sleep(RETRY_S)
                continue
            break
        answer = json.loads(reply) if reply and reply[:1] == b"{" else {}
        outcome = str(answer.get("status", status))
        self.statuses[outcome] = self.statuses.get(outcome, 0) + 1
        if stage in TOOL_STAGES and status == 202 and outcome in ("accepted", "duplicate"):
            self.accepted.add((payload["session_id"], payload["tool_use_id"]))

    @staticmethod
    async def _drop(holder: list[loadgen.Connection | None]) -> None:
        if holder[0] is not None:
            connection, holder[0] = holder[0], None
            try:
                await connection.aclose()
            except Exception:  # a connection the dead worker left half open: nothing to save
                pass

    async def session(self, machine: Machine, session: ReplaySession) -> None:
        project = project_of(session.cwd)
        holder: list[loadgen.Connection | None] = [None]
        try:
            for event in session.events:
                await self.send(machine, event.stage, event.payload, event.key, project, holder)
                self.sent += 1
        finally:
            await self._drop(holder)


async def _search_finds(machine: Machine, word: str) -> bool:
    path = routes.SEARCH + "?" + urllib.parse.urlencode({"q": word, "mode": "fts", "project": PROBE_PROJECT,
                                                         "limit": 5})
    try:
        connection = await loadgen.Connection.open("127.0.0.1", machine.port)
    except OSError:
        return False
    try:
        status, body = await connection.roundtrip(loadgen.encode_get("127.0.0.1", machine.port, path, machine.token))
    except (OSError, trio.BrokenResourceError, ConnectionError):
        return False
    finally:
        try:
            await connection.aclose()
        except Exception:
            pass
    return status == 200 and any(word in json.dumps(hit) for hit in json.loads(body)["results"])


def probe_payload(n: int, word: str) -> dict[str, Any]:
    return {"session_id": "team-probe-session", "cwd": f"/synthetic/{PROBE_PROJECT}", "hook_event_name": "PostToolUse",
            "tool_name": "Bash", "tool_use_id": f"probe-{n}",
            "tool_input": {"command": f"grep -rn {word} src/", "description": f"look for {word}"},
            "tool_response": {"stdout": f"src/probe.py:1: {word} = True\n", "stderr": "", "interrupted": False}}


async def probes(replay: Replay, interval: float, timeout: float) -> None:
    """A probe every ``interval`` s until the replay is done: stored on one, found by the others (ms)."""
    n = 0
    prompt = {"session_id": "team-probe-session", "cwd": f"/synthetic/{PROBE_PROJECT}",
              "hook_event_name": "UserPromptSubmit", "prompt": "probe the team database's delay"}
    async with trio.open_nursery() as nursery:
        while not replay.done.is_set():
            origin = replay.machines[n % len(replay.machines)]
            if n < len(replay.machines):  # each machine's probe session starts with a prompt
                await replay.send(origin, "UserPromptSubmit", prompt, f"probe-prompt-{n}", PROBE_PROJECT, [None])
            word = f"zqprobe{n}x{os.getpid()}"
            nursery.start_soon(_one_probe, replay, origin, n, word, timeout)
            n += 1
            with trio.move_on_after(interval):
                await replay.done.wait()


async def _one_probe(replay: Replay, origin: Machine, n: int, word: str, timeout: float) -> None:
    record: dict[str, Any] = {"n": n, "origin": origin.name}
    replay.probes.append(record)
    holder: list[loadgen.Connection | None] = [None]
    await replay.send(origin, "PostToolUse", probe_payload(n, word), f"probe-{n}", PROBE_PROJECT, holder)
    await Replay._drop(holder)
    deadline = trio.current_time() + timeout
    while not await _search_finds(origin, word):
        if trio.current_time() > deadline:
            record["stored"] = False
            return
        await trio.sleep(POLL_S)
    stored = trio.current_time()
    record["stored_after_ms"] = None
    others = [m for m in replay.machines if m is not origin]

    async def found_by(machine: Machine) -> None:
        while not await _search_finds(machine, word):
            if trio.current_time() > deadline:
                record.setdefault("not_found_by", []).append(machine.name)
                return
            await trio.sleep(POLL_S)
        delay = (trio.current_time() - stored) * 1000
        record[machine.name] = round(delay, 1)
        replay.delays_ms.append(delay)

    async with trio.open_nursery() as nursery:
        for machine in others:
            nursery.start_soon(found_by, machine)


async def run_replay(machines: list[Machine], sessions: list[ReplaySession], *, concurrency: int, kill: bool,
                     pg_restart: Any, down_seconds: float, probe_interval: float, probe_timeout: float) -> Replay:
    total = sum(len(s.events) for s in sessions)
    replay = Replay(machines, total)
    queues = [list(reversed(sessions[i::len(machines)])) for i in range(len(machines))]

    async def runner(machine: Machine, queue: list[ReplaySession]) -> None:
        while queue:
            await replay.session(machine, queue.pop())

    async def faults() -> None:
        if kill:
            while replay.sent < total // 2:
                await trio.sleep(0.05)
            victim = machines[1]
            await trio.to_thread.run_sync(victim.kill)
            replay.faults.append({"fault": "SIGKILL", "machine": victim.name, "at_event": replay.sent})
            await trio.sleep(down_seconds)
            await trio.to_thread.run_sync(victim.start)
            replay.faults[-1]["restarted_at_event"] = replay.sent
        if pg_restart is not None:
            while replay.sent < total * 3 // 4:
                await trio.sleep(0.05)
            await trio.to_thread.run_sync(pg_restart.stop)
            replay.faults.append({"fault": "PostgreSQL stopped", "at_event": replay.sent})
            await trio.sleep(down_seconds)
            await trio.to_thread.run_sync(pg_restart.start)
            replay.faults[-1]["restarted_at_event"] = replay.sent

    started = time.monotonic()
    async with trio.open_nursery() as outer:
        outer.start_soon(probes, replay, probe_interval, probe_timeout)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(faults)
            for machine, queue in zip(machines, queues):
                for _ in range(concurrency):
                    nursery.start_soon(runner, machine, queue)
        replay.send_seconds = time.monotonic() - started  # type: ignore[attr-defined]
        replay.done.set()
    return replay


# -- counting -----------------------------------------------------------------------------------------


def sqlite_rows(machine: Machine) -> dict[tuple[str, str], int]:
    connection = apsw.Connection(str(machine.data_dir / "sessionmem.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows = connection.execute(
            "SELECT s.claude_session_id, o.tool_use_id, count(*) FROM observations o"
            " JOIN sessions s ON s.id = o.session_db_id GROUP BY 1, 2").fetchall()
    finally:
        connection.close()
    return {(a, b): n for a, b, n in rows}


def postgres_rows(url: str) -> dict[tuple[str, str], int]:
    """(Claude session id, tool use id) -> rows in the team database's observations."""
    import team_schema

    with psycopg.connect(url, connect_timeout=10) as connection:
        rows = connection.execute(team_schema.OBSERVATION_KEYS_SQL).fetchall()
    return {(a, b): n for a, b, n in rows}


def tally(expected: set[tuple[str, str]], rows: dict[tuple[str, str], int]) -> dict[str, Any]:
    lost = sorted(expected - set(rows))
    return {"rows": sum(rows.values()), "lost": len(lost), "lost_examples": lost[:5],
            "duplicated": sum(n - 1 for n in rows.values() if n > 1),
            "unexpected": len(set(rows) - expected)}


def settle(machines: list[Machine], url: str, expected: set[tuple[str, str]], timeout: float) -> dict[str, Any]:
    """Wait until PostgreSQL and every worker hold every expected row (or nothing moved for a while)."""
    started = time.monotonic()
    for machine in machines:
        assert machine.worker is not None
        machine.worker.wait_idle(timeout=timeout)
    last: Any = None
    still_since = time.monotonic()
    while True:
        places = {"postgres": tally(expected, postgres_rows(url))}
        places.update({m.name: tally(expected, sqlite_rows(m)) for m in machines})
        if all(place["lost"] == 0 for place in places.values()):
            break
        shape = json.dumps(places, sort_keys=True)
        if shape != last:
            last, still_since = shape, time.monotonic()
        if time.monotonic() - still_since > 60 or time.monotonic() - started > timeout:
            break
        time.sleep(0.5)
    places["settle_seconds"] = round(time.monotonic() - started, 1)  # type: ignore[assignment]
    return places


# -- main -------------------------------------------------------------------------------------------------


class PgHandle:
    """The bench's own PostgreSQL (stop/start for --pg-restart)."""

    def __init__(self, pgdata: Path) -> None:
        self.pgdata = pgdata
        self.server: Any = None

    def start(self) -> None:
        import pgserver

        self.server = pgserver.get_server(self.pgdata, cleanup_mode="stop")

    def stop(self) -> None:
        if self.server is not None:
            self.server.cleanup()
            self.server = None

    def url(self, database: str) -> str:
        return str(self.server.get_uri(database))


@contextmanager
def team_database(work: Path, given: str | None) -> Iterator[tuple[str, PgHandle | None]]:
    if given:
        yield given, None
        return
    handle = PgHandle(work / "pgdata")
    handle.start()
    try:
        with psycopg.connect(handle.url("postgres"), autocommit=True) as connection:
            connection.execute("DROP DATABASE IF EXISTS team_replay")
            connection.execute("CREATE DATABASE team_replay")
        yield handle.url("team_replay"), handle
    finally:
        handle.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--work", type=Path, help="data dirs of the workers (and PostgreSQL's); default: temporary")
    parser.add_argument("--database-url", help="use this database instead of starting PostgreSQL (no --pg-restart)")
    parser.add_argument("--limit", type=int, help="the first N sessions only")
    parser.add_argument("--sessions", type=int, default=2, help="sessions at a time per worker")
    parser.add_argument("--kill", action="store_true", help="SIGKILL the second worker halfway, then restart it")
    parser.add_argument("--pg-restart", action="store_true", help="stop PostgreSQL at three quarters, then start it")
    parser.add_argument("--down-seconds", type=float, default=3.0)
    parser.add_argument("--probe-interval", type=float, default=1.0)
    parser.add_argument("--probe-timeout", type=float, default=120.0,
                        help="a probe not found by every other worker by then counts as not found")
    parser.add_argument("--embedder", default="none", help="the workers' SESSIONMEM_EMBEDDER (default none)")
    parser.add_argument("--settle-timeout", type=float, default=600.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    stats = ConversionStats()
    sessions = sorted(convert(transcript_files(args.corpus), stats), key=lambda s: s.session_id)[: args.limit]
    if not sessions:
        raise SystemExit(f"no sessions in {args.corpus}: give --corpus")
    result: dict[str, Any] = {"meta": {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "command": " ".join(sys.argv),
                                       "cores": os.cpu_count(), "load_average_at_start": os.getloadavg()},
                              "sessions": len(sessions), "events": sum(len(s.events) for s in sessions),
                              "tool_uses": sum(s.tool_uses for s in sessions)}
    with tempfile.TemporaryDirectory(prefix="sessionmem-team-") as temporary, ExitStack() as stack:
        work = args.work or Path(temporary)
        work.mkdir(parents=True, exist_ok=True)
        url, pg = stack.enter_context(team_database(work, args.database_url))
        machines = [Machine(i, work, url, args.embedder) for i in range(WORKERS)]
        for machine in machines:
            stack.callback(machine.stop)
            machine.start()
        replay = trio.run(lambda: run_replay(machines, sessions, concurrency=args.sessions, kill=args.kill,
                                             pg_restart=pg if args.pg_restart else None,
                                             down_seconds=args.down_seconds, probe_interval=args.probe_interval,
                                             probe_timeout=args.probe_timeout))
        expected = set(replay.accepted)
        places = settle(machines, url, expected, args.settle_timeout)
        result.update({
            "workers": WORKERS, "sessions_at_a_time_per_worker": args.sessions, "embedder": args.embedder,
            "send_seconds": round(replay.send_seconds, 1),  # type: ignore[attr-defined]
            "events_per_second": round(result["events"] / replay.send_seconds, 1),  # type: ignore[attr-defined]
            "statuses": replay.statuses, "retries": replay.retries, "faults": replay.faults,
            "observations_expected": len(expected),
            "delay_ms": percentiles(replay.delays_ms),
            "probes": {"sent": len(replay.probes), "found_by_all": sum(
                1 for p in replay.probes if all(m.name in p for m in machines if m.name != p["origin"])),
                "examples": replay.probes[:5]},
            "places": places,
            "lost": max(place["lost"] for name, place in places.items() if name != "settle_seconds"),
            "duplicated": max(place["duplicated"] for name, place in places.items() if name != "settle_seconds"),
        })
        result["meta"]["load_average_at_end"] = os.getloadavg()
    print(json.dumps({k: result[k] for k in ("events", "events_per_second", "observations_expected", "delay_ms",
                                             "lost", "duplicated", "faults")}, indent=1))
    write_json(result, args.out)
    return 1 if result["lost"] or result["duplicated"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
