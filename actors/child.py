"""What the supervisor keeps for each session actor: everything that survives a restart.

The mailbox, the messages taken but not yet finished (``inflight``), the journal
backlog being replayed, and the counters ``/debug`` shows all live here, owned by
the supervisor, so a crashed actor's replacement picks up exactly where its
predecessor stopped, in the same order.
"""

from __future__ import annotations

import collections
import time
from typing import Any

import trio

from sessionmem.events import Envelope, event_kind


class MailboxFull(Exception):
    """The session's mailbox has no room; the HTTP edge answers 503 with Retry-After."""


class SessionChild:
    def __init__(self, claude_session_id: str, mailbox_size: int) -> None:
        self.claude_session_id = claude_session_id
        self.mailbox_size = mailbox_size
        self.send: trio.MemorySendChannel[Envelope] | None = None
        self.receive: trio.MemoryReceiveChannel[Envelope] | None = None
        self.open_mailbox()
        # Oldest first: what a fresh actor must process before its mailbox.
        self.inflight: collections.deque[Envelope] = collections.deque()
        self.backlog: collections.deque[Envelope] = collections.deque()
        self.reserved = 0
        self.running = False
        self.failed = False
        self.project = ""
        self.state = "starting"
        self.crash_times: collections.deque[float] = collections.deque()
        self.restarts = 0
        self.starts = 0
        self.processed = 0
        self.processed_by_kind: collections.Counter[str] = collections.Counter()
        self.peak_depth = 0
        self.last_error = ""
        self.last_error_at: float | None = None
        self.last_active = time.time()
        self.batch_size = 0

    def open_mailbox(self) -> None:
        self.send, self.receive = trio.open_memory_channel[Envelope](self.mailbox_size)

    def close_mailbox(self) -> None:
        """No more messages; the actor drains what is there."""
        if self.send is not None:
            self.send.close()

    def drop_mailbox(self) -> None:
        """For a stopped, empty child: the next delivery opens a new mailbox."""
        self.close_mailbox()
        self.send = self.receive = None

    def mailbox_depth(self) -> int:
        return self.send.statistics().current_buffer_used if self.send is not None else 0

    def depth(self) -> int:
        return self.mailbox_depth() + len(self.backlog) + len(self.inflight)

    def has_work(self) -> bool:
        return bool(self.backlog or self.inflight or self.mailbox_depth() or self.reserved)

    def reserve(self) -> None:
        if self.mailbox_depth() + self.reserved >= self.mailbox_size:
            raise MailboxFull(self.claude_session_id)
        self.reserved += 1

    def note_depth(self) -> None:
        self.peak_depth = max(self.peak_depth, self.depth())

    def finished(self, envelope: Envelope) -> None:
        """``envelope`` is fully processed (its result is durable)."""
        try:
            self.inflight.remove(envelope)
        except ValueError:
            pass
        self.processed += 1
        self.processed_by_kind[event_kind(envelope.event)] += 1
        self.last_active = time.time()

    def snapshot(self) -> dict[str, Any]:
        return {
            "claudeSessionId": self.claude_session_id,
            "project": self.project,
            "state": self.state,
            "running": self.running,
            "failed": self.failed,
            "mailbox_depth": self.mailbox_depth(),
            "mailbox_capacity": self.mailbox_size,
            "backlog": len(self.backlog),
            "inflight": len(self.inflight),
            "peak_depth": self.peak_depth,
            "batch_size": self.batch_size,
            "processed": self.processed,
            "processed_by_kind": dict(self.processed_by_kind),
            "starts": self.starts,
            "restarts": self.restarts,
            "last_error": self.last_error,
            "last_error_at": self.last_error_at,
            "idle_seconds": round(time.time() - self.last_active, 3),
        }
