"""What each LLM compressor sends the model, per stored observation: ``bench/compressor_cost.py``.

For each backend -- ``anthropic``, ``claude-code``, ``openai-compatible`` -- and each
scenario, a real worker (``sessionmem serve``) on a fresh data dir compresses with that
backend against a local scripted server that records every request as it arrives:

- ``anthropic``: the scripted Messages API (``ANTHROPIC_BASE_URL``);
- ``claude-code``: the same server, reached through the pinned Claude Code CLI
  (``e2e/node_modules/.bin/claude``), logged in with its own OAuth credentials in a
  temporary HOME and no API key, as a subscription user's;
- ``openai-compatible``: the scripted chat completions server.

Scenarios:

- ``calc``: the "fix the divide-by-zero bug in calc.py" session as Claude Code 2.1.328's hooks
  fired it (``tests/fixtures/payloads-2.1.328.jsonl``: two prompts, eight tool uses, one in a
  subagent), each payload given to the real hook process (``python -S hooks/entry.py
  <Stage>``), as Claude Code runs it. claude-mem's observer was measured on this session with
  the same kind of scripted server: 9 calls, 359,747 characters, 44,968 per observation.
- ``corpus``: a bounded slice of the recorded corpus (``--project``, the first sessions up to
  ``--tool-uses``), converted to hook events by ``sessionmem.replay.convert`` (what
  ``sessionmem backfill`` uses) and posted to the worker's API in order, as fast as it accepts.

Counted, from the scripted server's record: requests (observation batches and summaries apart),
the characters of each request body as it reached the server (system, messages, tools and
whatever the CLI adds), of its text (system prompt and messages), of our own prompt alone
(``compress/prompts.py``'s system prompt and request), and the tokens the server reported; from
the worker's database, the observations stored and how many the model wrote. The figures are
characters and tokens per stored observation; for ``claude-code``, what the CLI adds to a request
beyond our prompt, with an example request's parts, and the same request run with each CLI flag
that might cut it (``--probe-flags``).

Tokens are the scripted servers' count (a quarter of the request's UTF-8 bytes), so they move
with the characters; the characters are exact. Defaults as shipped (batches of up to 8 tool uses,
2 s quiet time, 2 concurrent calls or CLI runs), except no token budgets (every observation goes
to the model) and no embedder (it has nothing to do with the model's cost).

    .venv/bin/python bench/compressor_cost.py [--backend NAME ...] [--scenario calc|corpus ...]
                                              [--corpus DIR] [--project NAME] [--tool-uses N] [--out DIR]
    .venv/bin/python bench/compressor_cost.py --smoke   # calc and a fixture session: tests/test_bench_smoke.py
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import apsw

from sessionmem.compress.claude_code_backend import cli_command, cli_environment
from sessionmem.compress.prompts import OBSERVATION_SYSTEM, SUMMARY_SYSTEM
from sessionmem.protocol.requests import encoded_call
from sessionmem.replay.convert import ConversionStats, ReplaySession, convert, transcript_files
from sessionmem.settings import DEFAULT_SKIP_TOOLS, load_settings
from sessionmem.testing.chat_completions_api import ScriptedChatCompletionsAPI
from sessionmem.testing.claude_login import logged_in_home
from sessionmem.testing.messages_api import ScriptedMessagesAPI
from sessionmem.testing.worker_process import WorkerProcess, start_worker

REPO = Path(__file__).resolve().parent.parent
HOOK_ENTRY = REPO / "hooks" / "entry.py"
CLAUDE = REPO / "e2e" / "node_modules" / ".bin" / "claude"
CALC_PAYLOADS = REPO / "tests" / "fixtures" / "payloads-2.1.328.jsonl"
DEFAULT_CORPUS = REPO.parent / "shared" / "corpus" / "transcripts"
SMOKE_CORPUS = REPO / "tests" / "fixtures" / "transcripts"
# --smoke's corpus session: 21 tool uses (3 failed) in one turn, two batches and a summary a backend.
# --smoke also waits for the worker's LLM client before it drives it: while the worker loads the SDK
# (the anthropic one takes seconds of CPU) a hook can outlast its budget and spool its event, and the
# worker imports its spool only every few seconds.
SMOKE_PROJECT = "v1.0-inline-sidechain"
DEFAULT_PROJECT = "Durban-Designer__vsla"
DEFAULT_TOOL_USES = 300
BACKENDS = ("anthropic", "claude-code", "openai-compatible")
SCENARIOS = ("calc", "corpus")
HOOK_STAGES = ("SessionStart", "UserPromptSubmit", "PostToolUse", "PostToolUseFailure", "Stop", "PreCompact",
               "SubagentStop", "SessionEnd")  # those the plugin registers (plugin/hooks/hooks.json)
TOOL_STAGES = ("PostToolUse", "PostToolUseFailure")
SUBAGENT_STOP = "SubagentStop"  # stored as an observation too: the subagent's report
TARGET_CLAUDE_CODE_CALC = 2_500  # characters per stored observation on calc, whatever the CLI adds
PEER_CALC = {"observer": "claude-mem", "calls": 9, "characters": 359_747, "per_observation": 44_968}
# Flags and variables of the pinned CLI that might cut what it adds to a request (--probe-flags): each is
# run with the backend's own command line and environment on the same request (a variable set to None is
# left out), and what it adds is measured. Last, every CLAUDE_CODE_DISABLE_* variable the CLI names at once.
PROBES: dict[str, tuple[list[str], dict[str, str | None]]] = {
    "as shipped": ([], {}),
    "CLAUDE_CODE_DISABLE_ATTACHMENTS unset": ([], {"CLAUDE_CODE_DISABLE_ATTACHMENTS": None}),
    "--exclude-dynamic-system-prompt-sections": (["--exclude-dynamic-system-prompt-sections"], {}),
    "--safe-mode": (["--safe-mode"], {}),
    "--restricted": (["--restricted"], {}),
    "CLAUDE_CODE_DISABLE_CLAUDE_MDS=1": ([], {"CLAUDE_CODE_DISABLE_CLAUDE_MDS": "1"}),
    "CLAUDE_CODE_DISABLE_AUTO_MEMORY=1": ([], {"CLAUDE_CODE_DISABLE_AUTO_MEMORY": "1"}),
    "CLAUDE_CODE_DISABLE_GIT_INSTRUCTIONS=1": ([], {"CLAUDE_CODE_DISABLE_GIT_INSTRUCTIONS": "1"}),
    "CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS=1": ([], {"CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS": "1"}),
}
PROBE_REQUEST = ('Project: calcproj\nUser prompt: Fix the divide-by-zero bug in calc.py\n\n'
                 '<tool_use index="1" name="Read">\n<input>{"file_path": "/home/dev/calcproj/calc.py"}</input>\n'
                 '<output>def divide(a, b):\n    return a / b\n</output>\n</tool_use>')


# -- what a request carries ------------------------------------------------------------------------


def text_of(content: Any) -> str:
    """The text of a message's content or a system prompt: a string, or a list of text blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(block.get("text", "") for block in content if isinstance(block, dict))
    return ""


