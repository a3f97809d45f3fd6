"""The per-platform resolution check of ``make lint`` (tools/resolve_platforms.py) on tiny requirement sets.

A pin that has no wheel on a platform fails there, naming the platform, the Python and the
pin; the markers of a pin are evaluated for the target platform, not for this machine; the
notes say what a marker leaves out where. The resolving tests ask the package index.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import resolve_platforms
from tools.resolve_platforms import PLATFORMS, check, left_out, notes

LINUX, WINDOWS = PLATFORMS[0], PLATFORMS[-1]
INTEL_MAC = next(p for p in PLATFORMS if p.sys_platform == "darwin" and p.platform_machine == "x86_64")


def pyproject(tmp_path: Path, runtime: list[str], test: list[str] = ()) -> Path:  # type: ignore[assignment]
    quoted = ", ".join(f'"{line}"' for line in runtime)
    extra = ", ".join(f'"{line}"' for line in test)
    path = tmp_path / "pyproject.toml"
    path.write_text(f'[project]\nname = "fake"\nversion = "0"\ndependencies = [{quoted}]\n'
                    f'[project.optional-dependencies]\ntest = [{extra}]\n', encoding="utf-8")
    return path


@pytest.mark.slow
def test_a_pin_without_a_wheel_fails_naming_the_platform_the_python_and_the_pin(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # pywin32 ships Windows wheels only: the suite's extra cannot resolve on Linux, the runtime can.
    path = pyproject(tmp_path, ["six==1.17.0", "pywin32==311; sys_platform == 'win32'"], ["pywin32==311"])
    status = resolve_platforms.main(["--pyproject", str(path), "--python", "3.12", "--jobs", "2"])
    out = capsys.readouterr().out
    assert status == 1
    assert "!!  Linux x86_64 (glibc 2.28+), Python 3.12: runtime + test: no wheel of pywin32==311" in out
    assert "No matching distribution found for pywin32==311" in out
    # The markers are the target's: Windows gets pywin32 (this machine's pip alone would skip it there).
    assert "ok  Windows amd64, Python 3.12: runtime: 2 packages" in out
    assert "ok  Linux aarch64 (glibc 2.28+), Python 3.12: runtime: 1 packages" in out
    # Linux x86_64 and both Macs run the suite, and the extra has no wheel there.
    assert out.count("!!") == 3 and "3 of 5 combinations do not resolve" in out


@pytest.mark.slow
def test_pins_that_resolve_everywhere_pass(tmp_path: Path) -> None:
    path = pyproject(tmp_path, ["six==1.17.0", "colorama==0.4.6; sys_platform == 'win32'"])
    outcomes = check(path, platforms=(LINUX, WINDOWS), pythons=("3.11", "3.14"), jobs=2)
    assert [(o.platform, o.python, o.ok) for o in outcomes] == [
        (LINUX, "3.11", True), (LINUX, "3.14", True), (WINDOWS, "3.11", True), (WINDOWS, "3.14", True)]
    assert [o.packages for o in outcomes] == [1, 1, 2, 2]


def test_markers_leave_out_a_project_only_where_no_line_of_it_applies() -> None:
    lines = ["onnxruntime==1.31.1; sys_platform != 'darwin' or platform_machine != 'x86_64'",
             "onnxruntime==1.23.2; sys_platform == 'darwin' and platform_machine == 'x86_64' and python_version < '3.14'",
             "six==1.17.0"]
    assert left_out(lines, INTEL_MAC, "3.13") == ()
    assert left_out(lines, INTEL_MAC, "3.14") == ("onnxruntime",)
    assert left_out(lines, LINUX, "3.14") == ()
    missing = resolve_platforms.Outcome(INTEL_MAC, "3.14", (), True, left_out=("onnxruntime",))
    assert notes([missing]) == ["no onnxruntime on macOS x86_64 (13+), Python 3.14 (its markers leave it out): semantic search "
                                "is off there (words-only search; `sessionmem doctor` says so)"]


def test_the_pins_are_read_from_pyproject() -> None:
    pins = resolve_platforms.requirements(resolve_platforms.ROOT / "pyproject.toml", ("test",))
    assert any(line.startswith("onnxruntime==") for line in pins) and any(line.startswith("pytest==") for line in pins)
