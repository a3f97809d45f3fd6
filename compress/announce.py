"""Telling the user, once, that ``compressor = "auto"`` moved their memory onto a model they pay for.

``auto`` starts a user on the offline compressor and moves them onto their Claude Code
subscription the moment the CLI's login is usable (or onto the API key in
``anthropic_api_key``): from then on every batch of tool uses costs tokens of their plan or
their key. That is said once per data dir and per way of paying: in the worker's log when
it happens, and in the system message of the next SessionStart -- the one line Claude Code
shows the user at the start of a session, beside "N memories loaded"; the log and
``sessionmem status`` are read only when something already seems wrong
(docs/compressors.md#which-one-runs-compressor--auto).

Resource handling:
    ``<data dir>/compressor-announced.json`` records the way of paying last announced, written
    when a SessionStart took the message (a worker that restarts does not say it again; a
    new way of paying is said anew). Read and written on a worker thread.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import trio

log = logging.getLogger(__name__)

ANNOUNCED_FILE = "compressor-announced.json"


class SwitchNotice:
    """The one message of a switch onto a paid model, until a SessionStart takes it."""

    def __init__(self, data_dir: Path) -> None:
        self._path = data_dir / ANNOUNCED_FILE
        self._pending: tuple[str, str] | None = None  # (the way of paying, the message)
        self._offered: set[str] = set()

    async def offer(self, key: str, message: str) -> None:
        """The worker now pays with ``key``: log ``message`` and keep it for the next SessionStart, unless
        ``key`` was announced already (in this run, or recorded in the data dir)."""
        if key in self._offered:
            return
        self._offered.add(key)
        if await trio.to_thread.run_sync(self._announced) == key:
            return
        log.warning("%s", message)
        self._pending = (key, message)

    async def take(self) -> str:
        """The message for this SessionStart ("" if none), recorded as said."""
        if self._pending is None:
            return ""
        key, message = self._pending
        self._pending = None
        try:
            await trio.to_thread.run_sync(self._record, key)
        except OSError as exc:  # said now; at worst said again after a restart
            log.warning("could not record the compressor's announcement in %s: %s", self._path, exc)
        return message

    def _announced(self) -> str:
        try:
            recorded = json.loads(self._path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return ""
        return recorded.get("key", "") if isinstance(recorded, dict) else ""

    def _record(self, key: str) -> None:
        temporary = self._path.with_suffix(".tmp")
        temporary.write_text(json.dumps({"key": key}), encoding="utf-8")
        temporary.replace(self._path)
