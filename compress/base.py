"""The compressor interface, what a compressor may know of a session, and its statistics.

A compressor turns a batch of tool uses into observations (one per tool use, in the
same order) and a session's prompts and observations into a summary. Both backends
are deterministic in shape: they never drop an item and never raise for bad model
output -- the worst case is an observation marked ``compressed=False``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import msgspec

from sessionmem.compress.breaker import BreakerStatistics
from sessionmem.compress.budget import BudgetStatistics
from sessionmem.events import ObservationEvent, SummarizeEvent
from sessionmem.records import CompressedObservation, CompressedSummary, SummaryInputs
from sessionmem.settings import Backend


class SessionContext(msgspec.Struct, frozen=True):
    """What a compressor may know about the session a batch belongs to."""

    claude_session_id: str
    project: str
    cwd: str = ""
    prompt: str = ""  # the user prompt the tool uses answer
    tokens_used: int = 0  # LLM tokens the session had spent when its actor started


class ProviderStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """Where an LLM backend's requests go and what they carry, from sessionmem's settings (compress/provider.py)."""

    host: str  # the host of the model's address (the base URL)
    credential: str  # which credential, and where it is configured: never its value
    proxy: str = ""  # the host[:port] of llm_proxy the requests go through ("": none); never its user or password
    ca_bundle: bool = False  # llm_ca_bundle is set: its CAs are trusted besides the system's


class CompressorStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """Counters of a compressor; the LLM figures stay 0 for the offline one."""

    backend: str
    model: str = ""
    tool_uses: int = 0  # compressed into observations
    summaries: int = 0
    calls: int = 0  # LLM calls, retries included
    in_flight: int = 0
    retries: int = 0
    failures: int = 0  # calls given up after their retries
    unparsed_replies: int = 0
    raw_fallbacks: int = 0  # observations or summaries built from raw data instead
    offline_fallbacks: int = 0  # tool uses and summaries given to the offline compressor (breaker, budget)
    input_tokens: int = 0
    output_tokens: int = 0
    client_ready: bool = False  # the LLM client is loaded (it loads in the background after start)
    breaker: BreakerStatistics | None = None
    budget: BudgetStatistics | None = None
    reason: str = ""  # why this backend runs (the setting, or what ``auto`` found), and what it does meanwhile
    last_failure: str = ""  # why the latest LLM request failed for good ("" once one succeeds)
    provider: ProviderStatistics | None = None  # where its requests go (None offline)


class Compressor(Protocol):
    name: Backend  # which backend it is (compress/choice.py builds the one chosen at start)

    async def compress(
        self, context: SessionContext, events: Sequence[ObservationEvent]
    ) -> list[CompressedObservation]: ...

    async def summarize(
        self, context: SessionContext, request: SummarizeEvent, inputs: SummaryInputs
    ) -> CompressedSummary: ...

    def statistics(self) -> CompressorStatistics: ...

    def seed_usage(self, tokens_today: int) -> None:
        """LLM tokens already spent today (by earlier runs), for the daily budget."""

    async def warm_up(self) -> None:
        """Load what the first call would otherwise wait for (run in the background after start)."""

    async def aclose(self) -> None: ...
