"""How good is the handover: what the worker hands a session, scored against what that session then needed.

    .venv/bin/python bench/handover_eval.py [--projects N] [--limit N] [--out FILE]
    .venv/bin/python bench/handover_eval.py --smoke

How it is built (bench/README.md holds the method and the figures):

1. **Replay.** Each corpus repository (``transcripts/<owner>__<repo>``) is one project
   (:func:`retrieval.load_projects`); its sessions are replayed in the order they started
   into one real worker process (:func:`sessionmem.testing.worker_process.start_worker`:
   the offline compressor, the MiniLM embedder, prompt recall switched on) over HTTP,
   each event as the hooks would post it (:func:`sessionmem.protocol.requests.encoded_call`),
   everything before a prompt stored before the prompt is sent, and the whole of a session
   stored and embedded before the next one starts.
2. **Capture.** From the second session of a project on, on the hooks' own paths: the
   SessionStart context (``GET /api/context/inject``, what the SessionStart hook asks), the
   prompt recall in the answer to the first prompt (``POST /api/sessions/init``, as the
   UserPromptSubmit hook reads it when ``prompt_recall`` is on), and the file recall in the
   answer to each file tool's ``POST /api/sessions/observations`` (as the PostToolUse hook
   reads it). Each line Claude would read is an item (:mod:`handover_score`). At each
   compaction of any session (PreCompact, then the SessionStart with ``source=compact``, where
   the transcript has Claude Code's ``compact_boundary``), the context after it: the
   ``compaction`` surface, scored against what the session needed after that point, given
   what it and the earlier sessions had worked on before it.
3. **Score.** Each item against what the session then needed (:mod:`handover_needs`): the
   files it read or changed, the commands and tests it ran, the errors it met that an
   earlier session had solved. Baselines of the same size: nothing, and plain recency (the
   project's newest observations when the session starts, as many as the surface handed
   over). Sessions are in the tune or the held-out half by a hash of their id
   (:func:`eval_queries.half_of`).

``--smoke`` replays the test fixtures' short sessions (:data:`SMOKE_MAX_TOOL_USES`) as one project
and the seeded two-session project of ``retrieval.py``: a few seconds besides the worker's start.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_queries import HALVES, half_of  # noqa: E402
from eval_report import HALF_TITLES  # noqa: E402
from handover_needs import Needs, ProjectHistory  # noqa: E402
from handover_score import ALL, CATEGORIES, SURFACES, Item, Tally, context_items, recall_items, row_line  # noqa: E402
from json_out import write_json  # noqa: E402
from retrieval import DEFAULT_CORPUS, SMOKE_CORPUS, Project, load_projects, seeded_project  # noqa: E402

from sessionmem.protocol import routes  # noqa: E402
from sessionmem.protocol.requests import encoded_call  # noqa: E402
from sessionmem.replay.convert import ConversionStats, ReplaySession, convert, transcript_files  # noqa: E402
from sessionmem.search.recall import FILE_TOOLS  # noqa: E402
from sessionmem.testing.worker_process import WorkerProcess, start_worker  # noqa: E402

WORKER_ENV = {"SESSIONMEM_COMPRESSOR": "offline", "SESSIONMEM_PROMPT_RECALL": "1", "SESSIONMEM_BATCH_QUIET": "0.05",
              "SESSIONMEM_MAILBOX_SIZE": "4096"}
# The newest observations read at each session's start (the most the route gives at once): recency's pool.
RECENT_ROWS = 500
WAIT_S = 1800.0  # for a session to be stored and embedded, on a loaded machine
BASELINES = ("handover", "recency", "nothing")
COMPACTION = "compaction"  # the context after a compaction: a surface of its own, scored on the rest of the session
# --smoke's fixture sessions: those of at most this many tool uses (the one that compacts, one with no tool
# use, the calc session). Sessions of both halves are scored, for a third of the documents the whole set
# has the worker embed (at the lowest CPU priority: on a busy machine, most of the smoke's time).
SMOKE_MAX_TOOL_USES = 10


@dataclass
class Compaction:
    """The context a session was handed after a compaction, where it was (its index in the session's events), and
    recency's pool then."""

    index: int
    text: str
    recent: list[dict[str, Any]]


@dataclass
class Handed:
    """What one session was handed on each surface: its items and the characters Claude read."""

    items: dict[str, list[Item]] = field(default_factory=lambda: {surface: [] for surface in SURFACES})
    characters: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SURFACES, 0))
    compactions: list[Compaction] = field(default_factory=list)

    def take(self, surface: str, text: str) -> None:
        found = context_items(text) if surface == "session_start" else recall_items(text, surface)
        self.items[surface] += found
        self.characters[surface] += len(text)


