"""What every ``sessionmem`` command that asks the worker shares: its client settings, one call to
the worker, one way to fail.

Standard library only, through :mod:`sessionmem.protocol` (its token, its delivery policy).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable
from typing import Any

from sessionmem.protocol.client_settings import DATA_DIR_ENV, ClientConfig
from sessionmem.protocol.delivery import NO_LIVE_WORKER, Patience, deliver

# The first search after a start may load the embedding model (~0.3 s); a vacuum of a
# large database takes a while. Not a hook: the user waits at a terminal.
PATIENCE = Patience(120.0, 120.0, retry_failures=False)
PROBE = Patience(3.0, 3.0, retry_failures=False)  # is it there? (status, doctor, open)


class CommandFailed(Exception):
    """A call that did not succeed. ``code`` is the command's exit status (2: the request was
    wrong, 1: the worker is down or failed); ``answer`` is the worker's decoded answer, if any.
    ``sessionmem``'s ``main`` prints the message and exits with the code."""

    def __init__(self, message: str, code: int = 1, answer: Any = None, status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.answer = answer
        self.status = status  # the HTTP status of the refusal, if the worker answered


class WorkerUnreachable(CommandFailed):
    """A call that got no answer: the worker is not running, did not answer in time, or refused this
    data dir's token (:func:`foreign`). The message says so in a user's words; ``detail`` is the
    delivery policy's own."""

    def __init__(self, message: str, detail: str) -> None:
        super().__init__(message, 1)
        self.detail = detail


def client_config(args: argparse.Namespace, *, warn: bool = True) -> ClientConfig:
    """What every client reads, with this command's ``--data-dir`` and ``--port`` on top.

    A setting it could not read is said on stderr (``warn``): a hook falls back to the
    default in silence, but a person at a terminal should know the default is in use.
    """
    env = dict(os.environ)
    if getattr(args, "data_dir", None):
        env[DATA_DIR_ENV] = args.data_dir
    if getattr(args, "port", None) is not None:
        env["SESSIONMEM_PORT"] = str(args.port)
    config = ClientConfig(env)
    for problem in config.problems if warn else ():
        print(f"sessionmem: warning: {problem}", file=sys.stderr)
    return config


def in_flags(message: str) -> str:
    """The worker's words for its query parameters (``query parameter 'since'``) as the commands' flags
    (``--since``): a person typed flags."""
    return re.sub(r"query parameter '(\w+)'", lambda found: "the query" if found[1] == "q" else f"--{found[1]}",
                  message)


def foreign(detail: str) -> bool:
    """Whether an unanswered call's ``detail`` says something answered but refused this data dir's token:
    a worker of another data dir."""
    return detail.startswith("HTTP 401")


def unanswered(config: ClientConfig, detail: str) -> str:
    """Why a call got no answer, in a user's words. A 401 means something answered for another data dir."""
    where = f"{config.host}:{config.worker_port()}"
    if detail == NO_LIVE_WORKER:
        return (f"the worker of the data dir {config.data_dir} is not running (`sessionmem serve`, or start Claude "
                f"Code); nothing was sent to {where}")
    if foreign(detail):
        return (f"the worker on {where} refused this data dir's token: it serves another data dir "
                f"(check --data-dir and --port; this one is {config.data_dir})")
    return f"the worker on {where} did not answer ({detail}); is it running? (`sessionmem serve`, or start Claude Code)"


def call(config: ClientConfig, method: str, path: str, body: Any = None, patience: Patience = PATIENCE, *,
         encoded: bytes | None = None) -> Any:
    """The decoded JSON answer of one successful (200) call, under the clients' delivery policy with
    ``patience``; raises :class:`WorkerUnreachable` when nothing answered, :class:`CommandFailed` when
    the answer was a refusal, a failure or not the worker's. ``encoded``: the body as JSON already (else
    ``body`` is encoded)."""
    if encoded is None and body is not None:
        encoded = json.dumps(body).encode()
    outcome = deliver(config, method, path, encoded, patience=patience)
    if outcome.reply is None:
        raise WorkerUnreachable(unanswered(config, outcome.detail), outcome.detail)
    status = outcome.reply.status
    try:
        answer = outcome.reply.json()
    except ValueError:
        raise CommandFailed(f"not a sessionmem answer: HTTP {status}", status=status) from None
    if status != 200:
        message = answer.get("error", answer) if isinstance(answer, dict) else answer
        raise CommandFailed(f"{in_flags(str(message))} (HTTP {status})", 2 if 400 <= status < 500 else 1, answer,
                            status)
    return answer


def whole_number(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number from ``low`` (to ``high``, if given)."""
    bounds = f"from {low} to {high}" if high is not None else f"{low} or more"

    def number(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be a whole number {bounds}, not {text!r}")
        return value

    return number

