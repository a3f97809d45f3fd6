"""Stop a test PostgreSQL server once the process that started it is gone.

``python -m sessionmem.testing.postgres_watchdog PG_CTL DATA_DIR USER SCRATCH`` waits until
its standard input reaches end of file -- the process that started it closed the pipe, or
died, even by SIGKILL -- then stops the server of ``DATA_DIR`` if one still runs (an
immediate shutdown: nothing of a test database is worth waiting for), and then removes
``SCRATCH`` if it did ('' for none: its owner removes it). ``USER``: the system user the
server runs as ('' for the current one). Standard library only.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    pg_ctl, directory, user, scratch = argv
    while sys.stdin.buffer.read(4096):
        pass
    if (Path(directory) / "postmaster.pid").exists():  # the owner did not stop it: it died
        subprocess.run([pg_ctl, "-D", directory, "-m", "immediate", "-w", "stop"], user=user or None,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, timeout=60)
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