def _send(worker: WorkerProcess, method: str, path: str, body: bytes | None) -> Any:
    """One request as a hook sends it, retried while the worker says it is busy (503)."""
    while True:
        status, reply = worker.request(method, path, raw=body, timeout=120)
        if status != 503:
            break
        time.sleep(0.05)
    if status >= 300:
        raise RuntimeError(f"{method} {path} -> {status}: {str(reply)[:300]}")
    return reply


def _recalled(reply: Any) -> str:
    context = reply.get("additionalContext") if isinstance(reply, dict) else None
    return context if isinstance(context, str) else ""


def replay_session(worker: WorkerProcess, project: str, session: ReplaySession, *, capture: bool) -> Handed:
    """Send ``session``'s events in order; with ``capture``, what each hook would have handed Claude."""
    handed = Handed()
    if capture:  # the session's own SessionStart (a transcript's is `startup`), else one as Claude Code fires it
        start = next((event.payload for event in session.events if event.stage == "SessionStart"),
                     {"hook_event_name": "SessionStart", "session_id": session.session_id, "cwd": session.cwd,
                      "source": "startup"})
        call = encoded_call(start, project=project)
        assert call is not None
        handed.take("session_start", str(_send(worker, *call)))
    first_prompt = True
    for index, event in enumerate(session.events):
        call = encoded_call(event.payload, project=project, key=event.key, occurred_at=event.at)
        if call is not None and event.stage == "SessionStart" and event.payload.get("source") == "compact":
            text = str(_send(worker, *call))  # right after PreCompact, as live: the worker waits for its checkpoint
            worker.wait_idle(timeout=WAIT_S)
            handed.compactions.append(Compaction(index, text, _recent(worker, project)))
            continue
        if call is None or event.stage == "SessionStart":
            continue
        if event.stage == "UserPromptSubmit":
            worker.wait_idle(timeout=WAIT_S)  # everything before the prompt is stored before it
        reply = _send(worker, *call)
        if not capture:
            continue
        if event.stage == "UserPromptSubmit" and first_prompt:
            handed.take("prompt_recall", _recalled(reply))
        elif event.stage == "PostToolUse" and event.payload.get("tool_name") in FILE_TOOLS:
            handed.take("file_recall", _recalled(reply))
        first_prompt = first_prompt and event.stage != "UserPromptSubmit"
    return handed


def _recent(worker: WorkerProcess, project: str) -> list[dict[str, Any]]:
    """The project's newest observations, newest first: recency's pool."""
    query = urlencode({"project": project, "limit": RECENT_ROWS})
    return list(worker.get(f"{routes.OBSERVATION_LIST}?{query}")["observations"])


def _rows(worker: WorkerProcess, ids: set[int]) -> dict[int, dict[str, Any]]:
    if not ids:
        return {}
    reply = worker.post(routes.OBSERVATION_BATCH, {"ids": sorted(ids)})
    return {row["id"]: row for row in reply["observations"]}


def _tallies() -> dict[str, dict[str, dict[str, Tally]]]:
    return {half: {surface: {baseline: Tally() for baseline in BASELINES} for surface in (*SURFACES, ALL, COMPACTION)}
            for half in HALVES}


