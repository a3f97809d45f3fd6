"""Transcripts are files other programs wrote: whatever a line holds, a backfill reads on.

Each agent's recorded transcript (Claude Code's JSONL, a Codex rollout, a Gemini CLI chat file, an
OpenCode database) with its values replaced by others JSON can hold: every field, three levels deep,
of each kind of line, by each of a few values of the wrong type (a null, a text, a list, an object
where another was), and, at random, a few values anywhere by anything (a field gone, too). The
reader never raises; every event it plays back is one the worker's request builder takes; the hooks'
own readers of the last turn never raise either. A line the readers cannot use costs that line, not
the backfill.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionmem.hooks.codex_transcript import last_codex_turn
from sessionmem.hooks.transcript import last_turn
from sessionmem.protocol.agents import CLAUDE_CODE, CODEX, GEMINI_CLI, OPENCODE
from sessionmem.protocol.requests import encoded_call
from sessionmem.replay.codex_rollouts import convert_rollouts
from sessionmem.replay.convert import ConversionStats, ReplaySession, convert
from sessionmem.replay.gemini_chats import convert_chats
from sessionmem.replay.opencode_sessions import convert_sessions

from .conftest import FIXTURES
from .test_fuzz import nested

CLAUDE_TRANSCRIPTS = [FIXTURES / "transcripts" / "v2.0-agent-files" / "c45af7b1-cb7c-4e51-93db-8cbb250a877a.jsonl",
                      FIXTURES / "transcripts" / "v1.0-inline-sidechain" / "5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl"]
CODEX_ROLLOUTS = sorted((FIXTURES / "codex").glob("rollout-*.jsonl"))
GEMINI_CHAT = next((FIXTURES / "gemini" / "tmp" / "project" / "chats").glob("session-*.jsonl"))
OPENCODE_DATABASE = FIXTURES / "opencode" / "opencode.db"
FUZZ = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def entries_of(path: Path) -> list[Any]:
    """The lines of a JSONL fixture that parse (a fixture may hold broken ones on purpose)."""
    found = []
    for line in path.read_text().splitlines():
        try:
            found.append(json.loads(line))
        except ValueError:
            continue
    return found


@st.composite
def replaced(draw: st.DrawFn, value: Any) -> Any:
    """``value`` with one of its parts (itself, or a value somewhere inside it) replaced by another, or a key
    of an object dropped."""
    if isinstance(value, dict) and value and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(value)))
        if draw(st.integers(0, 9)) == 0:
            return {k: v for k, v in value.items() if k != key}
        return {**value, key: draw(replaced(value[key]))}
    if isinstance(value, list) and value and draw(st.booleans()):
        at = draw(st.integers(0, len(value) - 1))
        return [*value[:at], draw(replaced(value[at])), *value[at + 1:]]
    return draw(nested)


@st.composite
def mutated(draw: st.DrawFn, entries: list[Any]) -> list[Any]:
    """``entries`` with one to four of them :func:`replaced` in part."""
    entries = list(entries)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(entries) - 1))
        entries[at] = draw(replaced(entries[at]))
    return entries


# Where an object, a list or a text was: nothing, a text, a list, an object (a number fails as a list does).
WRONG_TYPES = (None, "x", [None], {"x": None})
DEPTH = 3


def _paths(value: Any, depth: int) -> Iterator[tuple[Any, ...]]:
    """The paths to ``value``'s parts, ``depth`` levels deep: an object's every key, a list's first item."""
    if depth == 0:
        return
    steps: Iterable[Any] = value if isinstance(value, dict) else [0] if isinstance(value, list) and value else []
    for step in steps:
        yield (step,)
        yield from ((step, *rest) for rest in _paths(value[step], depth - 1))


