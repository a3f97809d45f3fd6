"""The queries of the retrieval evaluation: where they come from, what answers them, and which half they are in.

Two sources:

- **Prompt-derived** (category ``prompt``): every stored prompt, searched in its project
  among the observations stored before it. Relevant are those earlier observations
  touching a file the prompt's own turn touched; a prompt whose turn touched no file
  seen before is not a query. Id: ``prompt:<project>:<claude_session_id>:<prompt_number>``.
- **Written** (``bench/queries/<project>.jsonl``): questions a developer would type,
  each with the ``tool_use_id``\\ s of the tool uses that answer it. Searched in their
  project over everything stored; every observation of the project with one of those
  tool use ids is relevant (a tool use is unique within a session only: a transcript
  replayed into two sessions stores it twice).

**No shared words**: a query belongs to that subset when the search's own words of it
(``storage.search_terms.query_terms``) match none of its relevant observations in
``observations_fts``: the tokenizer and Porter stemming of the search, so ``fixing``
and ``fixed`` count as shared. Full-text search cannot find any answer of these.

**Halves**: a query is in ``tune`` or ``held_out`` by a hash of its id alone
(:func:`half_of`), so a query never changes half when others are added or removed.
Choices (fusion, weights, cut-offs) are made on ``tune``; ``held_out`` is what they are
judged on.

Error handling:
    A written query file that does not follow the format (bench/README.md) raises
    :class:`QueryFileError` naming the file and line: a field missing, unknown or of the
    wrong type, a category not in :data:`WRITTEN_CATEGORIES`, an id used twice. Answers
    that are not in the replay are not an error of the file but of its pairing with
    a replay: :func:`written_queries` reports them (:class:`UnmatchedAnswers`), and a
    query none of whose answers is stored is skipped.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

import apsw
import msgspec

from sessionmem.protocol.limits import MAX_QUERY_CHARS
from sessionmem.storage.search_terms import query_terms

WRITTEN_CATEGORIES = ("paraphrase", "decision", "failure", "file", "lookup")
PROMPT_CATEGORY = "prompt"
CATEGORIES = (*WRITTEN_CATEGORIES, PROMPT_CATEGORY)
PROMPT, WRITTEN = "prompt", "written"
TUNE, HELD_OUT = "tune", "held_out"
HALVES = (TUNE, HELD_OUT)
# Part of every id's hash. Changing it reshuffles the halves and spoils every choice made
# on the tune half: never change it. It was picked once, among the first 2,000, as the one
# that split the first 421 queries (335 written, 86 prompt-derived) most evenly by category,
# by sharing words or not, and by project: at most 2 apart in any category.
SPLIT_SALT = "sessionmem-retrieval-split-1898:"
_NUMBERED = re.compile(r"^(.*?)([0-9]+)$")
MIN_WORDS, MAX_WORDS = 3, 20
MAX_ANSWERS = 8
# Scopes of prompt-derived queries: what was stored before the prompt (any earlier turn),
# and what earlier sessions stored (memory proper: a session's own turns are still in
# Claude's context). Written queries see everything their project stored.
EARLIER, EARLIER_SESSIONS = "earlier", "earlier_sessions"


class WrittenQuery(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One line of a written query file (the format: bench/README.md). Unknown fields are refused: a typo
    such as ``answer`` for ``answers`` must not pass as a query without answers."""

    id: Annotated[str, msgspec.Meta(pattern=r"^\S+-[0-9]{3}$")]
    project: Annotated[str, msgspec.Meta(min_length=1)]
    category: Literal["paraphrase", "decision", "failure", "file", "lookup"]
    query: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_QUERY_CHARS)]
    answers: Annotated[list[Annotated[str, msgspec.Meta(min_length=1)]], msgspec.Meta(min_length=1,
                                                                                      max_length=MAX_ANSWERS)]
    why: str


class QueryFileError(ValueError):
    """A written query file breaks the format; the message starts with ``file:line:``."""


@dataclass(frozen=True)
class Located:
    query: WrittenQuery
    where: str  # file:line


@dataclass(frozen=True)
class UnmatchedAnswers:
    """Answers of a written query that no stored observation of its project has."""

    id: str
    where: str
    missing: tuple[str, ...]
    skipped: bool  # none of its answers is stored: the query is left out


@dataclass
class Query:
    id: str
    source: str  # PROMPT or WRITTEN
    category: str  # one of CATEGORIES
    project: str
    text: str
    until: float | None  # only observations stored before this are eligible; None: everything
    relevant: frozenset[int]
    shares_words: bool = True
    recent: list[int] = field(default_factory=list)  # prompt queries: the newest eligible observations first

    @property
    def half(self) -> str:
        return half_of(self.id)


def half_of(query_id: str) -> str:
    """``tune`` or ``held_out``, from the id alone: stable forever.

    An id ending in a number (``vsla-017``, ``prompt:vsla:<session>:3``) is paired with its neighbour
    (``vsla-016``: the same id but the number's last bit); a hash of the pair says which of the two is in
    which half. Authors number a project's queries in order and often write a category's queries in a
    row, so pairs keep each project, and mostly each category, evenly split where a hash per id would
    not. Other ids: the parity of a hash of the id.
    """
    numbered = _NUMBERED.match(query_id)
    if numbered is None:
        return (TUNE, HELD_OUT)[_bit(query_id)]
    stem, number = numbered.group(1), int(numbered.group(2))
    return (TUNE, HELD_OUT)[_bit(f"{stem}{number // 2}") ^ (number & 1)]


def _bit(text: str) -> int:
    return hashlib.sha256((SPLIT_SALT + text).encode()).digest()[0] & 1


_decoder = msgspec.json.Decoder(WrittenQuery)