def evaluate_project(worker: WorkerProcess, project: Project, tallies: dict[str, dict[str, dict[str, Tally]]],
                     per_session: list[dict[str, Any]], *, limit: int = 0) -> int:
    """Replay ``project`` (its first ``limit`` sessions, if given), scoring each session after the first into
    ``tallies`` and a record of its own into ``per_session``. Returns the sessions scored.
    """
    history = ProjectHistory()
    scored = 0
    sessions = project.sessions[:limit] if limit else project.sessions
    for number, session in enumerate(sessions):
        capture = number > 0
        recent: list[dict[str, Any]] = []
        if capture:
            worker.wait_idle(timeout=WAIT_S)
            worker.wait_indexed(timeout=WAIT_S)  # hours pass between sessions: the index has caught up
            worker.wait_consolidated(timeout=WAIT_S)  # ...and the consolidation pass (at once when it is off)
            recent = _recent(worker, project.name)
        handed = replay_session(worker, project.name, session, capture=capture)
        for compaction in handed.compactions:
            _score_compaction(worker, tallies[half_of(session.session_id)][COMPACTION], session, compaction, history)
        if capture:
            needs = history.needs(session)
            shown = {row_id for items in handed.items.values() for item in items for row_id in item.ids}
            rows = {row["id"]: row for row in recent} | _rows(worker, shown - {row["id"] for row in recent})
            half = half_of(session.session_id)
            per_session.append({"project": project.name, "session": session.session_id, "half": half,
                                **_score(tallies[half], handed, recent, needs, rows, history)})
            scored += 1
        history.add(session)
    return scored


def _score_compaction(worker: WorkerProcess, tallies: dict[str, Tally], session: ReplaySession, compaction: Compaction,
                      history: ProjectHistory) -> None:
    """Score what ``session`` was handed after ``compaction`` against what it needed after it, given what it and the
    earlier sessions (``history``) had worked on before; recency: the project's newest observations then."""
    before = ReplaySession(session.session_id, session.cwd, session.events[: compaction.index])
    after = ReplaySession(session.session_id, session.cwd, session.events[compaction.index:])
    seen = history.and_then(before)
    needs = seen.needs(after)
    items = context_items(compaction.text)
    shown = {row_id for item in items for row_id in item.ids}
    rows = {row["id"]: row for row in compaction.recent}
    rows |= _rows(worker, shown - set(rows))
    against_baselines(tallies, COMPACTION, items, len(compaction.text), compaction.recent, needs, rows, seen)


def against_baselines(tallies: dict[str, Tally], surface: str, items: list[Item], characters: int,
                      recent: list[dict[str, Any]], needs: Needs, rows: dict[int, dict[str, Any]],
                      history: ProjectHistory) -> dict[str, Any]:
    """``items`` (``characters`` of them) scored into ``tallies``, beside recency at the same size (the newest of
    ``recent``) and nothing; returns the session's own counts, handover and recency."""
    size = sum(item.count for item in items)
    newest = [Item(surface, row_line(row), [row["id"]]) for row in recent[:size]]
    counts = {"handover": tallies["handover"].add(items, characters, needs, rows, history),
              "recency": tallies["recency"].add(newest, sum(len(item.text) + 1 for item in newest), needs, rows,
                                                history)}
    tallies["nothing"].add([], 0, needs, rows, history)
    return counts


def _score(tallies: dict[str, dict[str, Tally]], handed: Handed, recent: list[dict[str, Any]], needs: Needs,
           rows: dict[int, dict[str, Any]], history: ProjectHistory) -> dict[str, Any]:
    """Score one session on every surface and baseline; returns its own counts (handover and recency)."""
    surfaces = {surface: (handed.items[surface], handed.characters[surface]) for surface in SURFACES}
    surfaces[ALL] = ([item for surface in SURFACES for item in handed.items[surface]], sum(handed.characters.values()))
    own: dict[str, Any] = {}
    for surface, (items, characters) in surfaces.items():
        own[surface] = against_baselines(tallies[surface], surface, items, characters, recent, needs, rows, history)
    return own


def smoke_projects(stats: ConversionStats) -> list[Project]:
    """The fixtures' sessions of at most :data:`SMOKE_MAX_TOOL_USES` tool uses as one project (in time order),
    and the seeded project."""
    sessions = [session for session in convert(transcript_files(SMOKE_CORPUS), stats)
                if session.tool_uses <= SMOKE_MAX_TOOL_USES]
    sessions.sort(key=lambda s: (s.events[0].at if s.events else 0.0, s.session_id))
    return [Project("fixtures", sessions), seeded_project()]


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.0f} %"


