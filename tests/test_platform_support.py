"""Windows, honestly: on native Windows every hook exits 0 at once, and ``install`` and ``doctor`` say why
and what to do (WSL 2). The decision takes the platform as a parameter; the plugin's ``hook.sh`` runs for real
under ``sh`` with a ``uname`` that answers as Git Bash's does, and without ``python3``."""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sessionmem.cli.agent_commands import cmd_install
from sessionmem.cli.doctor import cmd_doctor
from sessionmem.protocol.oskit import NATIVE_WINDOWS
from sessionmem.protocol.platform_support import unsupported_platform

REPO = Path(__file__).resolve().parent.parent
HOOK_SH = REPO / "plugin" / "bootstrap" / "hook.sh"
ENTRY = REPO / "hooks" / "entry.py"


@pytest.mark.parametrize("platform", ["win32", "cygwin", "msys"])
def test_native_windows_is_not_supported_and_the_reason_says_to_use_wsl(platform: str) -> None:
    said = unsupported_platform(platform)
    assert "native Windows" in said and "WSL 2" in said and "Claude Code" in said


@pytest.mark.parametrize("platform", ["linux", "darwin"])
def test_linux_wsl_and_macos_are_supported(platform: str) -> None:
    assert unsupported_platform(platform) == ""  # (inside WSL 2 Python says "linux")


def test_the_hook_entry_exits_0_on_native_windows_before_anything_else() -> None:
    """The first statement the hook runs as ``__main__`` is the platform test, with the platforms of
    :data:`NATIVE_WINDOWS`, and it exits 0: nothing is imported, read or printed before it."""
    module = ast.parse(ENTRY.read_text())
    (main,) = [node for node in module.body if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)]
    first = main.body[0]
    assert isinstance(first, ast.If)
    assert ast.unparse(first.test) == f"sys.platform in {NATIVE_WINDOWS!r}"
    assert [ast.unparse(statement) for statement in first.body] == ["raise SystemExit(0)"]


def test_install_on_native_windows_refuses_says_why_and_writes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    assert cmd_install(argparse.Namespace(mcp=True), platform="win32") == 1
    said = capsys.readouterr()
    assert "not installed: native Windows (win32)" in said.err and "inside WSL 2" in said.err
    assert list(tmp_path.iterdir()) == []  # no ~/.claude/settings.json, no ~/.claude.json


def test_doctor_on_native_windows_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cmd_doctor(argparse.Namespace(data_dir=str(tmp_path / "memory"), port=None), platform="win32") == 1
    out = capsys.readouterr().out
    assert "[!!] native Windows (win32)" in out and "inside WSL 2" in out and "1 problem(s)" in out


# -- the plugin's hook command, for real under sh ----------------------------------------------------------


def _bin_with(tmp_path: Path, **scripts: str) -> Path:
    """A directory for PATH holding only ``scripts`` (name -> shell text): no python3 unless given."""
    directory = tmp_path / "bin"
    directory.mkdir()
    for name, text in scripts.items():
        script = directory / name
        script.write_text(f"#!/bin/sh\n{text}\n")
        script.chmod(0o755)
    return directory


def _hook_sh(tmp_path: Path, path: Path, stage: str = "PostToolUse", **env: str) -> subprocess.CompletedProcess[str]:
    sh = shutil.which("sh")
    assert sh is not None
    data = tmp_path / "plugin-data"
    data.mkdir(exist_ok=True)
    return subprocess.run([sh, str(HOOK_SH), stage], input='{"session_id": "s"}', text=True,
                          capture_output=True, timeout=30,
                          env={"PATH": str(path), "CLAUDE_PLUGIN_DATA": str(data), "CLAUDE_PLUGIN_ROOT": str(REPO),
                               "SESSIONMEM_DATA_DIR": str(tmp_path / "memory"), "SESSIONMEM_PORT": "9", **env})


@pytest.mark.parametrize("uname", ["MINGW64_NT-10.0-22631", "MSYS_NT-10.0-22631", "CYGWIN_NT-10.0-22631"])
def test_hook_sh_exits_0_at_once_in_a_windows_shell(tmp_path: Path, uname: str) -> None:
    ran = tmp_path / "python3-ran"
    path = _bin_with(tmp_path, uname=f"echo {uname}", python3=f'touch "{ran}"')
    result = _hook_sh(tmp_path, path)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert not ran.exists()


