"""Runs one command (the Claude Code CLI) and ends its whole process group when the worker ends.

``python -I -S claude_code_guard.py OSKIT FD COMMAND...``: the claude-code compressor starts this
guard as the leader of a new process group (:func:`sessionmem.protocol.oskit.new_group_options`);
the guard starts the command in that group and waits for it, exiting with its status. ``FD`` is
the read end of the worker's *lifeline*, a pipe whose only write end the worker holds: when the
worker ends in any way -- ``kill -9`` included -- the kernel closes that end, a read of ``FD``
returns end of file, and the guard kills its group (the CLI and anything the CLI started)
at once (:func:`~sessionmem.protocol.oskit.kill_process_group`).

``OSKIT`` is the path of :mod:`sessionmem.protocol.oskit`, the one place that knows how each OS
kills a group: the guard runs isolated (``-I -S``, no sessionmem on its path), so it loads that
one file, which imports nothing but the standard library.

Why a guard, and not what the CLI or the kernel offers: the CLI in ``--print`` mode reads
its whole input, then runs to the end of its request whatever happens to its stdin or
its parent (measured on the pinned CLI: still running 15 s after its stdin closed
mid-request); ``PR_SET_PDEATHSIG`` is Linux only and fires when the *thread* that forked
the child exits -- Trio forks on a cached worker thread that ends after 10 s idle, which
would kill a healthy child. A pipe's end of file is the same on Linux and macOS.

Standard library only, and tiny: it is the parent of every CLI run.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import threading
from collections.abc import Callable


def load_kill_process_group(oskit_path: str) -> Callable[[int], None]:
    """:func:`sessionmem.protocol.oskit.kill_process_group`, from the file at ``oskit_path``."""
    spec = importlib.util.spec_from_file_location("sessionmem_oskit", oskit_path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {oskit_path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kill: Callable[[int], None] = module.kill_process_group
    return kill


def _watch_lifeline(fd: int, kill_process_group: Callable[[int], None]) -> None:
    while True:
        try:
            data = os.read(fd, 1)
        except InterruptedError:
            continue
        except OSError:
            data = b""
        if not data:  # end of file: the worker is gone (or closed it to stop us)
            kill_process_group(0)  # the guard included: nothing of the group survives
            return


def main(argv: list[str]) -> int:
    if len(argv) < 4:
        print("usage: claude_code_guard.py OSKIT FD COMMAND...", file=sys.stderr)
        return 2
    kill_process_group = load_kill_process_group(argv[1])
    lifeline = int(argv[2])
    # In the guard's process group; without the lifeline (close_fds): only the guard may hold a read end.
    try:
        process = subprocess.Popen(argv[3:], close_fds=True)
    except OSError as exc:
        print(f"claude_code_guard.py: cannot run {argv[3]}: {exc}", file=sys.stderr)
        return 127  # as a shell says a command it could not run
    # Watched from here on: an end of file that came before is still there to read.
    threading.Thread(target=_watch_lifeline, args=(lifeline, kill_process_group), daemon=True).start()
    status = process.wait()
    return status if status >= 0 else 128 - status  # killed by a signal: as a shell says it


if __name__ == "__main__":
    sys.exit(main(sys.argv))
