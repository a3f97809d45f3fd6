"""The worker's log: where it goes, and how much one failure may write to it.

An internal error is logged with its type, its message and the innermost frames of
its traceback, cut to :data:`MAX_ENTRY` characters: a request crafted to fail deep
in a recursion (or a message the size of a request body) writes a few lines, not
megabytes.
"""

from __future__ import annotations

import logging
import logging.handlers
import sys
import traceback
from pathlib import Path

SQLITE_SCHEMA = 17  # SQLite's result code (this module imports no SQLite binding)
MAX_FRAMES = 8
MAX_ENTRY = 4000
LOG_FILE_BYTES = 10 * 1024 * 1024
LOG_FILES_KEPT = 3


def bounded_exception(exc: BaseException) -> str:
    """``exc`` as a few lines: its innermost frames, type and message, at most :data:`MAX_ENTRY` characters."""
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-MAX_FRAMES, chain=False)
    text = "".join(lines).rstrip()
    if len(text) > MAX_ENTRY:
        text = text[: MAX_ENTRY // 2] + "\n…[log entry cut]…\n" + text[-MAX_ENTRY // 2:]
    return text


def log_exception(log: logging.Logger, message: str, exc: BaseException) -> None:
    """``log.error(message)`` with a bounded traceback of ``exc``."""
    log.error("%s\n%s", message[:MAX_ENTRY], bounded_exception(exc))


def _not_a_schema_reprepare(record: logging.LogRecord) -> bool:
    """False for SQLite's note that a statement met a changed schema: SQLite prepares it
    again by itself, and nothing failed. (A fresh data dir's migrations, which recreate
    tables, would otherwise log "statement aborts ... SQLITE_SCHEMA" lines at INFO.)"""
    return getattr(record, "sqlite_code", None) != SQLITE_SCHEMA


class OneRecordALine(logging.Formatter):
    """Messages with what a client sent in them (a session id, a project) escaped: a line break cannot
    forge a second record, nor an escape sequence reach the terminal that reads the log. A
    traceback, added after the message, keeps its lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        if line.isprintable():
            return line
        return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in line)


def configure_logging(log_path: Path, *, to_stderr: bool) -> None:
    """The worker's log: ``log_path`` (rotated), and stderr when running in a terminal."""
    handlers: list[logging.Handler] = [
        logging.handlers.RotatingFileHandler(log_path, maxBytes=LOG_FILE_BYTES, backupCount=LOG_FILES_KEPT)
    ]
    if to_stderr:
        handlers.append(logging.StreamHandler(sys.stderr))
    for handler in handlers:
        handler.addFilter(_not_a_schema_reprepare)
        handler.setFormatter(OneRecordALine("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=handlers, force=True)
    # The HTTP client (httpx2: the anthropic SDK's, and the openai-compatible compressor's) logs
    # every request at INFO; keep the log about sessionmem.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    # Trio's accept loop logs a full traceback every 100 ms while out of file descriptors;
    # the connection cap keeps the worker below the limit, and this keeps the log readable.
    logging.getLogger("trio.serve_listeners").setLevel(logging.CRITICAL)
