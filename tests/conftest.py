"""Shared fixtures: real worker processes on temporary data dirs, and the scripted Messages API."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sessionmem.testing.messages_api import ScriptedMessagesAPI
from sessionmem.testing.worker_process import WorkerProcess, start_worker

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def worker_factory(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start real worker processes; every one is stopped when the test ends."""
    started: list[WorkerProcess] = []

    def start(data_dir: Path | None = None, **env: Any) -> WorkerProcess:
        worker = start_worker(data_dir or tmp_path / "data",
                              env={"SESSIONMEM_COMPRESSOR": "offline", **{k: str(v) for k, v in env.items()}})
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


@pytest.fixture
def worker(worker_factory: Callable[..., WorkerProcess]) -> WorkerProcess:
    return worker_factory(SESSIONMEM_BATCH_QUIET="0.05")


@pytest.fixture
def messages_api() -> Iterator[ScriptedMessagesAPI]:
    with ScriptedMessagesAPI() as api:
        yield api


@pytest.fixture
def payloads() -> list[dict[str, Any]]:
    """Genuine hook payloads recorded from Claude Code 2.1.328."""
    with open(FIXTURES / "payloads-2.1.328.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def data_dir_contains(data_dir: Path, needle: bytes) -> list[str]:
    """Every file under ``data_dir`` whose bytes contain ``needle`` (database, WAL, logs)."""
    return [str(p) for p in data_dir.rglob("*") if p.is_file() and needle in p.read_bytes()]
