"""The user's answers to repositories that ask to share their memory: one file in the data dir.

A repository that commits ``.sessionmem-share`` only *asks* to share its memory with the team
database: cloning it must not opt anyone in. The answer is the user's, given on this machine
(``sessionmem share allow`` / ``share deny`` in the repository, as ``direnv allow`` is) and
kept here, in :data:`CONSENT_FILE`, one entry per (team database, project):

- ``allowed``: the project's memory is shared with that database (pushed and pulled);
- ``denied``: it is not, and the repository's request is not shown again;
- ``asked``: the request was shown to the user (once), who has not answered.

A project is named by its identity between machines (its normalized git remote, else
``name:<project>``: :func:`sessionmem.storage.team_records.shared_key`), so an answer holds
for every clone of the repository on this machine. The database by :func:`database_label`
(``host:port/database``, no user, no password): an answer for one team database does not
carry to another.

Resource handling:
    Each change is a read-modify-write under an exclusive lock of :data:`LOCK_FILE` (the
    command line and the worker may write at once), and the file is replaced atomically: written
    to a temporary file of mode 0600 in the same directory, synced, renamed over the old one.
    Every function here blocks (file I/O): the worker calls them through a thread.

Error handling:
    Fails closed. A file that cannot be read as this module writes it (not JSON, wrong shapes,
    a newer format), that is not a regular file, or that another user owns or may write, raises
    :class:`ConsentUnreadable` with a message that says what to do; readers then share nothing
    by approval, and nothing is written over it (an answer needs a readable file). A missing
    file is no answer at all.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from enum import Enum
from pathlib import Path

import msgspec

from sessionmem.protocol.datadir import PRIVATE_FILE
from sessionmem.protocol.oskit import (
    NO_FOLLOW,
    lock_file,
    owned_by_this_user,
    set_file_mode,
    sync_directory,
    sync_file,
)

CONSENT_FILE = "share-consent.json"
LOCK_FILE = "share-consent.lock"
VERSION = 1
MAX_BYTES = 4 * 1024 * 1024  # thousands of repositories; more is not a file this module wrote


class Decision(str, Enum):
    ALLOWED = "allowed"
    DENIED = "denied"
    ASKED = "asked"  # the repository's request was shown; the user has not answered


class Answer(msgspec.Struct, frozen=True, kw_only=True):
    database: str  # database_label() of the team database the answer is for
    project_key: str  # shared_key(): the project's identity between machines
    project: str  # its name here when answered (shown, never matched)
    decision: Decision
    at: float  # when (Unix seconds)


class ConsentFile(msgspec.Struct, kw_only=True):
    version: int = VERSION
    answers: list[Answer] = []


_decoder = msgspec.json.Decoder(ConsentFile)


class ConsentUnreadable(Exception):
    """The consent file exists but cannot be trusted or read; the message says why and what to do."""


class Consent:
    """A snapshot of the answers (frozen: a new one after each change)."""

    def __init__(self, answers: list[Answer]) -> None:
        self._answers = {(answer.database, answer.project_key): answer for answer in answers}

    def answers(self, database: str) -> list[Answer]:
        """The answers for ``database``, by project key."""
        return sorted((a for a in self._answers.values() if a.database == database), key=lambda a: a.project_key)

    def answer(self, database: str, project_key: str) -> Answer | None:
        return self._answers.get((database, project_key))

    def allowed(self, database: str) -> frozenset[str]:
        """The project keys whose memory the user shares with ``database``."""
        return frozenset(key for (db, key), answer in self._answers.items()
                         if db == database and answer.decision is Decision.ALLOWED)

    def with_answer(self, answer: Answer) -> Consent:
        changed = Consent([])
        changed._answers = {**self._answers, (answer.database, answer.project_key): answer}
        return changed

    def encode(self) -> bytes:
        entries = sorted(self._answers.values(), key=lambda a: (a.database, a.project_key))
        return msgspec.json.format(msgspec.json.encode(ConsentFile(answers=entries)), indent=2) + b"\n"


NO_CONSENT = Consent([])


def consent_path(data_dir: str | Path) -> Path:
    return Path(data_dir) / CONSENT_FILE


def database_label(url: str) -> str:
    """The team database of ``url`` as answers name it: ``host:port/database``, lower-case host, the
    default port written out; no user and no password. ``""`` when libpq cannot read the URL."""
    if not url:
        return ""
    from psycopg.conninfo import conninfo_to_dict

    try:
        parameters = {key: str(value) for key, value in conninfo_to_dict(url).items() if value is not None}
    except Exception:  # psycopg.ProgrammingError: an unreadable URL names no database
        return ""
    host = (parameters.get("host") or parameters.get("hostaddr") or "localhost").lower()
    port = parameters.get("port") or "5432"
    database = parameters.get("dbname") or parameters.get("user") or ""
    return f"{host}:{port}/{database}"


Stamp = tuple[int, ...]


def consent_stamp(path: Path) -> Stamp | None:
    """What changes when ``path`` is written, replaced, moved or given another mode or owner (None: no file
    there): answers read under a stamp that has not changed need not be read again. Raises OSError when
    ``path`` cannot be looked at (then read it, and :func:`read_consent` says why it is unreadable)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_mode, info.st_uid)


