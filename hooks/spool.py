"""Events saved to disk while the worker cannot be reached. Standard library only.

When a hook cannot deliver an event (worker down, too slow), it writes the request to
``<data dir>/spool/`` instead of dropping it; the worker imports the spool when it
starts and every few seconds after (``sessionmem.server.spool``). Every hook request
carries an idempotency key, so an event that did reach a slow worker and was spooled
as well is stored once.

A spool file is ``<path>\\n<JSON body>``, named ``<time_ns>-<pid>.json`` so that sorting
the names sorts the events; it is written to a dot-file and renamed into place, so the
worker never sees half a file. Private spans were removed before the body was built.

Error handling:
    Spooling never raises; it returns False (and the hook logs why) if the spool is
    full (:data:`MAX_FILES`) or the disk refuses the write.
"""

from __future__ import annotations

import os
import time

MAX_FILES = 20_000


def spool_dir(data_dir: str) -> str:
    return os.path.join(data_dir, "spool")


def spool(data_dir: str, path: str, body: bytes) -> tuple[bool, str]:
    """Save one request; returns (saved, reason if not)."""
    directory = spool_dir(data_dir)
    try:
        os.makedirs(directory, exist_ok=True)
        if len(os.listdir(directory)) >= MAX_FILES:
            return False, f"spool full ({MAX_FILES} files)"
        name = f"{time.time_ns():020d}-{os.getpid()}.json"
        temporary = os.path.join(directory, f".{name}.tmp")
        with open(temporary, "wb") as f:
            f.write(path.encode("ascii") + b"\n" + body)
        os.replace(temporary, os.path.join(directory, name))
    except OSError as exc:
        return False, str(exc)
    return True, ""
