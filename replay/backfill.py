"""``sessionmem backfill``: memory of past sessions on day one.

Converts a directory of Claude Code transcripts (default ``~/.claude/projects``) into
hook events (:mod:`sessionmem.replay.convert`) and sends them to the worker through
the same API and the same edge processing (privacy stripping, size bounds) as live
capture; the worker applies the skip list. Every event carries an idempotency key
derived from the transcript, so running it twice stores nothing twice.

Error handling:
    Unparseable lines and files are counted and reported, never fatal. A 503 (busy
    session) is retried after its ``Retry-After``; any other refusal is counted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from threading import Lock
from typing import Any

from sessionmem.hooks.project import project_of
from sessionmem.hooks.translate import encoded_call
from sessionmem.hooks.worker_client import WorkerUnavailable, request
from sessionmem.replay.convert import ConversionStats, ReplaySession, convert, transcript_files

RETRIES = 20


@dataclass
class BackfillReport:
    conversion: ConversionStats
    sent: int = 0
    accepted: int = 0
    duplicates: int = 0
    skipped: int = 0
    refused: int = 0
    errors: list[str] = field(default_factory=list)


def send_event(host: str, port: int, payload: dict[str, object], key: str, project: str) -> tuple[int, dict[str, object]]:
    """POST one hook event as its API call; returns (status, reply JSON)."""
    call = encoded_call(payload, project=project, key=key)
    if call is None or call[2] is None:  # nothing to send, or SessionStart (a read)
        return 0, {}
    _, path, encoded = call
    for _ in range(RETRIES):
        reply = request(host, port, "POST", path, encoded, timeout=30)
        if reply.status != 503:
            try:
                return reply.status, reply.json()
            except ValueError:
                return reply.status, {}
        time.sleep(float(reply.headers.get("retry-after", "1") or 1))
    return 503, {}


def backfill(root: Path, host: str, port: int, *, workers: int = 4,
             progress: Callable[[int], Any] | None = None) -> BackfillReport:
    """Send every session under ``root`` to the worker at ``host:port``; sessions in parallel, events in order.

    ``progress``, if given, is called once with the number of events and returns an
    object with ``update(n)`` and ``close()`` (a ``tqdm`` bar, say).
    """
    stats = ConversionStats()
    sessions = convert(transcript_files(root), stats)
    report = BackfillReport(stats)
    lock = Lock()
    bar = progress(sum(len(s.events) for s in sessions)) if progress is not None else None

    def one_session(session: ReplaySession) -> None:
        project = project_of(session.cwd)
        for event in session.events:
            try:
                status, body = send_event(host, port, event.payload, f"backfill:{event.key}", project)
            except WorkerUnavailable as exc:
                with lock:
                    report.errors.append(f"{session.session_id}: {exc}")
                return
            with lock:
                if status:
                    report.sent += 1
                if status in (200, 202):
                    if body.get("duplicate") or body.get("status") == "duplicate":
                        report.duplicates += 1
                    elif body.get("status") == "skipped" or body.get("skipped"):
                        report.skipped += 1
                    else:
                        report.accepted += 1
                elif status:
                    report.refused += 1
                    report.errors.append(f"{session.session_id} {event.stage}: HTTP {status} {body}")
            if bar is not None:
                bar.update(1)

    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(one_session, sessions))
    finally:
        if bar is not None:
            bar.close()
    return report