def read_consent(path: Path) -> Consent:
    """The answers in ``path`` (none if it does not exist); :class:`ConsentUnreadable` if it cannot be trusted."""
    try:
        fd = os.open(path, os.O_RDONLY | NO_FOLLOW)
    except FileNotFoundError:
        return NO_CONSENT
    except OSError as exc:
        raise ConsentUnreadable(f"{path} cannot be opened ({exc.strerror or exc}): nothing is shared by approval "
                                f"until it is fixed or removed") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConsentUnreadable(f"{path} is not a regular file: nothing is shared by approval until it is removed")
        if not owned_by_this_user(info) or stat.S_IMODE(info.st_mode) & 0o022:
            raise ConsentUnreadable(
                f"{path} is owned or writable by another user (mode {stat.S_IMODE(info.st_mode):04o}): its answers "
                f"are ignored and nothing is shared by approval; remove it and answer again "
                f"(`sessionmem share allow` in each repository)")
        raw = _read_all(fd, path)
    except OSError as exc:
        raise ConsentUnreadable(f"{path} cannot be read ({exc.strerror or exc}): nothing is shared by approval "
                                f"until it is fixed or removed") from None
    finally:
        os.close(fd)
    try:
        decoded = _decoder.decode(raw)
    except msgspec.DecodeError as exc:
        raise ConsentUnreadable(f"{path} is malformed ({exc}): nothing is shared by approval until it is fixed, "
                                f"or removed and the repositories approved again") from None
    if decoded.version != VERSION:
        raise ConsentUnreadable(f"{path} has format version {decoded.version}, this sessionmem reads {VERSION}: "
                                f"nothing is shared by approval (a newer sessionmem wrote it: upgrade this one)")
    return Consent(decoded.answers)


def _read_all(fd: int, path: Path) -> bytes:
    chunks = []
    size = 0
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_BYTES:
            raise ConsentUnreadable(f"{path} is larger than {MAX_BYTES:,} bytes: not a file sessionmem wrote; "
                                    f"nothing is shared by approval until it is removed")
    return b"".join(chunks)


def change_consent(path: Path, change: Callable[[Consent], Consent | None]) -> Consent:
    """Apply ``change`` to the answers in ``path`` under the lock and write the result (``None``: nothing to
    write); returns the answers as they are now. :class:`ConsentUnreadable` leaves the file as it is."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    lock = os.open(path.parent / LOCK_FILE, os.O_RDWR | os.O_CREAT, PRIVATE_FILE)  # not inherited (PEP 446)
    try:
        lock_file(lock)
        current = read_consent(path)
        changed = change(current)
        if changed is None:
            return current
        _write_atomically(path, changed.encode())
        return changed
    finally:
        os.close(lock)  # releases the lock


def _write_atomically(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | NO_FOLLOW, PRIVATE_FILE)
    try:
        set_file_mode(fd, PRIVATE_FILE)  # whatever the umask, and if a stale temporary file was there
        view = memoryview(data)
        while view:  # a nearly full disk writes part of it: the rest, or an error
            written = os.write(fd, view)
            if written <= 0:
                raise OSError(28, "no space left on the device")
            view = view[written:]
        sync_file(fd)
    except BaseException:
        os.close(fd)
        temporary.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(temporary, path)
    sync_directory(str(path.parent))


def answer(path: Path, *, database: str, project_key: str, project: str, decision: Decision,
           now: float | None = None) -> Consent:
    """Record the user's ``decision`` (allowed or denied) for the project on ``database``."""
    entry = Answer(database=database, project_key=project_key, project=project, decision=decision,
                   at=time.time() if now is None else now)
    return change_consent(path, lambda consent: consent.with_answer(entry))


def mark_asked(path: Path, *, database: str, project_key: str, project: str, now: float | None = None) -> bool:
    """Record that the repository's request was shown, unless the user answered or was asked before; whether
    it was recorded now (the request is to be shown)."""
    recorded = False

    def ask(consent: Consent) -> Consent | None:
        nonlocal recorded
        if consent.answer(database, project_key) is not None:
            return None
        recorded = True
        return consent.with_answer(Answer(database=database, project_key=project_key, project=project,
                                          decision=Decision.ASKED, at=time.time() if now is None else now))

    change_consent(path, ask)
    return recorded
