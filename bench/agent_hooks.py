"""Time each agent's tool-use hook side by side: Claude Code, the Codex CLI, the Gemini CLI and OpenCode, interleaved.

    python bench/agent_hooks.py [--runs N]

Each agent's hook runs as its agent runs it (``python -S hooks/entry.py <Stage> [agent]``, the
command ``sessionmem install --agent ...`` writes), on a genuine recorded payload, against one
real worker (offline compressor), in rounds that take one run of each kind in turn, so a noisy
machine slows all alike:

- Claude Code ``PostToolUse`` (tests/fixtures/payloads-2.1.328.jsonl, a Bash call);
- Codex ``PostToolUse`` of a shell command and of an ``apply_patch`` (tests/fixtures/codex/hooks);
- the Gemini CLI's ``AfterTool`` of a shell command and of a ``replace`` (tests/fixtures/gemini/hooks);
- OpenCode's ``PostToolUse`` of a ``bash`` command and of an ``edit``, as sessionmem's plugin sends them
  (tests/fixtures/opencode/hooks);
- a bare ``python -S -c pass``, the floor.

Every run is a new tool use of one session per kind (a fresh id), so each is stored. Prints the
median and p95 wall time of each and its median's ratio to Claude Code's. What the agent adds
around the hook is not in it: Codex starts each hook through ``$SHELL -lc`` (the user's login
shell and profile), the Gemini CLI through its own spawn, OpenCode's plugin through Node's ``spawn``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from hook_ab import run, summary  # noqa: E402

from sessionmem.protocol.agents import AGENTS  # noqa: E402
from sessionmem.testing.worker_process import start_worker  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures"
ENTRY = REPO / "hooks" / "entry.py"


def _claude_payload() -> dict:
    for line in (FIXTURES / "payloads-2.1.328.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event["hook_event_name"] == "PostToolUse":
            return event
    raise SystemExit("no PostToolUse payload in the fixture")


# name -> (stage and agent on the command line, the recorded payload, the field that makes each run new)
KINDS = {
    "claude-code PostToolUse (Bash)": (["PostToolUse"], _claude_payload, "tool_use_id"),
    "codex PostToolUse (Bash)": (["PostToolUse", "codex"],
                                 lambda: json.loads((FIXTURES / "codex/hooks/PostToolUse-Bash.json").read_text()),
                                 "tool_use_id"),
    "codex PostToolUse (apply_patch)": (["PostToolUse", "codex"], lambda: json.loads(
        (FIXTURES / "codex/hooks/PostToolUse-apply_patch-update.json").read_text()), "tool_use_id"),
    "gemini-cli AfterTool (run_shell_command)": (["AfterTool", "gemini-cli"], lambda: json.loads(
        (FIXTURES / "gemini/hooks/AfterTool-run_shell_command.json").read_text()), "timestamp"),
    "gemini-cli AfterTool (replace)": (["AfterTool", "gemini-cli"], lambda: json.loads(
        (FIXTURES / "gemini/hooks/AfterTool-replace.json").read_text()), "timestamp"),
    "opencode PostToolUse (bash)": (["PostToolUse", "opencode"], lambda: json.loads(
        (FIXTURES / "opencode/hooks/PostToolUse-bash.json").read_text()), "tool_use_id"),
    "opencode PostToolUse (edit)": (["PostToolUse", "opencode"], lambda: json.loads(
        (FIXTURES / "opencode/hooks/PostToolUse-edit.json").read_text()), "tool_use_id"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200, help="runs of each kind (default 200)")
    args = parser.parse_args()
    payloads = {name: loader() for name, (_, loader, _) in KINDS.items()}
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        worker = start_worker(data_dir, env={"SESSIONMEM_COMPRESSOR": "offline"})
        try:
            env = dict(os.environ, SESSIONMEM_DATA_DIR=str(data_dir), SESSIONMEM_PORT=str(worker.port))
            times: dict[str, list[float]] = {name: [] for name in KINDS}
            floor: list[float] = []
            for n in range(args.runs):
                for kind, (name, (argv, _, fresh)) in enumerate(KINDS.items()):
                    payload = {**payloads[name], fresh: f"bench-{kind}-{n}"}
                    command = [sys.executable, "-S", str(ENTRY), *argv]
                    times[name].append(run(command, json.dumps(payload).encode(), env))
                floor.append(run([sys.executable, "-S", "-c", "pass"], b"", env))
            worker.wait_idle()
            stored = {agent: sum(s["observations"] for s in worker.get(f"/api/sessions?agent={agent}")["sessions"])
                      for agent in AGENTS}
        finally:
            worker.stop()
    base = statistics.median(times["claude-code PostToolUse (Bash)"])
    for name, values in times.items():
        print(f"{name}: {summary(values)}, ÷ Claude Code {statistics.median(values) / base:.2f}")
    print(f"python -S -c pass: {summary(floor)}")
    print(f"observations stored by agent: {stored} ({args.runs} tool uses of each kind)")


if __name__ == "__main__":
    main()
