"""Acceptance 1: the README's run command starts the worker on its embedded defaults."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from sessionmem.testing.model_cache import place_model_cache

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent


def test_make_run_serves_health_with_no_api_key(tmp_path: Path) -> None:
    # A new HOME: the default data dir (~/.sessionmem) is created from scratch.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SESSIONMEM_", "ANTHROPIC_"))}
    env["HOME"] = str(tmp_path)
    place_model_cache(tmp_path)  # the int8 model, built once for the whole run, not in each HOME
    process = subprocess.Popen(["make", "-s", "run", "ARGS=--port 0"], cwd=REPO, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    state = tmp_path / ".sessionmem" / "worker.json"
    try:
        deadline = time.monotonic() + 120  # may include creating the virtualenv
        while not state.exists():
            assert process.poll() is None, process.stdout.read().decode() if process.stdout else ""
            assert time.monotonic() < deadline, "worker did not start"
            time.sleep(0.1)
        port = json.loads(state.read_text())["port"]
        token = (tmp_path / ".sessionmem" / "auth.token").read_text().strip()
        asked = urllib.request.Request(f"http://127.0.0.1:{port}/api/health", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(asked, timeout=5) as response:
            health = json.loads(response.read())
        assert response.status == 200 and health["status"] == "ok"
        assert health["compressor"] == "offline"
        assert health["dataDir"] == str(tmp_path / ".sessionmem")
        assert (tmp_path / ".sessionmem" / "sessionmem.db").exists()
        assert (tmp_path / ".sessionmem" / "worker.log").exists()
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)
    assert not state.exists()  # a clean shutdown removes its state file