def print_table(figures: dict[str, Any]) -> None:
    consolidation = figures["meta"]["consolidation"]
    print(f"consolidation {'on' if consolidation['enabled'] else 'off'}: {consolidation['consolidated']} observations"
          f" consolidated, {consolidation['hidden']} merged or superseded")
    for half in HALVES:
        print(f"\n### {HALF_TITLES[half]}: {figures[half][ALL]['handover']['sessions']} sessions\n")
        print("| surface | handed over | obs./session | chars/session | precision files · commands · errors · any |"
              " recall files · commands · errors |")
        print("|---|---|---:|---:|---|---|")
        for surface in (*SURFACES, ALL, COMPACTION):
            for baseline in BASELINES:
                row = figures[half][surface][baseline]
                precision = " · ".join(_percent(row["precision"][c]) for c in (*CATEGORIES, "any"))
                recall = " · ".join(_percent(row["recall"][c]) for c in CATEGORIES)
                print(f"| {surface} | {baseline} | {row['observations_per_session'] or 0:.1f} |"
                      f" {row['characters_per_session'] or 0:.0f} | {precision} | {recall} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS,
                        help="transcripts, one folder per project (the shared corpus by default)")
    parser.add_argument("--projects", type=int, default=0,
                        help="only the N projects with the most prompts (default 0: all)")
    parser.add_argument("--limit", type=int, default=0, help="only the first N sessions of each project (0: all)")
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    parser.add_argument("--data-dir", type=Path, help="keep the worker's data here (default: a temporary dir)")
    parser.add_argument("--no-consolidation", action="store_true",
                        help="the worker without its consolidation pass (the before of a before/after)")
    parser.add_argument("--setting", action="append", default=[], metavar="SESSIONMEM_NAME=VALUE",
                        help="a setting of the worker's (docs/configuration.md), for a what-if; repeatable")
    parser.add_argument("--smoke", action="store_true",
                        help="seconds: the test fixtures' short sessions and the seeded project, not the corpus")
    args = parser.parse_args(argv)
    settings = dict(item.split("=", 1) for item in args.setting if "=" in item)
    if len(settings) != len(args.setting) or not all(name.startswith("SESSIONMEM_") for name in settings):
        parser.error("--setting takes SESSIONMEM_NAME=VALUE")

    stats = ConversionStats()
    projects = smoke_projects(stats) if args.smoke else load_projects(args.corpus, stats)
    if args.projects and not args.smoke:
        projects = projects[: args.projects]
    if not projects:
        parser.error(f"no transcripts in {args.corpus} (--corpus)")
    print("handover_eval: replaying " + ", ".join(f"{p.name} ({len(p.sessions)} sessions)" for p in projects),
          file=sys.stderr)
    tallies = _tallies()
    started = time.monotonic()
    scored: dict[str, int] = {}
    per_session: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="sessionmem-handover-") as temporary:
        data_dir = args.data_dir or Path(temporary) / "data"
        env = {**WORKER_ENV, "SESSIONMEM_CONSOLIDATION": "0" if args.no_consolidation else "1", **settings}
        with start_worker(data_dir, env=env, timeout=120) as worker:
            for project in projects:
                scored[project.name] = evaluate_project(worker, project, tallies, per_session, limit=args.limit)
                print(f"handover_eval: {project.name}: {scored[project.name]} sessions scored, "
                      f"{time.monotonic() - started:.0f} s", file=sys.stderr)
            consolidation = worker.wait_consolidated(timeout=WAIT_S)["consolidation"]
    figures: dict[str, Any] = {half: {surface: {baseline: tally.figures() for baseline, tally in by_baseline.items()}
                                      for surface, by_baseline in by_surface.items()}
                               for half, by_surface in tallies.items()}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parent).stdout.strip() or "unknown"
    figures["meta"] = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "commit": commit,
                       "command": shlex.join([sys.executable, *sys.argv]), "seconds": round(time.monotonic() - started),
                       "worker_env": env, "consolidation": consolidation, "split": "eval_queries.half_of(session id)",
                       "projects": [{"name": p.name, "sessions": len(p.sessions), "scored": scored[p.name]}
                                    for p in projects]}
    figures["per_session"] = per_session
    print_table(figures)
    write_json(figures, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
