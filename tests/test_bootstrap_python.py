"""The marketplace plugin's bootstrap finds a Python to make its environment from (plugin/bootstrap/
interpreters.py), or says exactly what to install, once; and makes the environment again when
its Python disappears. Candidates are fake interpreters on PATH (shell scripts answering the
version question as another Python would) beside real ones placed under other names; the
bootstrap runs as Claude Code runs it: ``sh plugin/bootstrap/hook.sh <Stage>``."""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
BOOTSTRAP = REPO / "plugin" / "bootstrap"
HOOK_SH = BOOTSTRAP / "hook.sh"


def load_interpreters() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bootstrap_interpreters", BOOTSTRAP / "interpreters.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


interpreters = load_interpreters()


def fake_python(bin_dir: Path, name: str, version: str = "3.12.0", implementation: str = "cpython",
                venv: str = "", free_threaded: bool = False, hang: bool = False) -> Path:
    """A script that answers the bootstrap's question as such a Python would (and does nothing else)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    answer = bin_dir / f"{name}.answer"
    answer.write_text(json.dumps({"implementation": implementation, "version": [int(p) for p in version.split(".")],
                                  "executable": str(path), "free_threaded": free_threaded, "venv": venv}) + "\n")
    # A hanging one sleeps in a child, which must not keep the search waiting on its pipe.
    body = "/bin/sleep 300\n" if hang else f'exec /bin/cat "{answer}"\n'
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def real_python(bin_dir: Path, name: str, target: str) -> Path:
    """A real interpreter under another name (a symbolic link: it still finds its own library)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / name).symlink_to(target)
    return bin_dir / name


def installed(version: str) -> str | None:
    """A real CPython ``version`` on this machine (pyenv's, or on PATH), None when there is none."""
    found = sorted(glob.glob(f"{Path.home()}/.pyenv/versions/{version}.*/bin/python{version}"))
    return found[-1] if found else shutil.which(f"python{version}")


NO_ENSUREPIP = "ModuleNotFoundError: No module named 'ensurepip'"


# -- the search, in process --------------------------------------------------------------------


def test_the_newest_suitable_python_is_chosen_and_every_other_is_refused_with_its_reason(tmp_path: Path) -> None:
    bin_dir, elsewhere = tmp_path / "bin", tmp_path / "elsewhere"
    apple = fake_python(bin_dir, "python3", "3.9.6")
    no_venv = fake_python(bin_dir, "python3.14", "3.14.0", venv=NO_ENSUREPIP)
    hangs = fake_python(bin_dir, "python3.13", "3.13.1", hang=True)
    named_312 = real_python(bin_dir, "python3.12", sys.executable)  # the running Python (3.11, say) named 3.12
    pypy = fake_python(bin_dir, "python3.11", "3.11.9", implementation="pypy")
    too_new = fake_python(elsewhere, "python3.15", "3.15.0")
    free_threaded = fake_python(elsewhere, "python3.13t", "3.13.1", free_threaded=True)
    broken = elsewhere / "python3.12"
    broken.write_text("not a program\n")  # no #! line: it cannot be started
    broken.chmod(0o755)
    places = [str(too_new), str(free_threaded), str(broken)]
    # A real CPython newer than the one running the tests, if this machine has one (the newest).
    newer = next((found for minor in range(14, sys.version_info[1], -1) if (found := installed(f"3.{minor}"))), None)
    if newer:
        places.append(newer)

    started = time.monotonic()
    found = interpreters.search(running=str(apple), path=str(bin_dir), home=str(tmp_path), environ={},
                                places=places, timeout=2.0)
    assert time.monotonic() - started < 30  # the hanging one was cut off at its timeout

    verdicts = {v.path: v for v in found.verdicts}
    assert verdicts[str(apple)].refused == "3.9.6, older than 3.11"
    assert verdicts[str(no_venv)].refused == "3.14.0 without its venv module"
    assert verdicts[str(no_venv)].describe() == f"refused: {no_venv}: 3.14.0 without its venv module ({NO_ENSUREPIP})"
    assert verdicts[str(hangs)].refused == "did not answer within 2 s"
    assert verdicts[str(pypy)].refused == "pypy 3.11.9, not CPython"
    assert verdicts[str(too_new)].refused == "3.15.0, newer than sessionmem supports (3.14)"
    assert "free-threaded" in verdicts[str(free_threaded)].refused
    assert verdicts[str(broken)].refused.startswith("did not start: ")
    # Asked, not trusted by name: python3.12 is the Python running the tests, suitable.
    assert verdicts[str(named_312)].answer.version[:2] == sys.version_info[:2]
    assert verdicts[str(named_312)].refused == ""
    assert found.uv is None
    if newer:  # a real newer CPython wins over the running one, whatever their names
        assert found.chosen.path == newer
    else:
        assert found.chosen.path == str(named_312)