def _with(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, *rest = path
    if isinstance(value, dict):
        return {**value, head: _with(value[head], tuple(rest), new)}
    return [_with(value[0], tuple(rest), new), *value[1:]]


def _kind(entry: Any) -> str:
    """What sort of line: its type and subtype, the types of its content's blocks, its payload's type."""
    if not isinstance(entry, dict):
        return type(entry).__name__
    inner = [entry.get(key) for key in ("message", "payload", "$set")]
    blocks = [block.get("type") for part in inner if isinstance(part, dict)
              for block in part.get("content") or [] if isinstance(block, dict)]
    payload = entry.get("payload")
    return json.dumps([entry.get("type"), entry.get("subtype"), blocks,
                       payload.get("type") if isinstance(payload, dict) else None])


def wrong_typed(entries: list[Any]) -> Iterator[tuple[str, int, Any]]:
    """For the first line of each kind (:func:`_kind`) in ``entries``, and every path :data:`DEPTH` deep in
    it, each of :data:`WRONG_TYPES` there: (what was replaced, the line's index, the line so changed)."""
    first: dict[str, int] = {}
    for at, entry in enumerate(entries):
        first.setdefault(_kind(entry), at)
    for at in first.values():
        for path in _paths(entries[at], DEPTH):
            for wrong in WRONG_TYPES:
                yield f"line {at + 1}, {'.'.join(map(str, path))} = {wrong!r}", at, _with(entries[at], path, wrong)


def write_jsonl(path: Path, lines: Iterable[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(lines))
    return path


def jsonl(entries: Iterable[Any]) -> list[str]:
    return [json.dumps(entry) + "\n" for entry in entries]


def assert_sendable(sessions: list[ReplaySession], agent: str) -> None:
    """Every event played back is a request the backfill can send (or one it passes over), built without error."""
    for session in sessions:
        for event in session.events:
            assert isinstance(event.payload, dict)
            encoded_call(event.payload, project="fuzz", key=event.key, occurred_at=event.at, agent=agent)


def read_claude_code(lines: list[str], folder: Path) -> None:
    path = write_jsonl(folder / "session.jsonl", lines)
    assert_sendable(convert([path], ConversionStats()), CLAUDE_CODE)
    last_turn(str(path))


def read_codex(lines: list[str], folder: Path) -> None:
    path = write_jsonl(folder / "rollout-2026-12-02T07-32-56-fuzz.jsonl", lines)
    assert_sendable(convert_rollouts([path], ConversionStats()), CODEX)
    last_codex_turn(str(path))


def read_gemini_cli(lines: list[str], folder: Path) -> None:
    path = write_jsonl(folder / "project" / "chats" / GEMINI_CHAT.name, lines)
    assert_sendable(convert_chats([path], ConversionStats()), GEMINI_CLI)


JSONL = [*((fixture, read_claude_code) for fixture in CLAUDE_TRANSCRIPTS),
         *((fixture, read_codex) for fixture in CODEX_ROLLOUTS), (GEMINI_CHAT, read_gemini_cli)]
JSONL_IDS = [f"{read.__name__.removeprefix('read_')}-{fixture.stem[:12]}" for fixture, read in JSONL]
# The sweep reads each case whole: one rollout of Codex's (its lines of any kind), the random mutations all three.
SWEPT = [case for case in JSONL if case[1] is not read_codex or case[0].name == "rollout-sample.jsonl"]
SWEPT_IDS = [JSONL_IDS[JSONL.index(case)] for case in SWEPT]


def read_opencode(changes: Iterable[tuple[str, str, Any]], folder: Path) -> None:
    """OpenCode's recorded database with the ``data`` of some message and part rows replaced, read back."""
    path = folder / "opencode.db"
    shutil.copy(OPENCODE_DATABASE, path)
    connection = apsw.Connection(str(path))
    try:
        for table, row_id, data in changes:
            assert table in ("message", "part")
            connection.execute(f"UPDATE {table} SET data = ? WHERE id = ?", (json.dumps(data), row_id))
    finally:
        connection.close()
    assert_sendable(convert_sessions([path], ConversionStats()), OPENCODE)


def opencode_rows() -> list[tuple[str, str, Any]]:
    """(table, id, data) of the recorded database's messages and parts."""
    connection = apsw.Connection(str(OPENCODE_DATABASE), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [(table, row_id, json.loads(data)) for table in ("message", "part")
                for row_id, data in connection.execute(f"SELECT id, data FROM {table} ORDER BY id")]
    finally:
        connection.close()


def read_all(cases: Iterable[tuple[str, Any]], read: Callable[[Any, Path], None], folder: Path) -> list[str]:
    """Each case read; what failed, and how (all of them, not only the first)."""
    failures = []
    for what, case in cases:
        try:
            read(case, folder)
        except Exception as error:  # noqa: BLE001 -- each case's failure is reported, the others still run
            failures.append(f"{what}: {error!r}")
    return failures


@pytest.mark.parametrize(("fixture", "read"), SWEPT, ids=SWEPT_IDS)
def test_every_field_of_every_kind_of_line_may_have_the_wrong_type(fixture: Path, read: Callable[[Any, Path], None],
                                                                    tmp_path: Path) -> None:
    entries = entries_of(fixture)
    lines = jsonl(entries)
    cases = ((what, [*lines[:at], *jsonl([changed]), *lines[at + 1:]]) for what, at, changed in wrong_typed(entries))
    failures = read_all(cases, read, tmp_path)
    assert not failures, f"{len(failures)} failed, the first: " + "\n".join(failures[:10])


def test_every_field_of_every_kind_of_opencode_record_may_have_the_wrong_type(tmp_path: Path) -> None:
    rows = opencode_rows()
    cases = ((f"{rows[at][0]} {rows[at][1]}{what.removeprefix(f'line {at + 1}')}", [(*rows[at][:2], changed)])
             for what, at, changed in wrong_typed([data for _, _, data in rows]))
    failures = read_all(cases, read_opencode, tmp_path)
    assert not failures, f"{len(failures)} failed, the first: " + "\n".join(failures[:10])


@pytest.mark.parametrize(("fixture", "read"), JSONL, ids=JSONL_IDS)
def test_a_few_values_anywhere_may_be_anything(fixture: Path, read: Callable[[Any, Path], None],
                                               tmp_path: Path) -> None:
    @FUZZ
    @given(entries=mutated(entries_of(fixture)))
    def check(entries: list[Any]) -> None:
        read(jsonl(entries), tmp_path)

    check()


def test_a_few_opencode_records_may_hold_anything(tmp_path: Path) -> None:
    rows = opencode_rows()

    @FUZZ
    @given(changes=st.lists(st.sampled_from(rows).flatmap(
        lambda row: replaced(row[2]).map(lambda data: (row[0], row[1], data))), min_size=1, max_size=4))
    def check(changes: list[tuple[str, str, Any]]) -> None:
        read_opencode(changes, tmp_path)

    check()
