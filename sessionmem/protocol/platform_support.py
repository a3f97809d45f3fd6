"""Where sessionmem runs: macOS and Linux; Windows through WSL 2. Standard library only.

Native Windows is not supported yet: the hooks start ``sh``, arm ``SIGALRM`` and the worker
locks files with ``fcntl``. There every hook exits 0 at once, with no output, so a Claude
Code session works as without sessionmem and shows no hook error (``hooks/entry.py`` tests
:data:`~.oskit.NATIVE_WINDOWS` before anything else, ``plugin/bootstrap/hook.sh`` asks ``uname``);
``sessionmem install`` refuses and ``sessionmem doctor`` says why, both with
:data:`USE_WSL`. Inside WSL 2 Python reports ``linux`` and everything works as on Linux.

``cygwin`` and ``msys`` are native Windows too (:data:`~.oskit.NATIVE_WINDOWS`).
"""

from __future__ import annotations

import sys

from sessionmem.protocol.oskit import NATIVE_WINDOWS

USE_WSL = ("sessionmem runs on macOS and Linux; on Windows, install and run Claude Code inside WSL 2 "
           "(`wsl --install`, then install Claude Code and sessionmem in the Linux shell), where sessionmem "
           "works as on Linux. Native Windows is not supported: its hooks do nothing there")


def unsupported_platform(platform: str = sys.platform) -> str:
    """Why sessionmem cannot run on ``platform`` and what to do instead; ``""`` where it runs."""
    if platform in NATIVE_WINDOWS:
        return f"native Windows ({platform}): {USE_WSL}"
    return ""
