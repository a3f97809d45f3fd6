"""Where onnxruntime has no wheel (an Intel Mac on Python 3.14) sessionmem still runs: words-only search, said why.

The platform is simulated below the code under test, in the interpreter: a directory put
first on ``PYTHONPATH`` either hides ``onnxruntime`` (its ``sitecustomize`` marks the module
absent, as an install without it would be: ``find_spec`` finds nothing, ``import`` fails) or
holds an ``onnxruntime`` package whose import raises ``ImportError`` (installed, but not
loadable here: a missing system library).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sessionmem.embed.availability import cannot_load, missing_runtime
from sessionmem.protocol import routes
from sessionmem.testing.worker_process import WorkerProcess, start_worker
from tests.test_search_cli import record_the_empty_cart_fix


def offline_worker(data: Path, env: dict[str, str]) -> WorkerProcess:
    """A worker process in ``data`` with the offline compressor, its environment ``env``."""
    return start_worker(data, env={**env, "SESSIONMEM_COMPRESSOR": "offline", "SESSIONMEM_BATCH_QUIET": "0.05"},
                        timeout=60)


def without_onnxruntime(tmp_path: Path) -> dict[str, str]:
    """PYTHONPATH for an interpreter without onnxruntime installed."""
    shim = tmp_path / "no-onnxruntime"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text("import sys\nsys.modules['onnxruntime'] = None  # not installed\n")
    return {"PYTHONPATH": str(shim)}


def with_broken_onnxruntime(tmp_path: Path) -> dict[str, str]:
    """PYTHONPATH for an interpreter whose onnxruntime is installed but cannot be imported."""
    package = tmp_path / "broken-onnxruntime" / "onnxruntime"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "raise ImportError('libonnxruntime.so.1: cannot open shared object file: No such file or directory')\n")
    return {"PYTHONPATH": str(package.parent)}


def run_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=120)


def sessionmem(data: Path, port: int, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    plain = {k: v for k, v in os.environ.items() if not k.startswith("SESSIONMEM_")}
    return subprocess.run([sys.executable, "-m", "sessionmem", *args, "--data-dir", str(data), "--port", str(port)],
                          env={**plain, **env}, capture_output=True, text=True, timeout=60)


def test_the_reason_names_the_package_the_platform_and_the_python(tmp_path: Path) -> None:
    assert missing_runtime() == ""  # this machine has it
    code = "from sessionmem.embed.availability import missing_runtime; print(missing_runtime())"
    said = run_python(code, without_onnxruntime(tmp_path)).stdout.strip()
    here = f"Python {sys.version_info.major}.{sys.version_info.minor}"
    assert said.startswith("semantic search is off: onnxruntime is not installed: it has no wheel for this "
                           "platform/Python (Linux ") and said.endswith(f", {here}); words-only search"), said
    assert cannot_load("onnxruntime", ImportError("no libonnxruntime")).startswith(
        "semantic search is off: onnxruntime cannot be loaded on this platform/Python (")


def test_an_onnxruntime_that_cannot_be_imported_is_tried_once_and_said(tmp_path: Path) -> None:
    code = """if True:
        import time
        from sessionmem.embed.base import EmbedderUnavailableError
        from sessionmem.embed.choice import choose_embedder
        embedder = choose_embedder("minilm")
        for attempt in range(2):
            started = time.perf_counter()
            try:
                embedder.embed(["a text"])
            except EmbedderUnavailableError as exc:
                print(attempt, round(time.perf_counter() - started, 4), exc)
        print("stats:", embedder.statistics().unavailable)
        """
    done = run_python(code, with_broken_onnxruntime(tmp_path))
    lines = done.stdout.splitlines()
    assert len(lines) == 3, done.stdout + done.stderr
    reason = ("semantic search is off: onnxruntime cannot be loaded on this platform/Python (Linux ")
    assert all(reason in line and "libonnxruntime.so.1: cannot open shared object file" in line for line in lines)
    assert float(lines[1].split()[1]) < 0.01  # the second call does not import again


@pytest.mark.slow
def test_a_worker_without_onnxruntime_searches_by_words_and_doctor_says_why(tmp_path: Path) -> None:
    env = without_onnxruntime(tmp_path)
    data = tmp_path / "data"
    with offline_worker(data, env) as worker:
        debug = worker.get(routes.DEBUG_JSON)
        reason = debug["embedder"]["embedder"]["unavailable"]
        assert reason.startswith("semantic search is off: onnxruntime is not installed: it has no wheel for this "
                                 "platform/Python ("), reason
        assert (debug["embedder"]["embedder"]["name"], debug["index"]["state"]) == ("none", "off")
        record_the_empty_cart_fix(worker)

        found = sessionmem(data, worker.port, "search", "cart", "--project", "shop", "--json", env=env)
        answer = json.loads(found.stdout)
        assert answer["mode"] == "hybrid" and answer["vectors"] == "off", answer
        assert answer["results"] and all(result["matchedBy"] == ["words"] for result in answer["results"])

        status = sessionmem(data, worker.port, "status", env=env)
        assert f"vector index: off ({reason})" in status.stdout, status.stdout
        doctor = sessionmem(data, worker.port, "doctor", env=env)
        assert f"[ok] embedder: {reason}" in doctor.stdout, doctor.stdout
    # No worker: doctor asks this interpreter.
    assert "[ok] embedder: semantic search is off: onnxruntime is not installed" in sessionmem(
        data, worker.port, "doctor", env=env).stdout
    assert "[ok] embedder: minilm (search by meaning and by words)" in sessionmem(data, worker.port, "doctor",
                                                                                  env={}).stdout


@pytest.mark.slow
def test_a_worker_whose_onnxruntime_cannot_load_searches_by_words_and_doctor_says_why(tmp_path: Path) -> None:
    env = with_broken_onnxruntime(tmp_path)
    data = tmp_path / "data"
    with offline_worker(data, env) as worker:
        record_the_empty_cart_fix(worker)
        found = sessionmem(data, worker.port, "search", "cart", "--project", "shop", "--json", env=env)
        answer = json.loads(found.stdout)
        assert answer["vectors"] in ("failed", "loading"), answer  # the model cannot load: words alone
        assert answer["results"] and all(result["matchedBy"] == ["words"] for result in answer["results"])
        # Said once the model was tried (the worker tries at once, when it is ready).
        said = worker.wait_until(lambda: worker.get(routes.DEBUG_JSON)["embedder"]["embedder"]["unavailable"])
        assert said.startswith("semantic search is off: onnxruntime cannot be loaded on this platform/Python ("), said
        doctor = sessionmem(data, worker.port, "doctor", env=env)
        assert f"[!!] embedder minilm: {said}" in doctor.stdout, doctor.stdout
        assert "libonnxruntime.so.1: cannot open shared object file" in doctor.stdout
    log = (data / "worker.stderr").read_text(errors="replace")
    assert "semantic search is off, words-only: " in log and "Traceback" not in log, log[-4000:]