@dataclass(frozen=True, kw_only=True)
class RequestCost:
    kind: str  # observations | summary | other
    chars: int  # the body as it reached the server
    text_chars: int  # system prompt, messages' text and tools: what the model reads
    ours_chars: int  # our system prompt and our request alone (compress/prompts.py)
    tool_uses: int  # in an observations request

    @property
    def added_chars(self) -> int:
        """What the body carries beyond our prompt: the JSON around it, and whatever a CLI adds to the text."""
        return self.chars - self.ours_chars

    @property
    def added_text_chars(self) -> int:
        return self.text_chars - self.ours_chars


def request_cost(body: dict[str, Any], chars: int) -> RequestCost:
    """What one recorded request (a Messages API or a chat completions body) carries."""
    messages = body.get("messages") or []
    if "system" in body:  # the Messages API
        system = text_of(body["system"])
        texts = [text_of(m.get("content")) for m in messages]
    else:  # chat completions: the system prompt is the first message
        system = "".join(text_of(m.get("content")) for m in messages if m.get("role") == "system")
        texts = [text_of(m.get("content")) for m in messages if m.get("role") != "system"]
    tools = json.dumps(body["tools"]) if body.get("tools") else ""
    text_chars = len(system) + sum(map(len, texts)) + len(tools)
    last = texts[-1] if texts else ""
    ours_system, kind = next(((prompt, name) for prompt, name in ((SUMMARY_SYSTEM, "summary"),
                              (OBSERVATION_SYSTEM, "observations")) if prompt in system), ("", "other"))
    ours = our_request(last) if kind != "other" else ""
    return RequestCost(kind=kind, chars=chars, text_chars=text_chars, ours_chars=len(ours_system) + len(ours),
                       tool_uses=ours.count("<tool_use index=") if kind == "observations" else 0)


