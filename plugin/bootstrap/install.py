"""Install (or upgrade) the installed plugin's Python environment, in the background.

    python3 install.py <plugin root> <plugin data dir>

Started by ``run.py``, detached, its output in ``<data>/install.log``. Holds
``<data>/install.lock`` throughout, so only one runs. Steps:

1. Find Python 3.11 (sessionmem's version): this interpreter if it is one, else
   ``python3.11`` on ``PATH``.
2. Make a new virtual environment in ``<data>/venvs/<time>`` and ``pip install`` the
   plugin's copy of sessionmem into it (its dependencies from the package index, or
   pip's cache); compile it to bytecode (hooks start faster from it). It records the
   installed hook entry (``hook-entry``) and, last, the plugin copy it came from
   (``installed-from``), which is how ``hook.sh`` and ``run.py`` know it is current.
3. Switch: ``<data>/venv`` becomes a symbolic link to it, atomically. A worker still
   running from the previous version is asked to stop (gracefully: what it holds
   stays in its journal), so the next SessionStart starts the new one; events sent
   meanwhile are spooled. The previous environments are removed.

Error handling:
    Any failure leaves the current environment as it was, removes the half-made one,
    and writes ``<data>/install.failed`` with the reason (``run.py`` waits before
    trying again, and SessionStart tells the user).
"""

import fcntl
import os
import shutil
import subprocess
import sys
import time

WANTED = (3, 11)


def log(message: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {message}", flush=True)


def python_311() -> str:
    if sys.version_info[:2] == WANTED:
        return sys.executable
    found = shutil.which("python3.11")
    if found:
        return found
    raise RuntimeError(f"sessionmem needs Python 3.11: this is {sys.version.split()[0]} and python3.11 is not on PATH")


def run(*command: str) -> None:
    log("$ " + " ".join(command))
    subprocess.run(command, check=True, stdin=subprocess.DEVNULL)


def install(root: str, data: str) -> None:
    python = python_311()
    environments = os.path.join(data, "venvs")
    os.makedirs(environments, mode=0o700, exist_ok=True)
    # Made where it will stay: a virtual environment's scripts name their interpreter by
    # its absolute path, so it cannot be moved once made.
    fresh = os.path.join(environments, str(time.time_ns()))
    try:
        run(python, "-m", "venv", fresh)
        fresh_python = os.path.join(fresh, "bin", "python")
        run(fresh_python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", root)
        package = subprocess.run([fresh_python, "-c", "import sessionmem, os; print(os.path.dirname(sessionmem.__file__))"],
                                 check=True, capture_output=True, text=True).stdout.strip()
        run(fresh_python, "-m", "compileall", "-q", package)
        write_marker(os.path.join(fresh, "hook-entry"), os.path.join(package, "hooks", "entry.py"))
        write_marker(os.path.join(fresh, "installed-from"), root)  # last: the environment is complete
    except BaseException:
        shutil.rmtree(fresh, ignore_errors=True)
        raise
    current = os.path.join(data, "venv")
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