def test_hook_sh_exits_0_at_once_where_windows_says_so(tmp_path: Path) -> None:
    ran = tmp_path / "python3-ran"
    path = _bin_with(tmp_path, uname="echo Linux", python3=f'touch "{ran}"')
    result = _hook_sh(tmp_path, path, OS="Windows_NT")
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert not ran.exists()


def test_hook_sh_without_python3_exits_0_rather_than_a_hook_error(tmp_path: Path) -> None:
    path = _bin_with(tmp_path, uname="echo Darwin")
    assert shutil.which("python3", path=str(path)) is None
    result = _hook_sh(tmp_path, path)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert not (tmp_path / "memory").exists()


@pytest.mark.parametrize(("system", "how"), [("Darwin", "brew install python@3.13"), ("Linux", "python3-venv")])
def test_hook_sh_without_python3_says_once_at_session_start_what_to_install(tmp_path: Path, system: str,
                                                                               how: str) -> None:
    path = _bin_with(tmp_path, uname=f"echo {system}", mkdir='/bin/mkdir "$@"')
    first, second = (_hook_sh(tmp_path, path, "SessionStart") for _ in range(2))
    assert first.returncode == 0 and first.stderr == ""
    message = json.loads(first.stdout)["systemMessage"]
    assert "Python 3.11 or newer" in message and how in message
    assert (second.returncode, second.stdout, second.stderr) == (0, "", "")


def test_hook_sh_on_a_mac_without_command_line_tools_takes_the_python3_stub_for_none(tmp_path: Path) -> None:
    """/usr/bin/python3 on a Mac without the Command Line Tools opens an installer dialog: never run it."""
    if shutil.which("python3", path="/usr/bin") != "/usr/bin/python3":
        pytest.skip("needs a /usr/bin/python3 to stand for the stub")  # any Debian or macOS has one
    path = _bin_with(tmp_path, uname="echo Darwin", **{"xcode-select": "exit 2"})
    result = _hook_sh(tmp_path, path, "SessionStart", PATH=f"{path}:/usr/bin")
    assert result.returncode == 0 and "Python 3.11 or newer" in json.loads(result.stdout)["systemMessage"]
    assert not (tmp_path / "memory").exists()


MCP_SH = REPO / "plugin" / "bootstrap" / "mcp.sh"


def _mcp_sh(path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    sh = shutil.which("sh")
    assert sh is not None
    return subprocess.run([sh, str(MCP_SH)], text=True, capture_output=True, timeout=30, stdin=subprocess.DEVNULL,
                          env={"PATH": str(path), **env})


def test_mcp_sh_runs_the_bootstrap_with_python3(tmp_path: Path) -> None:
    ran = tmp_path / "python3-ran"
    result = _mcp_sh(_bin_with(tmp_path, uname="echo Darwin", python3=f'echo "$@" > "{ran}"'))
    assert result.returncode == 0 and ran.read_text().split()[-1] == "mcp"


@pytest.mark.parametrize(("uname", "env", "said"), [
    ("echo Linux", {}, "no python3"),
    ("echo MINGW64_NT-10.0-22631", {}, "WSL 2"),
    ("echo Linux", {"OS": "Windows_NT"}, "WSL 2"),
])
def test_mcp_sh_says_why_it_cannot_start(tmp_path: Path, uname: str, env: dict[str, str], said: str) -> None:
    result = _mcp_sh(_bin_with(tmp_path, uname=uname), **env)
    assert result.returncode == 1 and result.stdout == "" and said in result.stderr


def test_mcp_sh_on_a_mac_without_command_line_tools_never_starts_the_python3_stub(tmp_path: Path) -> None:
    if shutil.which("python3", path="/usr/bin") != "/usr/bin/python3":
        pytest.skip("needs a /usr/bin/python3 to stand for the stub")  # any Debian or macOS has one
    path = _bin_with(tmp_path, uname="echo Darwin", **{"xcode-select": "exit 2"})
    result = _mcp_sh(path, PATH=f"{path}:/usr/bin")
    assert result.returncode == 1 and "no python3" in result.stderr


def test_hook_sh_on_linux_and_macos_still_runs_python3(tmp_path: Path) -> None:
    ran = tmp_path / "python3-ran"
    path = _bin_with(tmp_path, uname="echo Darwin", python3=f'echo "$@" > "{ran}"')
    result = _hook_sh(tmp_path, path)
    assert result.returncode == 0
    assert ran.read_text().split()[-2:] == ["hook", "PostToolUse"]
    assert os.path.basename(ran.read_text().split()[1]) == "run.py"