def query_files(paths: Iterable[Path]) -> list[Path]:
    """The ``*.jsonl`` files of ``paths`` (a directory stands for the files in it), sorted by name."""
    files: list[Path] = []
    for path in paths:
        files.extend(sorted(path.glob("*.jsonl")) if path.is_dir() else [path])
    return files


def load_written(files: Sequence[Path], *, file_named_after_project: bool = True) -> list[Located]:
    """Every query of ``files``, checked (module docstring); raises :class:`QueryFileError` at the first fault.

    ``file_named_after_project``: each line's project must be its file's name (``vsla.jsonl``), as in
    ``bench/queries/``.
    """
    seen: dict[str, str] = {}
    located = []
    for path in files:
        for number, line in enumerate(path.read_bytes().splitlines(), start=1):
            where = f"{path}:{number}"
            if not line.strip():
                continue
            try:
                query = _decoder.decode(line)
            except msgspec.ValidationError as exc:
                raise QueryFileError(f"{where}: {exc}") from None
            except msgspec.DecodeError as exc:
                raise QueryFileError(f"{where}: not a JSON object: {exc}") from None
            if query.id in seen:
                raise QueryFileError(f"{where}: id {query.id!r} is already used at {seen[query.id]}")
            fault = _fault(query, path if file_named_after_project else None)
            if fault:
                raise QueryFileError(f"{where}: {query.id}: {fault}")
            seen[query.id] = where
            located.append(Located(query, where))
    return located


def _fault(query: WrittenQuery, path: Path | None) -> str | None:
    """What the format forbids beyond the types (bench/README.md), or ``None``."""
    if not query.id.startswith(f"{query.project}-"):
        return f"the id must be {query.project!r}, a dash and three digits"
    if path is not None and path.stem != query.project:
        return f"project {query.project!r} in {path.name} (a file holds the queries of the project it is named after)"
    words = len(query.query.split())
    if not MIN_WORDS <= words <= MAX_WORDS:
        return f"the query has {words} words ({MIN_WORDS} to {MAX_WORDS})"
    if "toolu_" in query.query:
        return "the query names a tool use id"
    if len(set(query.answers)) != len(query.answers):
        return "an answer is listed twice"
    return None


def written_queries(connection: apsw.Connection, located: Sequence[Located]) -> tuple[list[Query],
                                                                                       list[UnmatchedAnswers]]:
    """Each written query with its relevant observations (answers mapped through ``observations.tool_use_id``),
    and the answers not found in the store."""
    queries = []
    unmatched = []
    for item in located:
        written = item.query
        relevant: set[int] = set()
        missing = []
        for tool_use_id in written.answers:
            rows = [row_id for (row_id,) in connection.execute(
                "SELECT id FROM observations WHERE project = ? AND tool_use_id = ?", (written.project, tool_use_id))]
            if not rows:
                missing.append(tool_use_id)
            relevant.update(rows)
        if missing:
            unmatched.append(UnmatchedAnswers(written.id, item.where, tuple(missing), skipped=not relevant))
        if not relevant:
            continue
        text = written.query
        queries.append(Query(written.id, WRITTEN, written.category, written.project, text, None, frozenset(relevant),
                             shares_words=shares_words(connection, text, relevant)))
    return queries, unmatched


def prompt_queries(connection: apsw.Connection, scope: str, *, recent: int) -> list[Query]:
    """The prompt-derived queries of ``scope`` (:data:`EARLIER` or :data:`EARLIER_SESSIONS`), each with the
    ``recent`` newest eligible observations (the recency baseline)."""
    prompts = connection.execute(
        "SELECT s.project, s.claude_session_id, p.prompt_number, p.text, p.created_at, s.created_at, p.session_db_id"
        " FROM user_prompts p JOIN sessions s ON s.id = p.session_db_id ORDER BY p.id").fetchall()
    queries = []
    for project, claude_session_id, prompt_number, text, prompt_at, session_at, session_db_id in prompts:
        until = prompt_at if scope == EARLIER else session_at
        files = [path for (path,) in connection.execute(
            "SELECT DISTINCT f.path FROM observation_files f JOIN observations o ON o.id = f.observation_id"
            " WHERE o.session_db_id = ? AND o.prompt_number = ? ORDER BY f.path", (session_db_id, prompt_number))]
        relevant = {row_id for (row_id,) in connection.execute(
            "SELECT DISTINCT o.id FROM observations o JOIN observation_files f ON f.observation_id = o.id"
            " WHERE o.project = ? AND o.created_at < ? AND f.path IN (SELECT value FROM json_each(?))",
            (project, until, json.dumps(files)))}
        if not relevant:
            continue
        text = text[:MAX_QUERY_CHARS]
        newest = [row_id for (row_id,) in connection.execute(
            "SELECT id FROM observations WHERE project = ? AND created_at < ? ORDER BY created_at DESC, id DESC"
            " LIMIT ?", (project, until, recent))]
        queries.append(Query(f"prompt:{project}:{claude_session_id}:{prompt_number}", PROMPT, PROMPT_CATEGORY,
                             project, text, until, frozenset(relevant),
                             shares_words=shares_words(connection, text, relevant), recent=newest))
    return queries


def shares_words(connection: apsw.Connection, text: str, relevant: Iterable[int]) -> bool:
    """Whether any of the search's words of ``text`` is in one of the ``relevant`` observations."""
    terms = query_terms(text)
    if not terms:
        return False
    expression = " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)
    return connection.execute(
        "SELECT count(*) FROM observations_fts WHERE observations_fts MATCH ? AND rowid IN"
        " (SELECT value FROM json_each(?))", (expression, json.dumps(sorted(relevant)))).fetchone()[0] > 0
