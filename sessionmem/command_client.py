"""What the ``sessionmem`` commands that read or manage memory share: one call to the worker, one way to fail.

Standard library only, through :mod:`sessionmem.protocol` (its token, its delivery policy).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from sessionmem.protocol.config import ClientConfig
from sessionmem.protocol.delivery import Patience, deliver

# The first search after a start may load the embedding model (~0.3 s); a vacuum of a
# large database takes a while. Not a hook: the user waits at a terminal.
PATIENCE = Patience(120.0, 120.0, retry_failures=False)


class WorkerDown(Exception):
    """The worker did not answer (not running, or not a sessionmem worker)."""


def ask(config: ClientConfig, method: str, path: str, body: Any = None,
        patience: Patience = PATIENCE) -> tuple[int, Any]:
    """``(HTTP status, decoded JSON)`` of one call; raises :class:`WorkerDown`."""
    encoded = json.dumps(body).encode() if body is not None else None
    outcome = deliver(config, method, path, encoded, patience=patience)
    if outcome.reply is None:
        raise WorkerDown(f"the worker on {config.host}:{config.worker_port()} did not answer ({outcome.detail}); "
                         f"is it running? (`sessionmem serve`, or start Claude Code)")
    try:
        return outcome.reply.status, outcome.reply.json()
    except ValueError:
        raise WorkerDown(f"not a sessionmem answer: HTTP {outcome.reply.status}") from None


def fail(status: int, answer: Any) -> int:
    """Report a refused call on stderr; the exit status (2: the request was wrong, 1: the worker failed)."""
    message = answer.get("error", answer) if isinstance(answer, dict) else answer
    print(f"sessionmem: {message} (HTTP {status})", file=sys.stderr)
    return 2 if 400 <= status < 500 else 1


def down(exc: WorkerDown) -> int:
    print(f"sessionmem: {exc}", file=sys.stderr)
    return 1
