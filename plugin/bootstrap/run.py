"""The installed plugin's entry: run a hook or the MCP server from sessionmem's own environment.

A plugin installed from a marketplace is a copy of this repository in Claude Code's
plugin cache, with no Python environment. This script (standard library only, run
with ``python3 -S``) gives it one, in the plugin's data directory
(``$CLAUDE_PLUGIN_DATA``, which survives plugin updates):

    python3 -S plugin/bootstrap/run.py hook <Stage>
    python3 -S plugin/bootstrap/run.py mcp

- **Ready** (``<data>/venv`` installed from this very plugin copy): the hook is
  ``exec``-ed with that environment's interpreter on its installed hook entry, exactly
  as a pip install runs it. Hooks seldom come here: ``hook.sh`` makes the same check
  in the shell and execs the environment itself.
- **Not yet** (the first use, or a new plugin version): the install starts in the
  background (:mod:`install`; one at a time, a lock says so), and never makes a hook
  wait. Meanwhile the hook runs anyway -- hooks need only the standard library --
  with the previous environment (its interpreter and its hook entry, which match the
  worker it runs) if there is one, else with this interpreter and without starting a
  worker, as there is no environment to start it from: events are spooled and
  imported once the worker runs. SessionStart says that the install is under way
  (or why it failed).
- A failed install is not retried for :data:`RETRY_AFTER_S`; ``install.log`` says why.
- **No suitable Python** (the install found none: ``<data>/python-needed`` holds the
  sentence that says what to install on this OS): SessionStart shows that sentence
  once, and then says nothing while it stays the same (``python-needed.shown`` holds
  its hash). It names the Pythons found, so it changes, and is shown again, when the
  user installs one that still does not do (a 3.13 without its venv module). The
  install is tried again by the first hook :data:`RETRY_AFTER_S` after the last try,
  so a suitable Python installed meanwhile is taken up without a word from the user.
- **The environment's Python is gone** (its ``bin/python`` a dangling link: Homebrew
  removed the ``python@3.X`` it was made from): not current, so the install starts and
  makes it again from a Python that is there; SessionStart says so, naming the old one
  (``made-with``).

Runs under whatever ``python3`` is on ``PATH`` (Apple's 3.9 included): its syntax stays
3.9-compatible.

Error handling:
    Fail open, like every hook: whatever happens, exit 0 with valid JSON or nothing.
"""

from __future__ import annotations

import sys

# A project's session may set PYTHONPATH for its hooks, and a hook runs in the project's folder: only the
# standard library's own folders are kept (as hooks/entry.py does), before anything could be found elsewhere.
_STDLIB = tuple(root.rstrip("/") for root in {sys.base_prefix, sys.base_exec_prefix} if root)
sys.path[:] = [path for path in sys.path if any(path == root or path.startswith(root + "/") for root in _STDLIB)]

import os  # noqa: E402
import time  # noqa: E402

RETRY_AFTER_S = 600
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))  # the plugin's root: this repository's copy


def data_dir() -> str:
    data = os.environ.get("CLAUDE_PLUGIN_DATA") or os.path.join(
        os.path.expanduser("~"), ".claude", "plugins", "data", "sessionmem-sessionmem")
    os.makedirs(data, mode=0o700, exist_ok=True)
    return data


def marker(data: str, name: str) -> str:
    try:
        with open(os.path.join(data, "venv", name), encoding="utf-8") as file:
            return file.read().strip()
    except OSError:
        return ""


def environment(data: str) -> tuple[str, bool]:
    """(the environment's interpreter, whether it was installed from this plugin copy)."""
    python = os.path.join(data, "venv", "bin", "python")
    return python, marker(data, "installed-from") == ROOT and os.path.exists(python)


def start_install(data: str) -> str:
    """Start the background install unless one runs or failed lately; returns what is happening."""
    import fcntl

    failed = os.path.join(data, "install.failed")
    try:
        if time.time() - os.path.getmtime(failed) < RETRY_AFTER_S:
            return "failed"
    except OSError:
        pass
    lock = os.open(os.path.join(data, "install.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return "installing"  # the installer holds it
        fcntl.flock(lock, fcntl.LOCK_UN)
    finally:
        os.close(lock)
    import subprocess

    with open(os.path.join(data, "install.log"), "ab") as log:
        # Without the session's PYTHON* variables: the installer and the pip it runs import nothing of the project.
        subprocess.Popen([sys.executable, os.path.join(HERE, "install.py"), ROOT, data], stdin=subprocess.DEVNULL,
                         stdout=log, stderr=log, start_new_session=True, close_fds=True,
                         env={name: value for name, value in os.environ.items() if not name.startswith("PYTHON")})
    return "installing"


def session_start_notice(data: str, state: str) -> None:
    """Tell the user what is going on (Claude Code shows a hook's systemMessage)."""
    import json  # only here: a SessionStart while the environment is missing

    message = notice(data, state)
    if message:
        sys.stdout.write(json.dumps({"systemMessage": message}))


def notice(data: str, state: str) -> str:
    """What SessionStart says while there is no current environment ("" for nothing)."""
    needed = os.path.join(data, "python-needed")
    try:
        with open(needed, encoding="utf-8") as file:
            sentence = file.read().strip()
    except OSError:
        sentence = ""
    if sentence:  # the last install found no Python (the one under way, if any, may yet find one)
        return once(needed + ".shown", sentence)
    if state == "failed":
        return (f"sessionmem could not install its Python environment (see {os.path.join(data, 'install.log')}); "
                "memory is off until it can, and events are kept for then")
    made_with = marker(data, "made-with")
    if marker(data, "installed-from") and not os.path.exists(os.path.join(data, "venv", "bin", "python")):
        gone = made_with.partition(" ")[2] or "the Python it was made from"
        return (f"sessionmem is making its Python environment again, as {gone} is gone (upgraded or removed); this "
                "session is recorded, and memory comes back with the next ones")
    return ("sessionmem is installing its Python environment in the background (the first time takes a "
            "minute or two); this session is recorded, and memory comes with the next ones")


def once(shown: str, message: str) -> str:
    """``message`` the first time it is asked for, "" while it stays the same."""
    import hashlib

    digest = hashlib.sha256(message.encode()).hexdigest()
    try:
        with open(shown, encoding="utf-8") as file:
            if file.read().strip() == digest:
                return ""
    except OSError:
        pass
    with open(shown, "w", encoding="utf-8") as file:
        file.write(digest + "\n")
    return message


def main(argv: list[str]) -> int:
    mode = argv[1] if len(argv) > 1 else ""
    data = data_dir()
    python, ready = environment(data)
    state = "ready" if ready else start_install(data)
    entry = os.path.join(ROOT, "hooks", "entry.py")
    installed_entry = marker(data, "hook-entry")
    if mode == "mcp":
        if not os.path.exists(python):
            sys.stderr.write("sessionmem: its Python environment is still being installed; the MCP server comes "
                             "with the next session\n")
            return 1
        os.execv(python, [python, "-P", "-m", "sessionmem", "mcp"])
    stage = argv[2] if len(argv) > 2 else ""
    if os.path.exists(python):  # ready, or the previous version's meanwhile
        os.execv(python, [python, "-S", installed_entry if os.path.exists(installed_entry) else entry, stage])
    if stage == "SessionStart":
        session_start_notice(data, state)
        return 0
    # Only SessionStart starts a worker, so this one, with no environment, spools its event.
    os.execv(sys.executable, [sys.executable, "-S", entry, stage])


if __name__ == "__main__":
    try:
        code = main(sys.argv)
    except BaseException:  # fail open, even here
        code = 0
    raise SystemExit(code)
