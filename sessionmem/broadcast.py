"""Fan-out of live events (new prompts, observations, summaries, session states) to SSE clients.

Publishing never blocks and never fails: each subscriber has a bounded channel, and
a subscriber too slow to keep up is disconnected (its channel closed) rather than
allowed to hold memory or slow the actors down.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import trio

SUBSCRIBER_BUFFER = 256


class Broadcaster:
    def __init__(self) -> None:
        self._subscribers: set[trio.MemorySendChannel[tuple[str, dict[str, Any]]]] = set()
        self._published = 0
        self._dropped_subscribers = 0

    def publish(self, kind: str, data: dict[str, Any]) -> None:
        self._published += 1
        for channel in list(self._subscribers):
            try:
                channel.send_nowait((kind, data))
            except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                self._subscribers.discard(channel)
                channel.close()
                self._dropped_subscribers += 1

    @contextmanager
    def subscribe(self) -> Iterator[trio.MemoryReceiveChannel[tuple[str, dict[str, Any]]]]:
        send, receive = trio.open_memory_channel[tuple[str, dict[str, Any]]](SUBSCRIBER_BUFFER)
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

    def statistics(self) -> dict[str, Any]:
        return {
            "subscribers": len(self._subscribers),
            "published": self._published,
            "dropped_subscribers": self._dropped_subscribers,
        }
