"""Who may talk to the worker: the per-install secret token. Standard library only.

The worker creates ``<data dir>/auth.token`` at its first start: 32 random bytes as
hex, in a file only its owner can read (0600, in a 0700 data dir). Every request but
``GET /api/health`` must carry it, as ``Authorization: Bearer <token>`` (hooks, the
commands, backfill, the MCP server, the bench). The web pages the worker serves get a
page login instead (``sessionmem.server.guard``): the HttpOnly, SameSite=Strict cookie
:data:`COOKIE_NAME` holds a credential of its own, set only in exchange for a
single-use login code that an authenticated client asked for (``sessionmem open``),
and it reads memory, never writes it. A web page elsewhere cannot read the file and
cannot send the header without a preflight the worker refuses.

Error handling:
    :func:`read_token` returns ``None`` for a missing or unreadable file (a client
    then sends no token, is refused, and its events are spooled, not lost).
"""

from __future__ import annotations

import os

from sessionmem.protocol.oskit import sync_file

TOKEN_FILE = "auth.token"
COOKIE_NAME = "sessionmem_token"
TOKEN_BYTES = 32


def token_path(data_dir: str) -> str:
    return os.path.join(data_dir, TOKEN_FILE)


def read_token(data_dir: str) -> str | None:
    try:
        with open(token_path(data_dir), encoding="ascii") as f:
            token = f.read().strip()
    except (OSError, ValueError):
        return None
    return token or None


def ensure_token(data_dir: str) -> str:
    """The data dir's token, created (0600, atomically) if there is none yet."""
    existing = read_token(data_dir)
    if existing is not None:
        return existing
    token = os.urandom(TOKEN_BYTES).hex()
    temporary = f"{token_path(data_dir)}.{os.getpid()}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, token.encode("ascii") + b"\n")
        sync_file(fd)
    finally:
        os.close(fd)
    try:
        os.link(temporary, token_path(data_dir))  # fails if another process made one meanwhile: use theirs
    except FileExistsError:
        pass
    finally:
        os.unlink(temporary)
    token_now = read_token(data_dir)
    if token_now is None:
        raise OSError(f"cannot read {token_path(data_dir)} after creating it")
    return token_now


def bearer(token: str) -> str:
    """The ``Authorization`` header value for ``token``."""
    return f"Bearer {token}"