def our_request(content: str) -> str:
    """Our request inside the user message that reached the model (the CLI puts its reminders before it)."""
    start = content.find("Project: ")
    return content[start:] if start >= 0 else content


def parts_of(body: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The blocks of a Messages API request, each with its size and start: where a CLI's additions are."""
    def blocks(content: Any) -> list[dict[str, Any]]:
        items = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        texts = [b.get("text", "") for b in items if isinstance(b, dict)]
        return [{"chars": len(text), "starts": text[:100]} for text in texts]

    other = {k: len(json.dumps(v)) for k, v in body.items() if k not in ("system", "messages")}
    return {"system": blocks(body.get("system")),
            "messages": [part for m in body.get("messages") or [] for part in blocks(m.get("content"))],
            "other_fields_chars": [{"field": k, "chars": n} for k, n in sorted(other.items())]}


# -- the scripted servers and the worker ------------------------------------------------------------


@dataclass
class Backend:
    name: str
    server: ScriptedMessagesAPI | ScriptedChatCompletionsAPI
    env: dict[str, str]  # the worker's settings for this backend
    home: Path | None = None  # claude-code: the CLI's HOME, logged in


@contextmanager
def backend_server(name: str, root: Path) -> Iterator[Backend]:
    if name == "openai-compatible":
        with ScriptedChatCompletionsAPI() as chat:
            yield Backend(name, chat, {"SESSIONMEM_COMPRESSOR": name, "SESSIONMEM_OPENAI_BASE_URL": chat.url,
                                       "SESSIONMEM_OPENAI_MODEL": "scripted"})
        return
    with ScriptedMessagesAPI() as api:
        if name == "anthropic":
            yield Backend(name, api, {"SESSIONMEM_COMPRESSOR": name, "SESSIONMEM_ANTHROPIC_API_KEY": "sk-bench-dummy",
                                      "SESSIONMEM_ANTHROPIC_BASE_URL": api.url})
            return
        if not CLAUDE.exists():
            raise SystemExit(f"{CLAUDE} is missing: `make e2e/node_modules/.installed` installs the pinned CLI")
        home = logged_in_home(root / "home")
        yield Backend(name, api, {**cli_env(home, api), "SESSIONMEM_COMPRESSOR": name,
                                  "SESSIONMEM_CLAUDE_PATH": str(CLAUDE)}, home)


def cli_env(home: Path, api: ScriptedMessagesAPI) -> dict[str, str]:
    """The CLI's environment: this process's without credentials or settings of its own, ``home``, ``api``
    (for a plain run of the CLI, ``ANTHROPIC_BASE_URL``; for the worker's runs, ``SESSIONMEM_ANTHROPIC_BASE_URL``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SESSIONMEM_", "ANTHROPIC_", "CLAUDE"))}
    env.update(HOME=str(home), ANTHROPIC_BASE_URL=api.url, SESSIONMEM_ANTHROPIC_BASE_URL=api.url)
    return env


WORKER_SETTINGS = {
    "SESSIONMEM_EMBEDDER": "none",  # no vectors: the model's cost is the figure
    "SESSIONMEM_LLM_DAILY_TOKENS": "0", "SESSIONMEM_LLM_SESSION_TOKENS": "0",  # every observation to the model
}


# -- the scenarios ----------------------------------------------------------------------------------


def calc_payloads() -> list[dict[str, Any]]:
    return [json.loads(line) for line in CALC_PAYLOADS.read_text().splitlines() if line.strip()]


def makes_observation(stage: str, payload: dict[str, Any]) -> bool:
    """Whether the worker stores an observation of this event: a tool use (but those it skips), a subagent's stop."""
    return stage == SUBAGENT_STOP or (stage in TOOL_STAGES and payload["tool_name"] not in DEFAULT_SKIP_TOOLS)


def drive_calc(worker: WorkerProcess) -> int:
    """Each payload through the real hook process, as Claude Code runs it; returns the observations to expect."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SESSIONMEM_", "ANTHROPIC_"))}
    env["SESSIONMEM_DATA_DIR"] = str(worker.data_dir)
    sent = 0
    for payload in calc_payloads():
        stage = payload["hook_event_name"]
        if stage not in HOOK_STAGES:
            continue
        result = subprocess.run([sys.executable, "-S", str(HOOK_ENTRY), stage], input=json.dumps(payload).encode(),
                                env=env, capture_output=True, timeout=60)
        if result.returncode != 0:
            raise RuntimeError(f"the {stage} hook exited with {result.returncode}: {result.stderr[-500:]!r}")
        sent += makes_observation(stage, payload)
    return sent


def corpus_slice(corpus: Path, projects: list[str],
                 tool_uses: int) -> tuple[list[tuple[str, ReplaySession]], dict[str, Any]]:
    """Each project's sessions in the order they started, up to ``tool_uses`` tool uses a project (whole
    sessions, at least one; 0: all of them)."""
    chosen: list[tuple[str, ReplaySession]] = []
    stats = ConversionStats()
    for project in projects:
        folder = corpus / project  # "." : the corpus itself
        if not folder.is_dir():
            raise SystemExit(f"no project folder {folder}")
        sessions = convert(transcript_files(folder), stats)
        sessions.sort(key=lambda s: (s.events[0].at if s.events else 0.0, s.session_id))
        total = 0
        for session in sessions:
            if tool_uses and total and total + session.tool_uses > tool_uses:
                break
            chosen.append((folder.name.split("__", 1)[-1], session))
            total += session.tool_uses
    return chosen, stats.as_dict()


def drive_corpus(worker: WorkerProcess, sessions: list[tuple[str, ReplaySession]]) -> int:
    """Every event posted to the worker's API in order, as ``sessionmem backfill`` sends it; returns the
    observations to expect."""
    sent = 0
    for project, session in sessions:
        for event in session.events:
            call = encoded_call(event.payload, project=project, key=event.key, occurred_at=event.at)
            if call is None or call[2] is None:
                continue  # a read (SessionStart's context): nothing to compress
            method, path, body = call
            status, answer = worker.request(method, path, raw=body, timeout=30)
            while status == 503:  # a full mailbox: again shortly, as a hook would
                time.sleep(0.05)
                status, answer = worker.request(method, path, raw=body, timeout=30)
            if status >= 300:
                raise RuntimeError(f"{method} {path} -> {status}: {answer}")
            sent += makes_observation(event.stage, event.payload)
    return sent


def stored(data_dir: Path, backend: str) -> dict[str, int]:
    connection = apsw.Connection(str(data_dir / "sessionmem.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        (observations, by_model), = connection.execute(
            "SELECT count(*), coalesce(sum(compressed AND compressor = ?), 0) FROM observations", (backend,))
        (summaries, summaries_by_model), = connection.execute(
            "SELECT count(*), coalesce(sum(compressed AND compressor = ?), 0) FROM session_summaries", (backend,))
    finally:
        connection.close()
    return {"observations": observations, "observations_by_model": by_model, "summaries": summaries,
            "summaries_by_model": summaries_by_model}


def run_one(backend_name: str, scenario: str, out: Path, sessions: list[tuple[str, ReplaySession]], *,
            warm: bool = False) -> dict[str, Any]:
    """``warm``: drive the worker only once its LLM client is loaded (see :data:`SMOKE_PROJECT`)."""
    root = out / f"{scenario}-{backend_name}"
    with backend_server(backend_name, root) as backend:
        worker = start_worker(root / "data", env={**backend.env, **WORKER_SETTINGS}, timeout=60)
        try:
            if warm:
                # /debug may answer slowly while the SDK loads: a long timeout, within the wait's.
                worker.wait_until(lambda: worker.get("/debug", timeout=60)["compressor"]["clientReady"], timeout=120)
            started = time.monotonic()
            expected = drive_calc(worker) if scenario == "calc" else drive_corpus(worker, sessions)
            # A hook past its budget on a busy machine spools its event (and those after it, to keep
            # their order): the worker imports the spool every few seconds. Counted once it has.
            worker.wait_until(lambda: not list((worker.data_dir / "spool").glob("*.json")), timeout=600)
            worker.wait_idle(timeout=3600)
            seconds = time.monotonic() - started
            compressor = worker.get("/debug")["compressor"]
        finally:
            worker.stop()
        counts = stored(root / "data", backend_name)
        recorded = list(backend.server.requests)
        side = list(getattr(backend.server, "side_requests", []))
        tokens_in, tokens_out = backend.server.input_tokens, backend.server.output_tokens
    costs = [request_cost(r.body, r.chars) for r in recorded]
    result = figures(costs, counts, tokens_in, tokens_out)
    result["per_request"] = [{**asdict(c), "at": round(r.at - recorded[0].at, 2)} for c, r in zip(costs, recorded)]
    result.update(backend=backend_name, scenario=scenario, observations_expected=expected, seconds=round(seconds, 1),
                  side_requests=[list(s) for s in side], statuses=sorted({r.status for r in recorded}),
                  worker_counted_tokens={"input": compressor.get("inputTokens"),
                                         "output": compressor.get("outputTokens")},
                  compressor={k: compressor.get(k) for k in ("backend", "calls", "retries", "rawFallbacks",
                                                              "offlineFallbacks", "lastFailure")})
    if backend_name == "claude-code":
        example = next((r.body for r in recorded if request_cost(r.body, r.chars).kind == "observations"), None)
        result["example_request_parts"] = parts_of(example) if example is not None else None
    return result


def figures(costs: list[RequestCost], counts: dict[str, int], tokens_in: int, tokens_out: int) -> dict[str, Any]:
    observations = max(1, counts["observations"])
    batches = [c for c in costs if c.kind == "observations"]
    chars = sum(c.chars for c in costs)

    def median(values: list[int]) -> float:
        return statistics.median(values) if values else 0.0

    return {
        "requests": len(costs),
        "observation_requests": len(batches),
        "summary_requests": sum(c.kind == "summary" for c in costs),
        "other_requests": sum(c.kind == "other" for c in costs),
        "tool_uses_per_observation_request": round(sum(c.tool_uses for c in batches) / max(1, len(batches)), 2),
        "stored": counts,
        "chars": chars,
        "text_chars": sum(c.text_chars for c in costs),
        "ours_chars": sum(c.ours_chars for c in costs),
        "chars_per_observation": round(chars / observations),
        "ours_chars_per_observation": round(sum(c.ours_chars for c in costs) / observations),
        "input_tokens": tokens_in,
        "output_tokens": tokens_out,
        "tokens_per_observation": round((tokens_in + tokens_out) / observations),
        "input_tokens_per_observation": round(tokens_in / observations),
        "chars_per_request_median": median([c.chars for c in costs]),
        "added_chars_per_request_median": median([c.added_chars for c in costs]),
        "added_text_chars_per_request_median": median([c.added_text_chars for c in costs]),
        "added_text_chars_per_request_range": [min((c.added_text_chars for c in costs), default=0),
                                               max((c.added_text_chars for c in costs), default=0)],
    }


# -- what the CLI adds, flag by flag ------------------------------------------------------------------


def probe_flags(out: Path) -> list[dict[str, Any]]:
    """The same observation request sent through the CLI with the backend's command line and each of
    :data:`PROBES`: what the CLI adds to it beyond our prompt."""
    settings = load_settings({}, data_dir=str(out / "probe-data"))
    results = []
    with ScriptedMessagesAPI() as api, tempfile.TemporaryDirectory() as workdir:
        home = logged_in_home(out / "probe-home")
        switches = disable_variables()
        every: dict[str, str | None] = dict.fromkeys(switches, "1")
        probes = {**PROBES, f"all {len(switches)} CLAUDE_CODE_DISABLE_* variables =1": ([], every)}
        for name, (extra_args, extra_env) in probes.items():
            command = cli_command(str(CLAUDE), settings, OBSERVATION_SYSTEM) + extra_args
            env = {**cli_environment(settings, cli_env(home, api)), **extra_env}
            env = {key: value for key, value in env.items() if value is not None}
            before = len(api.requests)
            run = subprocess.run(command, input=PROBE_REQUEST.encode(), env=env, cwd=workdir, capture_output=True,
                                 timeout=180)
            sent = api.requests[before:]
            entry: dict[str, Any] = {"probe": name, "exit_status": run.returncode, "requests": len(sent)}
            if run.returncode != 0 or len(sent) != 1:
                entry["output"] = (run.stdout + run.stderr).decode(errors="replace")[-300:]
            if sent:
                cost = request_cost(sent[-1].body, sent[-1].chars)
                entry.update(chars=cost.chars, ours_chars=cost.ours_chars, added_chars=cost.added_chars,
                             added_text_chars=cost.added_text_chars)
            results.append(entry)
    return results


def disable_variables() -> list[str]:
    """The ``CLAUDE_CODE_DISABLE_*`` environment variables the pinned CLI's executable names."""
    with open(CLAUDE.resolve(), "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return sorted({m.group().decode() for m in re.finditer(rb"CLAUDE_CODE_DISABLE_[A-Z_]*[A-Z]", data)})


# -- the report -------------------------------------------------------------------------------------


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| scenario | backend | requests (batches + summaries) | tool uses a batch | observations stored "
             "(by the model) | characters sent | **characters / observation** | our prompt alone / observation "
             "| tokens in + out / observation | added to a request beyond our prompt, text / body (median) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        stored_ = r["stored"]
        lines.append(
            f"| {r['scenario']} | {r['backend']} | {r['requests']} ({r['observation_requests']} + "
            f"{r['summary_requests']}) | {r['tool_uses_per_observation_request']} | {stored_['observations']} "
            f"({stored_['observations_by_model']}) | {r['chars']:,} | **{r['chars_per_observation']:,}** | "
            f"{r['ours_chars_per_observation']:,} | {r['tokens_per_observation']:,} | "
            f"{r['added_text_chars_per_request_median']:,.0f} / {r['added_chars_per_request_median']:,.0f} |")
    return "\n".join(lines)


def probe_table(probes: list[dict[str, Any]]) -> str:
    lines = ["| the CLI run with | exit status | requests | characters sent | our prompt | added: text / body |",
             "|---|---|---|---|---|---|"]
    for p in probes:
        lines.append(f"| `{p['probe']}` | {p['exit_status']} | {p['requests']} | {p.get('chars', '-')} | "
                     f"{p.get('ours_chars', '-')} | {p.get('added_text_chars', '-')} / {p.get('added_chars', '-')} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", action="append", choices=BACKENDS, help="repeatable (default: all three)")
    parser.add_argument("--scenario", action="append", choices=SCENARIOS, help="repeatable (default: both)")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="transcripts, one folder per project")
    parser.add_argument("--project", action="append",
                        help=f"a folder of the corpus to replay, '.' for all of it; repeatable "
                             f"(default: {DEFAULT_PROJECT})")
    parser.add_argument("--tool-uses", type=int, default=DEFAULT_TOOL_USES,
                        help="the first whole sessions of each project up to this many tool uses (0: every session)")
    parser.add_argument("--probe-flags", action=argparse.BooleanOptionalAction, default=True,
                        help="run one request through the CLI with each flag that might cut what it adds")
    parser.add_argument("--out", type=Path, help="report folder (default bench/results/compressor-cost-<timestamp>)")
    parser.add_argument("--smoke", action="store_true",
                        help=f"the calc session and a fixture session (tests/fixtures/transcripts/{SMOKE_PROJECT}), "
                             "no probes")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    backends = args.backend or list(BACKENDS)
    scenarios = args.scenario or list(SCENARIOS)
    if args.smoke:
        args.probe_flags = False
        if args.corpus == DEFAULT_CORPUS:
            args.corpus, args.project, args.tool_uses = SMOKE_CORPUS, [SMOKE_PROJECT], 1
    out = args.out or REPO / "bench" / "results" / f"compressor-cost-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    sessions: list[tuple[str, ReplaySession]] = []
    conversion: dict[str, Any] = {}
    if "corpus" in scenarios:
        sessions, conversion = corpus_slice(args.corpus, args.project or [DEFAULT_PROJECT], args.tool_uses)
        print(f"compressor_cost: corpus slice of {len(sessions)} sessions, "
              f"{sum(s.tool_uses for _, s in sessions)} tool uses", file=sys.stderr)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=REPO).stdout.strip() or "unknown"
    report: dict[str, Any] = {
        "command": shlex.join([sys.executable, *(argv if argv is not None else sys.argv)]), "commit": commit,
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "cores": os.cpu_count(),
        "corpus": {"path": str(args.corpus), "projects": args.project or [DEFAULT_PROJECT],
                   "tool_uses_cap": args.tool_uses, "sessions": [s.session_id for _, s in sessions],
                   "conversion": conversion},
        "peer_calc": PEER_CALC, "target_claude_code_calc": TARGET_CLAUDE_CODE_CALC, "results": [],
    }
    for scenario in scenarios:
        for backend in backends:
            print(f"compressor_cost: {scenario} with {backend}", file=sys.stderr)
            report["results"].append(run_one(backend, scenario, out, sessions, warm=args.smoke))
    if args.probe_flags and "claude-code" in backends:
        print("compressor_cost: probing the CLI's flags", file=sys.stderr)
        report["probes"] = probe_flags(out)
    (out / "compressor_cost.json").write_text(json.dumps(report, indent=2))
    print(table(report["results"]))
    calc = {r["backend"]: r for r in report["results"] if r["scenario"] == "calc"}
    if calc:
        print(f"\ncalc, claude-mem's observer (measured with the same kind of scripted server): {PEER_CALC['calls']} "
              f"calls, {PEER_CALC['characters']:,} characters, {PEER_CALC['per_observation']:,} a stored observation")
    if "claude-code" in calc:
        figure = calc["claude-code"]["chars_per_observation"]
        print(f"calc, claude-code: {figure:,} characters a stored observation (target <= {TARGET_CLAUDE_CODE_CALC:,}: "
              f"{'met' if figure <= TARGET_CLAUDE_CODE_CALC else 'NOT met'})")
    if report.get("probes"):
        print("\n" + probe_table(report["probes"]))
    print(f"\nreport: {out / 'compressor_cost.json'}", file=sys.stderr)
    lost = [r for r in report["results"] if r["stored"]["observations"] != r["observations_expected"]]
    return 1 if lost else 0


if __name__ == "__main__":
    raise SystemExit(main())
