"""Fan-out of live events (new prompts, observations, summaries, session states) to SSE clients.

Publishing never blocks and never fails: each subscriber has a bounded channel, and
a subscriber too slow to keep up is disconnected (its channel closed) rather than
allowed to hold memory or slow the actors down. What is published is what was stored: the
session actors and the team pull publish after the store's commit returned. Components inside
the worker that must not miss anything (the vector index, the team push) do not listen here:
they wait on the store's commit signal (:mod:`sessionmem.storage.commits`). Live events are
typed records; their tag is the SSE event name (``event: observation``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import msgspec
import trio

SUBSCRIBER_BUFFER = 256


class LivePrompt(msgspec.Struct, frozen=True, tag="prompt", tag_field="event"):
    claude_session_id: str
    project: str
    prompt_number: int
    prompt: str


class LiveObservation(msgspec.Struct, frozen=True, tag="observation", tag_field="event"):
    claude_session_id: str
    project: str
    tool_name: str
    type: str
    title: str


class LiveSummary(msgspec.Struct, frozen=True, tag="summary", tag_field="event"):
    claude_session_id: str
    project: str
    request: str
    completed: str


class LiveSession(msgspec.Struct, frozen=True, tag="session", tag_field="event"):
    claude_session_id: str
    project: str
    status: str  # completed | failed


LiveEvent = LivePrompt | LiveObservation | LiveSummary | LiveSession


def live_event_name(event: LiveEvent) -> str:
    return str(type(event).__struct_config__.tag)  # each event's tag is its name


class BroadcasterStatistics(msgspec.Struct, frozen=True):
    subscribers: int
    published: int
    dropped_subscribers: int  # disconnected for falling behind


class Broadcaster:
    def __init__(self) -> None:
        self._subscribers: set[trio.MemorySendChannel[LiveEvent]] = set()
        self._published = 0
        self._dropped_subscribers = 0

    def publish(self, event: LiveEvent) -> None:
        self._published += 1
        for channel in list(self._subscribers):
            try:
                channel.send_nowait(event)
            except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                self._subscribers.discard(channel)
                channel.close()
                self._dropped_subscribers += 1

    @contextmanager
    def subscribe(self) -> Iterator[trio.MemoryReceiveChannel[LiveEvent]]:
        send, receive = trio.open_memory_channel[LiveEvent](SUBSCRIBER_BUFFER)
        self._subscribers.add(send)
        try:
            yield receive
        finally:
            self._subscribers.discard(send)
            send.close()
            receive.close()

    def close(self) -> None:
        """End every subscription (their receivers see ``EndOfChannel``)."""
        for channel in list(self._subscribers):
            channel.close()
        self._subscribers.clear()

    def statistics(self) -> BroadcasterStatistics:
        return BroadcasterStatistics(len(self._subscribers), self._published, self._dropped_subscribers)
