"""Importing the events hooks spooled while the worker could not be reached.

At start-up (after the journal replay, before the worker reports ready) and then every
few seconds, each spool file is ingested exactly as if its request had just arrived
(:meth:`Ingestor.by_path`), oldest first, and deleted once its event is committed.

Error handling:
    A file that does not decode is moved to ``spool/rejected/`` with nothing else
    lost; a full mailbox stops this round (the file stays for the next). Duplicates --
    an event that reached the worker before it was spooled -- are recognised by their
    idempotency key and simply removed.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import trio

from sessionmem.actors.child import MailboxFull
from sessionmem.server.ingest import Ingestor
from sessionmem.server.payloads import BadRequest

log = logging.getLogger(__name__)

INTERVAL_S = 5.0


def _pending(directory: Path) -> list[Path]:
    try:
        return sorted(p for p in directory.iterdir() if p.suffix == ".json" and not p.name.startswith("."))
    except FileNotFoundError:
        return []


def _reject(file: Path) -> None:
    rejected = file.parent / "rejected"
    rejected.mkdir(exist_ok=True)
    os.replace(file, rejected / file.name)


async def import_spool(ingestor: Ingestor, directory: Path) -> int:
    """Ingest every spooled event; returns how many were imported."""
    imported = 0
    for file in await trio.to_thread.run_sync(_pending, directory):
        raw = await trio.to_thread.run_sync(file.read_bytes)
        path, _, body = raw.partition(b"\n")
        try:
            status, _ = await ingestor.by_path(path.decode("ascii", "replace"), body)
        except BadRequest as exc:
            log.warning("spooled event %s rejected: %s", file.name, exc.message)
            await trio.to_thread.run_sync(_reject, file)
            continue
        except MailboxFull:
            break  # the session is busy: the rest waits for the next round
        if status >= 400:
            await trio.to_thread.run_sync(_reject, file)
            continue
        await trio.to_thread.run_sync(file.unlink)
        imported += 1
    if imported:
        log.info("imported %d spooled event(s)", imported)
    return imported


async def run_spool_importer(ingestor: Ingestor, directory: Path, *,
                             task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Import once, report the count via ``task_status``, then keep importing until cancelled."""
    task_status.started(await _import_logged(ingestor, directory))
    while True:
        await trio.sleep(INTERVAL_S)
        await _import_logged(ingestor, directory)


async def _import_logged(ingestor: Ingestor, directory: Path) -> int:
    try:
        return await import_spool(ingestor, directory)
    except Exception:  # a broken file system must not take the worker down
        log.exception("spool import failed; retrying in %.0f s", INTERVAL_S)
        return 0
