"""``sessionmem backfill``: memory of past sessions on day one.

Converts a directory of an agent's transcripts into the hook events that agent would have
fired -- Claude Code's (default ``~/.claude/projects``, :mod:`sessionmem.replay.convert`),
the Codex CLI's rollouts (``$CODEX_HOME/sessions``, :mod:`sessionmem.replay.codex_rollouts`),
the Gemini CLI's chats (``~/.gemini/tmp``, :mod:`sessionmem.replay.gemini_chats`), OpenCode's
database (``~/.local/share/opencode/opencode.db``, :mod:`sessionmem.replay.opencode_sessions`): one
:class:`TranscriptReader` an agent, in :data:`READERS` -- and sends them, each naming its agent, to the worker through
the same API and the same edge processing (privacy stripping, size bounds) as live
capture; the worker applies the skip list. Every event carries an idempotency key
derived from the transcript, so running it twice stores nothing twice, and the time
the transcript gives it, so sessions, prompts, observations and summaries keep their
own times (ordering, "recent" and timelines follow them).

Error handling:
    Unparseable lines and files are counted and reported, never fatal. The worker's
    answers are handled by the clients' one policy (:mod:`sessionmem.protocol.delivery`)
    with a command's patience: a busy session (503) is retried after ``Retry-After``,
    failures with backoff, and what still cannot be delivered is spooled for the
    worker to import -- counted, not lost. A refusal (4xx) is counted and reported.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from threading import Lock
from typing import Any

from sessionmem.protocol.agents import CLAUDE_CODE, CODEX, DEFAULT_AGENT, GEMINI_CLI, OPENCODE
from sessionmem.protocol.client_settings import ClientConfig
from sessionmem.protocol.delivery import Outcome, Patience, deliver
from sessionmem.protocol.git_remote import RepositoryIdentity, repository_identity
from sessionmem.protocol.project import project_of
from sessionmem.protocol.requests import encoded_call
from sessionmem.replay.codex_rollouts import convert_rollouts, rollout_files
from sessionmem.replay.convert import ConversionStats, ReplaySession, convert, transcript_files
from sessionmem.replay.gemini_chats import chat_files, convert_chats
from sessionmem.replay.opencode_sessions import DATABASE_GLOB, convert_sessions, database_files, default_root


@dataclass(frozen=True)
class TranscriptReader:
    """Where an agent keeps its transcripts, how to find them, and how to turn them into contract events."""

    default_root: Callable[[], Path]
    files: Callable[[Path], list[Path]]
    convert: Callable[[Iterable[Path], ConversionStats], list[ReplaySession]]
    pattern: str  # the files it reads, for a message


def _codex_sessions() -> Path:
    home = os.environ.get("CODEX_HOME")
    return (Path(home) if home else Path.home() / ".codex") / "sessions"


READERS = {
    CLAUDE_CODE: TranscriptReader(lambda: Path.home() / ".claude" / "projects", transcript_files, convert,
                                  "*.jsonl, *.json"),
    CODEX: TranscriptReader(_codex_sessions, rollout_files, convert_rollouts, "rollout-*.jsonl"),
    GEMINI_CLI: TranscriptReader(lambda: Path.home() / ".gemini" / "tmp", chat_files, convert_chats,
                                 "chats/session-*.jsonl"),
    OPENCODE: TranscriptReader(default_root, database_files, convert_sessions, DATABASE_GLOB),
}


@dataclass
class BackfillReport:
    conversion: ConversionStats
    sent: int = 0
    accepted: int = 0
    duplicates: int = 0
    skipped: int = 0
    refused: int = 0
    spooled: int = 0
    lost: int = 0
    errors: list[str] = field(default_factory=list)

    def count(self, outcome: Outcome) -> str | None:
        """Add one delivery to the figures; returns an error line for a refused or lost event."""
        self.sent += 1
        if outcome.status == "delivered":
            assert outcome.reply is not None
            try:
                body = outcome.reply.json()
            except ValueError:
                body = {}
            if body.get("duplicate") or body.get("status") == "duplicate":
                self.duplicates += 1
            elif body.get("status") == "skipped" or body.get("skipped"):
                self.skipped += 1
            else:
                self.accepted += 1
            return None
        if outcome.status == "spooled":
            self.spooled += 1
            return None
        if outcome.status == "refused":
            self.refused += 1
        else:
            self.lost += 1
        return outcome.detail


def send_event(config: ClientConfig, payload: dict[str, object], key: str, project: str,
               patience: Patience, *, occurred_at: float = 0.0,
               identity: RepositoryIdentity | None = None, agent: str = DEFAULT_AGENT) -> Outcome | None:
    """Deliver one hook event of ``agent`` as its API call; ``None`` when the event sends nothing."""
    call = encoded_call(payload, project=project, key=key, cap=config.tool_response_cap,
                        occurred_at=occurred_at, identity=identity, agent=agent)
    if call is None or call[2] is None:  # nothing to send, or SessionStart (a read)
        return None
    method, path, encoded = call
    return deliver(config, method, path, encoded, patience=patience)


def backfill(root: Path, config: ClientConfig, *, agent: str = DEFAULT_AGENT, workers: int = 4,
             patience: Patience | None = None, progress: Callable[[int], Any] | None = None) -> BackfillReport:
    """Send every session of ``agent`` under ``root`` to the worker of ``config``, each event naming the agent;
    sessions in parallel, events in order.

    ``progress``, if given, is called once with the number of events and returns an
    object with ``update(n)`` and ``close()`` (a ``tqdm`` bar, say).
    """
    stats = ConversionStats()
    reader = READERS[agent]
    sessions = reader.convert(reader.files(root), stats)
    report = BackfillReport(stats)
    lock = Lock()
    bar = progress(sum(len(s.events) for s in sessions)) if progress is not None else None

    patience = patience or Patience.patient()

    def one_session(session: ReplaySession) -> None:
        project = project_of(session.cwd)
        # Its repository, when the directory is still there (else no key: the session keeps its name alone).
        identity = repository_identity(session.cwd)
        for event in session.events:
            outcome = send_event(config, event.payload, f"backfill:{event.key}", project, patience,
                                 occurred_at=event.at, identity=identity, agent=agent)
            if outcome is not None:
                with lock:
                    error = report.count(outcome)
                    if error:
                        report.errors.append(f"{session.session_id} {event.stage}: {error}")
            if bar is not None:
                bar.update(1)

    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(one_session, sessions))
    finally:
        if bar is not None:
            bar.close()
    return report
