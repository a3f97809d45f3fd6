"""Which compressor the worker uses (``Settings.resolved_compressor``)."""

from __future__ import annotations

from sessionmem.compress.base import Compressor
from sessionmem.compress.offline import OfflineCompressor
from sessionmem.settings import Settings


def choose_compressor(settings: Settings) -> Compressor:
    if settings.resolved_compressor == "anthropic":
        # Imported only when used: the SDK costs an offline worker ~100 MB and its start-up time.
        from sessionmem.compress.anthropic_backend import AnthropicCompressor

        return AnthropicCompressor(settings)
    if settings.resolved_compressor == "openai-compatible":
        # Imported only when used, as the anthropic SDK is.
        from sessionmem.compress.openai_backend import OpenAICompatibleCompressor

        return OpenAICompatibleCompressor(settings)
    return OfflineCompressor()
