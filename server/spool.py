"""Importing the requests clients spooled while the worker could not take them.

At start-up (after the journal replay, before the worker reports ready) and then
every few seconds, each spool file (format: :mod:`sessionmem.protocol.spool`) is
ingested exactly as if its request had just arrived (:meth:`Ingestor.by_path`),
oldest first, and deleted once its event is committed.

Resource handling:
    File system work runs on worker threads; :meth:`SpoolImporter.run` loops until
    cancelled.

Error handling:
    A file that is not a spooled request, or whose body the worker refuses (a 400),
    is moved to ``spool/rejected/`` with the reason beside it, and the import goes on
    with the next. A full mailbox makes the importer wait for room (the spool is the
    clients' back-pressure overflow, so it must drain); a file still blocked after
    :data:`BLOCKED_WAIT_S` waits for the next round, and the files after it too, which
    keeps each session's events in order. Duplicates -- a request that reached the
    worker before it was spooled -- are recognised by their idempotency key and
    removed. Any other failure (a broken disk, the database) ends the round, is
    logged and counted, and the file stays for the next round.
"""

from __future__ import annotations

import enum
import logging
import os
from collections.abc import Callable
from pathlib import Path

import msgspec
import trio

from sessionmem.actors.child import MailboxFull
from sessionmem.protocol.limits import MAX_BODY_BYTES
from sessionmem.protocol.routes import INGEST
from sessionmem.protocol.spool import (
    SpoolFormatError,
    parse_spool_file,
    pending_spool_files,
    reject_spool_file,
    spool_pending,
)
from sessionmem.runtime.logs import log_exception
from sessionmem.server.ingest import Ingestor
from sessionmem.server.payloads import BadRequest

log = logging.getLogger(__name__)

INTERVAL_S = 5.0
BLOCKED_WAIT_S = 4.0  # how long one round waits for room in a full mailbox
ROOM_POLL_S = 0.05


MAX_ROUTE_LINE = 256  # the route path and newline before a spooled body


def _read_at_most(file: str, size: int) -> bytes:
    with open(file, "rb") as f:
        return f.read(size)


class SpoolOutcome(enum.Enum):
    """What became of one spooled request."""

    IMPORTED = "imported"
    DUPLICATE = "duplicate"  # its idempotency key was journaled before: the file goes, nothing is added
    REJECTED = "rejected"  # unreadable, too large or not a valid body: set aside with the reason
    BLOCKED = "blocked"  # a session's mailbox stayed full: the file stays for the next round


class SpoolStatistics(msgspec.Struct, frozen=True):
    rounds: int
    imported: int
    duplicates: int
    rejected: int
    waiting: int  # files left after the last round
    failed_rounds: int
    last_error: str


class SpoolImporter:
    def __init__(self, ingestor: Ingestor, data_dir: Path, *, max_body_bytes: int = MAX_BODY_BYTES,
                 still_ours: Callable[[], bool] = lambda: True) -> None:
        self._ingestor = ingestor
        self._data_dir = str(data_dir)
        # Whether the data dir is still the one the worker's database is in: a spool written into a
        # new one (the old deleted under the worker) is that directory's next worker's to import.
        self._still_ours = still_ours
        self._max_body_bytes = max_body_bytes
        self._rounds = self._imported = self._duplicates = self._rejected = self._waiting = 0
        self._failed_rounds = 0
        self._last_error = ""

    def statistics(self) -> SpoolStatistics:
        return SpoolStatistics(self._rounds, self._imported, self._duplicates, self._rejected, self._waiting,
                               self._failed_rounds, self._last_error)

    async def pending(self) -> bool:
        """Whether a spooled request waits in this data dir for the next round (one directory scan, off the
        Trio thread); a spool the data dir's next worker owns is not this worker's to wait for."""
        return await trio.to_thread.run_sync(lambda: self._still_ours() and spool_pending(self._data_dir))

    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Import once, report the count via ``task_status``, then keep importing every few seconds."""
        task_status.started(await self.import_round())
        while True:
            await trio.sleep(INTERVAL_S)
            await self.import_round()

    async def import_round(self) -> int:
        """Ingest every spooled request now; returns how many were imported."""
        self._rounds += 1
        imported = 0
        if not await trio.to_thread.run_sync(self._still_ours):
            self._last_error = "the data dir was deleted or replaced: its spool is left to its own worker"
            return 0
        files = await trio.to_thread.run_sync(pending_spool_files, self._data_dir)
        try:
            for index, file in enumerate(files):
                outcome = await self._import_file(file)
                if outcome is SpoolOutcome.BLOCKED:
                    self._waiting = len(files) - index
                    break
                imported += outcome is SpoolOutcome.IMPORTED
            else:
                self._waiting = 0
        except Exception as exc:  # a broken file system or database must not take the worker down
            self._failed_rounds += 1
            self._last_error = f"{type(exc).__name__}: {exc}"[:500]
            log_exception(log, f"spool import failed; retrying in {INTERVAL_S:.0f} s", exc)
        if imported:
            log.info("imported %d spooled event(s)", imported)
        return imported

    async def _import_file(self, file: str) -> SpoolOutcome:
        # What HTTP refuses (413) is not let in by the side door, nor read whole: at most a body's worth.
        raw = await trio.to_thread.run_sync(_read_at_most, file, self._max_body_bytes + MAX_ROUTE_LINE + 1)
        try:
            path, body = parse_spool_file(raw, INGEST)
        except SpoolFormatError as exc:
            return await self._reject(file, str(exc))
        if len(body) > self._max_body_bytes:
            return await self._reject(file, f"larger than the body limit ({self._max_body_bytes} bytes)")
        give_up_at = trio.current_time() + BLOCKED_WAIT_S
        while True:
            try:
                _, reply = await self._ingestor.by_path(path, body, recall=False)
                break
            except MailboxFull:
                if trio.current_time() >= give_up_at:
                    return SpoolOutcome.BLOCKED
                await trio.sleep(ROOM_POLL_S)
            except BadRequest as exc:
                return await self._reject(file, f"{exc.message} (at {exc.path})")
        await trio.to_thread.run_sync(os.unlink, file)
        if reply.duplicate:
            self._duplicates += 1
            return SpoolOutcome.DUPLICATE
        self._imported += 1
        return SpoolOutcome.IMPORTED

    async def _reject(self, file: str, reason: str) -> SpoolOutcome:
        log.warning("spooled request %s rejected: %s", os.path.basename(file), reason[:300])
        await trio.to_thread.run_sync(reject_spool_file, file, reason)
        self._rejected += 1
        return SpoolOutcome.REJECTED
