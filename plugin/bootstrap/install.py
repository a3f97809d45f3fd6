"""Install (or upgrade) the installed plugin's Python environment, in the background.

    python3 install.py <plugin root> <plugin data dir>

Started by ``run.py``, detached, its output in ``<data>/install.log``. Holds
``<data>/install.lock`` throughout, so only one runs. Steps:

1. Find the Python to make it from (:mod:`interpreters`: CPython 3.11 to 3.14 with a
   working ``venv``, the newest found in the usual names and places, asked rather than
   trusted by name; provisioned with ``uv`` when none is found and ``uv`` exists). Every
   candidate's verdict goes to the log. When there is none, ``<data>/python-needed``
   holds the one sentence that says what to install (``run.py`` shows it once).
2. Make a new virtual environment in ``<data>/venvs/<time>`` and ``pip install`` the
   plugin's copy of sessionmem into it (its dependencies from the package index, or
   pip's cache); compile it to bytecode (hooks start faster from it). It records the
   installed hook entry (``hook-entry``), the Python it was made from (``made-with``:
   version and path) and, last, the plugin copy it came from (``installed-from``),
   which is how ``hook.sh`` and ``run.py`` know it is current. An environment whose
   Python is gone (a Homebrew upgrade removed ``python@3.12``: its ``bin/python`` is a
   dangling link) is not current either: ``run.py`` starts this install, which makes a
   new one from a Python that is there.
3. Switch: ``<data>/venv`` becomes a symbolic link to it, atomically. A worker still
   running from the previous version is asked to stop (gracefully: what it holds
   stays in its journal), so the next SessionStart starts the new one; events sent
   meanwhile are spooled. The previous environments are removed.

Error handling:
    Any failure leaves the current environment as it was, removes the half-made one,
    and writes ``<data>/install.failed`` with the reason (``run.py`` waits before
    trying again, and SessionStart tells the user).

Runs under whatever ``python3`` the hook found (Apple's 3.9 included): its syntax stays
3.9-compatible.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time

import interpreters  # beside this file: sys.path[0]

PYTHON_NEEDED = "python-needed"  # in the data dir: the sentence for the user when no Python is found


def log(message: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {message}", flush=True)


def choose_python(data: str) -> tuple[str, str]:
    """The interpreter to make the environment from (see :mod:`interpreters`) and its version."""
    needed = os.path.join(data, PYTHON_NEEDED)
    try:
        chosen = interpreters.find_python(log=lambda line: log("  " + line))
    except interpreters.NoPython as exc:
        with open(needed, "w", encoding="utf-8") as note:
            note.write(f"{exc}\n")
        raise
    for note in (needed, needed + ".shown"):  # shown again if it ever comes back
        if os.path.exists(note):
            os.remove(note)
    assert chosen.answer is not None
    # What it calls itself (a pyenv shim's real interpreter; Homebrew's opt/ path, which stays
    # through patch upgrades), else the name it was found by.
    executable = chosen.answer.executable
    python = executable if os.path.isabs(executable) and os.access(executable, os.X_OK) else chosen.path
    log(f"using Python {chosen.answer.version_text}: {python}")
    return python, chosen.answer.version_text


def run(*command: str) -> None:
    log("$ " + " ".join(command))
    subprocess.run(command, check=True, stdin=subprocess.DEVNULL)


def install(root: str, data: str) -> None:
    current = os.path.join(data, "venv")
    if os.path.isdir(current) and not os.path.exists(os.path.join(current, "bin", "python")):
        gone = read_marker(os.path.join(current, "made-with")) or "its Python"
        log(f"the environment's Python is gone ({gone}): making it again")
    python, version = choose_python(data)
    environments = os.path.join(data, "venvs")
    os.makedirs(environments, mode=0o700, exist_ok=True)
    # Made where it will stay: a virtual environment's scripts name their interpreter by
    # its absolute path, so it cannot be moved once made.
    fresh = os.path.join(environments, str(time.time_ns()))
    try:
        run(python, "-m", "venv", fresh)
        fresh_python = os.path.join(fresh, "bin", "python")
        run(fresh_python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", root)
        # -I: the installed package, not a `sessionmem` folder in the working directory (a checkout of it).
        package = subprocess.run([fresh_python, "-I", "-c", "import sessionmem, os; print(os.path.dirname(sessionmem.__file__))"],
                                 check=True, capture_output=True, text=True).stdout.strip()
        run(fresh_python, "-m", "compileall", "-q", package)
        write_marker(os.path.join(fresh, "hook-entry"), os.path.join(package, "hooks", "entry.py"))
        write_marker(os.path.join(fresh, "made-with"), f"{version} {python}")
        write_marker(os.path.join(fresh, "installed-from"), root)  # last: the environment is complete
    except BaseException:
        shutil.rmtree(fresh, ignore_errors=True)
        raise
    previous = os.path.realpath(current) if os.path.islink(current) else None
    switch = os.path.join(data, f".venv-{os.getpid()}")
    os.symlink(fresh, switch)
    os.replace(switch, current)  # atomic: a hook sees the old environment or the new one
    log(f"installed: {current} -> {fresh}")
    if previous is not None:
        # The running worker (if any) is the previous version: let it stop (what it holds
        # stays in its journal), so the next SessionStart starts this one.
        subprocess.run([os.path.join(current, "bin", "python"), "-m", "sessionmem", "stop"], stdin=subprocess.DEVNULL)
    for name in os.listdir(environments):
        if os.path.join(environments, name) != fresh:
            shutil.rmtree(os.path.join(environments, name), ignore_errors=True)


def read_marker(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as marker:
            return marker.read().strip()
    except OSError:
        return ""


def write_marker(path: str, value: str) -> None:
    with open(path, "w", encoding="utf-8") as marker:
        marker.write(value + "\n")  # hook.sh reads it with `read`, which wants the newline


def main(root: str, data: str) -> int:
    os.makedirs(data, mode=0o700, exist_ok=True)
    lock = os.open(os.path.join(data, "install.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        log("another install is running")
        return 0
    failed = os.path.join(data, "install.failed")
    try:
        log(f"installing sessionmem from {root}")
        install(root, data)
    except Exception as exc:
        log(f"install failed: {exc}")
        with open(failed, "w", encoding="utf-8") as note:
            note.write(f"{exc}\n")
        return 1
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        os.close(lock)
    if os.path.exists(failed):
        os.remove(failed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], sys.argv[2]))
