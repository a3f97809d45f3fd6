"""The compressor interface and the choice of backend.

A compressor turns a batch of tool uses into observations (one per tool use, in the
same order) and a session's prompts and observations into a summary. Both backends
are deterministic in shape: they never drop an item and never raise for bad model
output -- the worst case is an observation marked ``compressed=False``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import msgspec

from sessionmem.config import Settings, anthropic_credentials_configured
from sessionmem.events import ObservationEvent, SummarizeEvent
from sessionmem.records import CompressedObservation, CompressedSummary
from sessionmem.storage.base import SummaryInputs


class SessionContext(msgspec.Struct, frozen=True):
    """What a compressor may know about the session a batch belongs to."""

    claude_session_id: str
    project: str
    cwd: str = ""
    prompt: str = ""  # the user prompt the tool uses answer


class Compressor(Protocol):
    name: str

    async def compress(
        self, context: SessionContext, events: Sequence[ObservationEvent]
    ) -> list[CompressedObservation]: ...

    async def summarize(
        self, context: SessionContext, request: SummarizeEvent, inputs: SummaryInputs
    ) -> CompressedSummary: ...

    def statistics(self) -> dict[str, Any]: ...

    async def aclose(self) -> None: ...


def choose_compressor(settings: Settings) -> Compressor:
    """``auto`` means anthropic when an API key or auth token is configured, else offline."""
    from sessionmem.compress.offline import OfflineCompressor

    mode = settings.compressor
    if mode == "auto":
        mode = "anthropic" if anthropic_credentials_configured() else "offline"
    if mode == "anthropic":
        from sessionmem.compress.anthropic_backend import AnthropicCompressor

        return AnthropicCompressor(settings)
    return OfflineCompressor()
