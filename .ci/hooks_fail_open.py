"""The hooks fail open: ``python .ci/hooks_fail_open.py`` runs both hook commands the way Claude Code runs
them -- the plugin's ``sh hook.sh PostToolUse`` and the hook entry ``python -S hooks/entry.py PostToolUse``
-- with a genuine PostToolUse payload (Claude Code 2.1.328, tests/fixtures) on stdin, and checks that each
exits 0 and writes nothing, within its budget.

This is the Windows job of the CI workflow (.github/workflows/ci.yml): on native Windows sessionmem does
not run, and every hook must leave Claude Code alone at once. Standard library only: nothing is installed
for it. It refuses to run elsewhere, where the hooks do their work: the plugin's first hook would start
installing sessionmem into a scratch directory.

Error handling:
    Every failed check is printed; the exit status is 1 if any failed.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAYLOADS = REPO / "tests" / "fixtures" / "payloads-2.1.328.jsonl"
STAGE = "PostToolUse"
RUNS = 5
# "At once": a hook that waited for a worker would take up to its 3 s deadline; a cold Windows runner
# starts Python and sh in well under a second.
BUDGET_S = 2.0
# A run that hangs is stopped here (Claude Code's own timeout for this hook is 5 s).
HARD_TIMEOUT_S = 10.0


def post_tool_use_payload() -> bytes:
    """The first recorded PostToolUse payload, as Claude Code wrote it on the hook's stdin."""
    with open(PAYLOADS, encoding="utf-8") as lines:
        for line in lines:
            if line.strip() and json.loads(line).get("hook_event_name") == STAGE:
                return line.encode("utf-8")
    raise SystemExit(f"no {STAGE} payload in {PAYLOADS}")


def hook_commands() -> dict[str, list[str]]:
    """Both commands, with paths relative to the repository (run from it): Git for Windows' sh takes
    them as they are."""
    return {"sh plugin/bootstrap/hook.sh": ["sh", "plugin/bootstrap/hook.sh", STAGE],
            "python -S hooks/entry.py": [sys.executable, "-S", "hooks/entry.py", STAGE]}


def check(name: str, command: list[str], payload: bytes, env: dict[str, str]) -> list[str]:
    """The problems of ``RUNS`` runs of ``command`` (none when it failed open every time, in budget)."""
    problems: list[str] = []
    took: list[float] = []
    for _ in range(RUNS):
        started = time.monotonic()
        try:
            done = subprocess.run(command, input=payload, capture_output=True, cwd=REPO, env=env,
                                  timeout=HARD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return [f"{name}: still running after {HARD_TIMEOUT_S:.0f} s"]
        took.append(time.monotonic() - started)
        if done.returncode != 0:
            problems.append(f"{name}: exit status {done.returncode}")
        if done.stdout or done.stderr:
            problems.append(f"{name}: wrote {done.stdout[:200]!r} on stdout, {done.stderr[:200]!r} on stderr")
    median = statistics.median(took)
    print(f"{name}: median {median * 1000:.0f} ms over {RUNS} runs (budget {BUDGET_S * 1000:.0f} ms)")
    if median > BUDGET_S:
        problems.append(f"{name}: median {median:.2f} s, over the budget of {BUDGET_S:.1f} s")
    return problems


def main() -> int:
    if sys.platform != "win32":
        print("this checks native Windows, where every hook exits at once; elsewhere the hooks do their work")
        return 2
    payload = post_tool_use_payload()
    with tempfile.TemporaryDirectory(prefix="sessionmem-hooks-") as scratch:
        # Where Claude Code would point an installed plugin; nothing is installed there.
        env = {**os.environ, "CLAUDE_PLUGIN_ROOT": str(REPO), "CLAUDE_PLUGIN_DATA": os.path.join(scratch, "plugin"),
               "SESSIONMEM_DATA_DIR": os.path.join(scratch, "data")}
        problems = [problem for name, command in hook_commands().items()
                    for problem in check(name, command, payload, env)]
    for problem in problems:
        print(f"FAILED {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
