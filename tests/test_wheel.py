"""A plain install works: the wheel, in a fresh virtualenv with nothing else, runs every command.

No extras, no checkout beside it, no ``.venv`` of ours: what ``pip install sessionmem``
gives a user. (It caught ``sessionmem backfill`` needing ``tqdm`` from the bench extra.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sessionmem.protocol.state import read_state
from sessionmem.testing.model_cache import place_model_cache

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
TRANSCRIPTS = REPO / "tests" / "fixtures" / "transcripts"


def run(*command: str | Path, env: dict[str, str] | None = None, timeout: float = 600,
        input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([str(part) for part in command], env=env, capture_output=True, timeout=timeout,
                          input=input)


def test_every_command_works_from_the_wheel_in_a_fresh_virtualenv(tmp_path: Path) -> None:
    built = run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", tmp_path / "dist", REPO)
    assert built.returncode == 0, built.stderr.decode()
    (wheel,) = (tmp_path / "dist").glob("sessionmem-*.whl")
    venv = tmp_path / "venv"
    # Installed by this environment's pip (``--python``) into a fresh one without pip or setuptools of its
    # own: it holds the wheel and what the wheel declares, nothing else. The dependencies are resolved from
    # the package index; not compiled (pip's bytecode of every one is ~20 s of CPU and pip's business: the
    # commands compile what they import).
    assert run(sys.executable, "-m", "venv", "--without-pip", venv).returncode == 0
    installed = run(sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "--quiet",
                    "--no-compile", wheel)
    assert installed.returncode == 0, installed.stderr.decode()[-3000:]

    data = tmp_path / "data"
    place_model_cache(tmp_path / "home")  # the int8 model, built once for the whole run, not in each HOME
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("SESSIONMEM_", "ANTHROPIC_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(SESSIONMEM_DATA_DIR=str(data), SESSIONMEM_PORT="0", HOME=str(tmp_path / "home"),
               PATH=f"{venv / 'bin'}:{env.get('PATH', '')}")
    sessionmem = venv / "bin" / "sessionmem"
    for command in ("serve", "status", "stop", "replay", "install", "uninstall", "backfill", "open", "doctor",
                    "search", "show"):
        helped = run(sessionmem, command, "--help", env=env, timeout=60)
        assert helped.returncode == 0, (command, helped.stderr.decode())

    worker = subprocess.Popen([str(sessionmem), "serve"], env={**env, "SESSIONMEM_CODE_WATCH": "0.5"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not (data / "worker.json").exists():
            assert time.monotonic() < deadline and worker.poll() is None, "the worker did not start"
            time.sleep(0.1)
        port = str(json.loads((data / "worker.json").read_text())["port"])
        env["SESSIONMEM_PORT"] = port
        status = run(sessionmem, "status", env=env, timeout=60)
        assert status.returncode == 0 and b"running" in status.stdout, status.stderr

        backfill = run(sessionmem, "backfill", TRANSCRIPTS, env=env, timeout=300)
        assert backfill.returncode == 0 and b"0 refused" in backfill.stdout, backfill.stderr.decode()[-2000:]
        # the hook, from the installed package, as Claude Code runs it
        entry = next((venv / "lib").glob("python3*/site-packages/sessionmem/hooks/entry.py"))
        hook = run(venv / "bin" / "python", "-S", entry, "UserPromptSubmit", env=env, timeout=30,
                   input=json.dumps({"session_id": "wheel", "cwd": str(tmp_path), "prompt": "divide by zero",
                                     "hook_event_name": "UserPromptSubmit"}).encode())
        assert hook.returncode == 0 and hook.stderr == b"", hook.stderr
        deadline = time.monotonic() + 120
        # The prompt, stored and found (among prompts: where it ranks among the fixtures' many
        # observations of divide() is the ranking's business, not the wheel's).
        while b"divide by zero" not in (found := run(sessionmem, "search", "divide by zero", "--kind", "prompt",
                                                     env=env, timeout=60)).stdout:
            assert time.monotonic() < deadline, (found.stdout, found.stderr)
            time.sleep(0.5)
        assert run(sessionmem, "show", "1", env=env, timeout=60).returncode == 0

        # An upgrade replaces a module the worker runs: it stops, and starts again with the new code.
        first = read_state(str(data))
        assert first is not None
        module = next((venv / "lib").glob("python3*/site-packages/sessionmem/redaction.py"))
        module.write_text(module.read_text() + "\nUPGRADED = True\n")
        deadline = time.monotonic() + 60
        while (again := read_state(str(data))) is None or again.started_at == first.started_at:
            assert time.monotonic() < deadline and worker.poll() is None, "the worker did not start again"
            time.sleep(0.2)
        assert again.pid == first.pid == worker.pid  # the same process, its code new
        env["SESSIONMEM_PORT"] = str(again.port)
        assert b"divide by zero" in run(sessionmem, "search", "divide", env=env, timeout=60).stdout
        assert b"code changed on disk" in (data / "worker.log").read_bytes()
        doctor = run(sessionmem, "doctor", env=env, timeout=60)
        assert b"worker" in doctor.stdout, doctor.stderr
        stopped = run(sessionmem, "stop", env=env, timeout=60)
        assert stopped.returncode == 0, stopped.stderr
        assert worker.wait(30) == 0
    finally:
        if worker.poll() is None:
            worker.kill()