def test_one_python_under_several_names_is_listed_once(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    real_python(bin_dir, "python3", sys.executable)
    real_python(bin_dir, f"python3.{sys.version_info.minor}", sys.executable)
    found = interpreters.search(running=sys.executable, path=str(bin_dir), home=str(tmp_path), environ={}, places=[])
    assert [v.path for v in found.verdicts] == [sys.executable]
    assert found.chosen.path == sys.executable


def test_uv_finds_a_python_and_provisions_one_when_there_is_none(tmp_path: Path) -> None:
    """``uv python find`` is a candidate; with none suitable, ``uv python install`` provides uv's CPython."""
    bin_dir, uv_pythons = tmp_path / "bin", tmp_path / "uv-pythons"
    fake_python(bin_dir, "python3", "3.10.12")
    calls = tmp_path / "uv-calls"
    uv = bin_dir / "uv"
    # A fake uv: `find` answers with what `install` put in place.
    uv.write_text(f"""#!/bin/sh
echo "$@" >> "{calls}"
case "$2" in
  find) [ -e "{uv_pythons}/python3.13" ] && echo "{uv_pythons}/python3.13" && exit 0; exit 2 ;;
  install) /bin/mkdir -p "{uv_pythons}" && /bin/ln -s "{sys.executable}" "{uv_pythons}/python3.13" ;;
esac
""")
    uv.chmod(0o755)
    lines: list[str] = []
    chosen = interpreters.find_python(log=lines.append, running="", path=str(bin_dir), home=str(tmp_path),
                                      environ={}, places=[])
    assert chosen.path == f"{uv_pythons}/python3.13" and chosen.refused == ""
    assert calls.read_text().splitlines() == ["python find --system >=3.11,<3.15", "python install 3.13",
                                              "python find --system 3.13"]
    assert f"no suitable Python: installing CPython 3.13 with {uv}" in lines

    # Once installed, `uv python find` offers it as a candidate: nothing more is installed.
    found = interpreters.search(running="", path=str(bin_dir), home=str(tmp_path), environ={}, places=[])
    assert found.chosen.path == f"{uv_pythons}/python3.13"
    assert calls.read_text().count("install") == 1


def test_with_none_the_sentence_says_what_to_install_on_this_os(tmp_path: Path) -> None:
    fake_python(tmp_path, "python3", "3.9.6")
    with pytest.raises(interpreters.NoPython) as raised:
        interpreters.find_python(log=lambda line: None, running="", path=str(tmp_path), home=str(tmp_path),
                                 environ={}, places=[])
    assert str(raised.value).startswith(f"sessionmem needs Python 3.11 or newer and found none ({tmp_path}/python3 "
                                        "is 3.9.6, older than 3.11). Install ")
    verdicts = interpreters.search(running="", path=str(tmp_path), home=str(tmp_path), environ={}, places=[]).verdicts
    assert interpreters.what_to_install(verdicts, "darwin") == (
        "Install Python 3.13 from https://www.python.org/downloads/macos/ or with `brew install python@3.13` "
        "(or install uv, `brew install uv`, and sessionmem gets its own Python); the next session sets memory up.")
    uv = "(or install uv (`curl -LsSf https://astral.sh/uv/install.sh | sh`) and sessionmem gets its own Python)"
    assert interpreters.what_to_install(verdicts, "linux", ["debian"]) == (
        "Install Python 3.11 or newer with its venv module: `sudo apt install python3 python3-venv` (Debian 12, "
        f"Ubuntu 24.04 and newer) {uv}; the next session sets memory up.")
    assert "`sudo dnf install python3.12`" in interpreters.what_to_install(verdicts, "linux", ["rocky", "rhel"])
    assert "`sudo pacman -S python`" in interpreters.what_to_install(verdicts, "linux", ["arch"])
    assert "your distribution's Python 3.11 or newer" in interpreters.what_to_install(verdicts, "linux", ["gentoo"])
    # Debian's python3 without python3-venv: the package that is missing.
    debian = fake_python(tmp_path, "python3.12", "3.12.3", venv=NO_ENSUREPIP)
    lacking = [interpreters.judge(str(debian), 5.0)]
    assert interpreters.what_to_install(lacking, "linux", ["ubuntu", "debian"]) == (
        f"Install its venv module with `sudo apt install python3.12-venv` {uv}; the next session sets memory up.")


def test_the_real_debian_venv_check_passes_for_a_complete_python() -> None:
    """The question's venv check on real interpreters: this one has venv and ensurepip."""
    verdict = interpreters.judge(sys.executable, 30.0)
    assert verdict.refused == "" and verdict.answer.implementation == "cpython"
    old = installed("3.9") or installed("3.10")
    if old:  # a real old one answers too (the search and its question run on Python 3.9)
        assert interpreters.judge(old, 30.0).refused.endswith("older than 3.11")


# -- as Claude Code runs it ------------------------------------------------------------------


def old_python() -> str:
    """A real Python older than 3.11 (as a Mac's python3 is Apple's 3.9), for run.py to run under."""
    found = installed("3.9") or installed("3.10")
    if not found:
        pytest.skip("no Python 3.9 or 3.10 on this machine to run the bootstrap under")
    return found


def hook(data: Path, bin_dir: Path, stage: str, payload: dict[str, Any] | None = None,
         **extra: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": str(bin_dir), "HOME": str(data / "home"), "CLAUDE_PLUGIN_DATA": str(data),
           "CLAUDE_PLUGIN_ROOT": str(REPO), "SESSIONMEM_DATA_DIR": str(data / "memory"), "SESSIONMEM_PORT": "9",
           **extra}
    # In this checkout, as when a user's project is sessionmem's own source (a `sessionmem` folder in the cwd).
    return subprocess.run(["/bin/sh", str(HOOK_SH), stage], input=json.dumps(payload or {"session_id": "s"}),
                          env=env, text=True, capture_output=True, timeout=60, cwd=REPO)


def system_message(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["systemMessage"] if result.stdout else ""


def wait_for_failed_install(data: Path, attempt: int = 1, timeout: float = 120) -> str:
    """The end of the background install's ``attempt``-th try (which failed): its log."""
    deadline = time.monotonic() + timeout
    log = data / "install.log"
    while not log.exists() or log.read_text().count("install failed") < attempt:
        assert time.monotonic() < deadline, log.read_text() if log.exists() else "no install.log"
        time.sleep(0.2)
    wait_for_the_install_to_end(data, timeout)  # install.failed written, the lock released
    return log.read_text()


def wait_for_the_install_to_end(data: Path, timeout: float) -> None:
    """Until the install started has released its lock (as run.py tells that one runs)."""
    import fcntl

    deadline = time.monotonic() + timeout
    while not (data / "install.log").exists() or "installing sessionmem from" not in (data / "install.log").read_text():
        assert time.monotonic() < deadline
        time.sleep(0.2)
    lock = os.open(data / "install.lock", os.O_RDWR)
    try:
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                assert time.monotonic() < deadline, (data / "install.log").read_text()
                time.sleep(1)
    finally:
        os.close(lock)


def no_fixed_places(home: Path) -> None:
    if any(os.path.exists(p) for p in interpreters.fixed_places(str(home), {})):
        pytest.skip("this machine has a Python in one of the usual places, which the search would find")


def test_with_no_python_session_start_says_what_to_install_once(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    real_python(bin_dir, "python3", old_python())  # the hook's python3 (run.py, install.py) is too old
    fake_python(bin_dir, "python3.14", "3.14.0", venv=NO_ENSUREPIP)
    fake_python(bin_dir, "python3.11", "3.11.9", implementation="pypy")
    no_fixed_places(tmp_path / "home")

    # The first session: the install starts in the background; nothing waits for it.
    assert "installing its Python environment" in system_message(hook(tmp_path, bin_dir, "SessionStart"))
    log = wait_for_failed_install(tmp_path)
    assert f"refused: {bin_dir}/python3.14: 3.14.0 without its venv module ({NO_ENSUREPIP})" in log
    assert f"refused: {bin_dir}/python3.11: pypy 3.11.9, not CPython" in log
    sentence = (tmp_path / "python-needed").read_text().strip()
    assert sentence.startswith(f"sessionmem needs Python 3.11 or newer and found none ({bin_dir}/python3 is 3.")
    assert f"{bin_dir}/python3.14 is 3.14.0 without its venv module" in sentence
    assert sentence.endswith("; the next session sets memory up.")

    # The next session shows the sentence, once; later ones say nothing while it stays the same.
    assert system_message(hook(tmp_path, bin_dir, "SessionStart")) == sentence
    assert system_message(hook(tmp_path, bin_dir, "SessionStart")) == ""
    # Meanwhile the hooks spool their events (under that old python3).
    prompt = {"session_id": "s", "hook_event_name": "UserPromptSubmit", "prompt": "Fix the divide bug",
              "cwd": str(tmp_path), "transcript_path": ""}
    assert hook(tmp_path, bin_dir, "UserPromptSubmit", prompt).stdout == ""
    (spooled,) = (tmp_path / "memory" / "spool").glob("*.json")
    assert b"Fix the divide bug" in spooled.read_bytes()

    # The user installs a Python that still does not do: after the retry delay, a new sentence, shown once.
    fake_python(bin_dir, "python3.13", "3.13.2", venv=NO_ENSUREPIP)
    past = time.time() - 3600  # the retry delay has passed
    os.utime(tmp_path / "install.failed", (past, past))
    assert system_message(hook(tmp_path, bin_dir, "SessionStart")) == ""  # the retry starts; the old one was shown
    wait_for_failed_install(tmp_path, attempt=2)
    again = system_message(hook(tmp_path, bin_dir, "SessionStart"))
    assert again != sentence and f"{bin_dir}/python3.13 is 3.13.2 without its venv module" in again
    assert system_message(hook(tmp_path, bin_dir, "SessionStart")) == ""


def dangling_environment(data: Path, made_with: str) -> None:
    """``<data>/venv`` as install.py left it, from a Python since removed (its bin/python a dangling link)."""
    venv = data / "venvs" / "1"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(data / "gone" / "python3.12")
    (venv / "hook-entry").write_text(f"{REPO}/hooks/entry.py\n")
    (venv / "made-with").write_text(made_with + "\n")
    (venv / "installed-from").write_text(f"{REPO}\n")
    (data / "venv").symlink_to(venv)


def test_an_environment_whose_python_is_gone_is_made_again_not_used(tmp_path: Path) -> None:
    """A Homebrew upgrade removed the python@3.12 the environment was made from: hook.sh's fast
    path refuses the dangling interpreter, run.py starts the install (here with no Python to find,
    so it stops after the search), the hooks spool meanwhile and SessionStart says why."""
    bin_dir = tmp_path / "bin"
    real_python(bin_dir, "python3", old_python())
    no_fixed_places(tmp_path / "home")
    gone = "/opt/homebrew/opt/python@3.12/bin/python3.12"
    dangling_environment(tmp_path, f"3.12.8 {gone}")
    prompt = {"session_id": "s", "hook_event_name": "UserPromptSubmit", "prompt": "Fix the divide bug",
              "cwd": str(tmp_path), "transcript_path": ""}
    result = hook(tmp_path, bin_dir, "UserPromptSubmit", prompt)
    assert result.returncode == 0 and result.stdout == ""
    assert list((tmp_path / "memory" / "spool").glob("*.json"))
    log = wait_for_failed_install(tmp_path)
    assert f"the environment's Python is gone (3.12.8 {gone}): making it again" in log
    # No loop: the hooks after a failed try spool, and leave the next try to the retry delay.
    assert hook(tmp_path, bin_dir, "PostToolUse").returncode == 0
    assert (tmp_path / "install.log").read_text().count("installing sessionmem from") == 1
    # The first SessionStart after the failed search: what to install (and only once).
    assert system_message(hook(tmp_path, bin_dir, "SessionStart")).startswith("sessionmem needs Python 3.11")
    (tmp_path / "python-needed").unlink()
    (tmp_path / "install.failed").unlink()
    os.remove(tmp_path / "install.log")
    # While a rebuild is under way, SessionStart names the Python that went.
    message = system_message(hook(tmp_path, bin_dir, "SessionStart"))
    assert message.startswith(f"sessionmem is making its Python environment again, as {gone} is gone")
    wait_for_failed_install(tmp_path)


@pytest.mark.slow
def test_an_environment_whose_python_is_gone_is_made_again_from_another(tmp_path: Path) -> None:
    """The real rebuild: pip install of this repository into a new environment made from the one
    suitable Python found (this 3.11 under the name python3.12), recorded in made-with."""
    bin_dir = tmp_path / "bin"
    real_python(bin_dir, "python3", old_python())
    named = real_python(bin_dir, "python3.12", sys.executable)
    fake_python(bin_dir, "python3.14", "3.14.0", venv=NO_ENSUREPIP)
    no_fixed_places(tmp_path / "home")
    dangling_environment(tmp_path, "3.12.8 /opt/homebrew/opt/python@3.12/bin/python3.12")
    pip = {key: value for key, value in os.environ.items() if key.startswith("PIP_")}
    pip.setdefault("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip"))
    # pip leaves the dependencies uncompiled (its bytecode of them all is ~20 s of CPU, and nothing here
    # reads it); install.py still compiles sessionmem itself, for the hooks.
    pip["PIP_COMPILE"] = "0"
    assert hook(tmp_path, bin_dir, "SessionStart", **pip).returncode == 0
    wait_for_the_install_to_end(tmp_path, 600)
    log = (tmp_path / "install.log").read_text()
    assert "install failed" not in log, log
    assert f"using Python {'.'.join(map(str, sys.version_info[:3]))}: {named}" in log
    made_with = (tmp_path / "venv" / "made-with").read_text().split()
    assert made_with == [".".join(map(str, sys.version_info[:3])), str(named)]
    assert not (tmp_path / "venvs" / "1").exists()  # the broken one is removed
    # What hook.sh's fast path checks: the environment is current again.
    assert (tmp_path / "venv" / "installed-from").read_text() == f"{REPO}\n"
    # The hook entry and its bytecode are the new environment's own, though the hook ran in this checkout.
    entry = Path((tmp_path / "venv" / "hook-entry").read_text().strip())
    assert entry.is_file() and entry.is_relative_to((tmp_path / "venv").resolve()), entry
    assert list(entry.parent.glob("__pycache__/entry.*.pyc"))
    ran = subprocess.run([tmp_path / "venv" / "bin" / "python", "-c", "import sys; print(sys.version_info[:2])"],
                         capture_output=True, text=True, check=True)
    assert ran.stdout.strip() == str(tuple(sys.version_info[:2]))


def test_the_bootstrap_parses_as_python_3_9() -> None:
    """run.py, install.py and interpreters.py run under whatever python3 is on PATH: a Mac's is 3.9."""
    import ast

    for module in ("run.py", "install.py", "interpreters.py"):
        ast.parse((BOOTSTRAP / module).read_text(), filename=module, feature_version=(3, 9))
