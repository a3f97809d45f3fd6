"""Runs one command (the Claude Code CLI) and ends its whole process group when the worker ends.

``python -I -S claude_code_guard.py FD COMMAND...``: the claude-code compressor starts this
guard as the leader of a new process group (``start_new_session``); the guard starts the
command in that group and waits for it, exiting with its status. ``FD`` is the read end of
the worker's *lifeline*, a pipe whose only write end the worker holds: when the worker
ends in any way -- ``kill -9`` included -- the kernel closes that end, a read of ``FD``
returns end of file, and the guard kills its group (the CLI and anything the CLI started)
with SIGKILL.

Why a guard, and not what the CLI or the kernel offers: the CLI in ``--print`` mode reads
its whole input, then runs to the end of its request whatever happens to its stdin or
its parent (measured on the pinned CLI: still running 15 s after its stdin closed
mid-request); ``PR_SET_PDEATHSIG`` is Linux only and fires when the *thread* that forked
the child exits -- Trio forks on a cached worker thread that ends after 10 s idle, which
would kill a healthy child. A pipe's end of file is the same on Linux and macOS.

Standard library only, and tiny: it is the parent of every CLI run.
"""

from __future__ import annotations

import os
import signal
import sys
import threading


def _watch_lifeline(fd: int) -> None:
    while True:
        try:
            data = os.read(fd, 1)
        except InterruptedError:
            continue
        except OSError:
            data = b""
        if not data:  # end of file: the worker is gone (or closed it to stop us)
            os.killpg(0, signal.SIGKILL)  # the guard included: nothing of the group survives
            return


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print("usage: claude_code_guard.py FD COMMAND...", file=sys.stderr)
        return 2
    lifeline = int(argv[1])
    command = argv[2:]
    pid = os.fork()
    if pid == 0:  # the command, in the guard's process group, without the lifeline
        try:
            os.close(lifeline)
            os.execv(command[0], command)
        finally:
            os._exit(127)
    # Watched from here on: an end of file that came before is still there to read.
    threading.Thread(target=_watch_lifeline, args=(lifeline,), daemon=True).start()
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
