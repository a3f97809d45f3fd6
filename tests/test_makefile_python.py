"""The Makefile's choice of interpreter, with fake interpreters on PATH reporting other versions.

It takes the newest supported CPython that runs (python3.14 down to python3.11, then
python3; a pyenv shim of a version that is not selected fails to run and is passed over),
PYTHON when given, refuses to make a virtualenv with Python older than 3.11 saying what to
do, and says when an existing virtualenv was made with another interpreter.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NAMES = ("python3.14", "python3.13", "python3.12", "python3.11", "python3")


def interpreters(folder: Path, versions: dict[str, str | None]) -> dict[str, str]:
    """Fake interpreters in ``folder``: name -> version it reports (None: it fails to run, as a pyenv shim of an
    unselected version does). Each answers the Makefile's probe as Python of that version would: its own path
    when the version is supported, exit status 1 (a failed assert) when not; ``--version`` prints it."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in NAMES:
        version = versions.get(name)
        if version is None:
            body = f'echo "pyenv: {name}: command not found" >&2; exit 127'
        else:
            supported = tuple(int(part) for part in version.split(".")[:2]) >= (3, 11)
            body = (f'case "$1" in --version) echo "Python {version}";; *) '
                    + ('echo "$0";;' if supported else "exit 1;;") + " esac")
        (folder / name).write_text(f"#!/bin/sh\n{body}\n")
        (folder / name).chmod(0o755)
    return {"PATH": f"{folder}:{os.path.dirname(shutil.which('make') or '/usr/bin/make')}:/usr/bin:/bin"}


def make(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    plain = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "MAKEFLAGS", "MAKELEVEL")}
    return subprocess.run(["make", "--no-print-directory", "-s", *args], cwd=REPO, env={**plain, **env},
                          capture_output=True, text=True, timeout=60)


def chosen(env: dict[str, str], *args: str) -> str:
    return make(env, "--eval", "show-python: ; @echo $(PYTHON)", *args, "show-python").stdout.strip()


def test_the_newest_supported_python_that_runs_is_taken(tmp_path: Path) -> None:
    fakes = tmp_path / "bin"
    env = interpreters(fakes, {"python3.14": None, "python3.13": "3.13.1", "python3.12": "3.12.8",
                               "python3.11": "3.11.7", "python3": "3.11.7"})
    assert chosen(env) == str(fakes / "python3.13")  # 3.14's shim fails to run: passed over
    env = interpreters(fakes, {"python3": "3.14.0"})
    assert chosen(env) == str(fakes / "python3")
    assert chosen(env, "PYTHON=/opt/python3.12/bin/python3") == "/opt/python3.12/bin/python3"


def test_no_python_3_11_refuses_saying_what_to_install(tmp_path: Path) -> None:
    env = interpreters(tmp_path / "bin", {"python3": "3.9.6"})  # Apple's python3
    assert chosen(env) == ""
    venv = tmp_path / "venv"
    done = make(env, f"VENV={venv}", f"{venv}/.installed")
    assert done.returncode != 0 and not venv.exists()
    assert ("sessionmem needs CPython 3.11 or newer, and none of python3.14 python3.13 python3.12 python3.11 python3 "
            "is one (python3: Python 3.9.6): install Python 3.11+, or make PYTHON=/path/to/python3.x") in done.stdout


def test_a_virtualenv_made_with_another_python_is_said(tmp_path: Path) -> None:
    fakes = tmp_path / "bin"
    env = interpreters(fakes, {"python3.13": "3.13.1"})
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\nversion = 3.11.2\nexecutable = /usr/bin/python3.11\n")
    done = make(env, f"VENV={venv}", "--eval", "show-python: ; @echo $(PYTHON)", "show-python")
    assert (f"{venv} was made with /usr/bin/python3.11, not {fakes / 'python3.13'}: it keeps its interpreter; "
            f"`make clean`, then `make`, to make it again with {fakes / 'python3.13'}") in done.stderr
    (venv / "pyvenv.cfg").write_text(f"executable = {fakes / 'python3.13'}\n")
    assert "was made with" not in make(env, f"VENV={venv}", "--eval", "show-python: ; @true", "show-python").stderr
