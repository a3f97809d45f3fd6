"""Document cards of the SQLite store: what a search result, a timeline and the context show of an
observation, a summary or a prompt; the text each document's vector is made from; and timelines.

Each function takes a read connection and runs on a reader thread
(:class:`~sessionmem.storage.sqlite.readers.ReaderPool`); the SQLite store's async methods wrap them.

Error handling:
    A key whose row does not exist is left out of the answer; SQL errors propagate.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import partial
from typing import TYPE_CHECKING

import apsw

from sessionmem.protocol.agents import DEFAULT_AGENT
from sessionmem.protocol.instructions import instruction_like
from sessionmem.records import DOCUMENT_KINDS, OBSERVATION, PROMPT, SUMMARY, Document, DocumentCard, Provenance
from sessionmem.storage.sqlite.fulltext import ALIASES, PROJECT_COLUMNS, TABLES
from sessionmem.storage.sqlite.origins import label_sql, origin_condition
from sessionmem.storage.sqlite.values import all_rows, flag, integer, optional_row, real, text, text_list, to_json

if TYPE_CHECKING:
    from apsw import SQLiteValues


def _ids_json(keys: Iterable[tuple[str, int]], kind: str) -> str:
    return to_json([row_id for key_kind, row_id in keys if key_kind == kind])


# Each card's columns: id, session, project, prompt number, time, then its kind's own, then its
# origin, provenance, flag and its session's agent (last: a card's row without them, as the team
# database reads one, is read the same way).
_CARD_SQL = {
    OBSERVATION: (
        "SELECT o.id, s.claude_session_id, o.project, o.prompt_number, o.created_at, o.type, o.title,"
        f" o.subtitle, o.narrative, o.facts, o.files_read, o.files_modified, {label_sql('o')}, o.provenance, o.flagged,"
        " s.agent"
        " FROM observations o JOIN sessions s ON s.id = o.session_db_id"
        " WHERE o.id IN (SELECT value FROM json_each(?))"),
    SUMMARY: (
        "SELECT m.id, s.claude_session_id, m.project, m.prompt_number, m.created_at, m.request, m.investigated,"
        f" m.learned, m.completed, m.next_steps, {label_sql('m')}, m.provenance, m.flagged, s.agent"
        " FROM session_summaries m JOIN sessions s ON s.id = m.session_db_id"
        " WHERE m.id IN (SELECT value FROM json_each(?))"),
    PROMPT: (
        f"SELECT p.id, s.claude_session_id, p.project, p.prompt_number, p.created_at, p.text, {label_sql('p')},"
        " p.provenance, p.flagged, s.agent"
        " FROM user_prompts p JOIN sessions s ON s.id = p.session_db_id"
        " WHERE p.id IN (SELECT value FROM json_each(?))"),
}
_KIND_COLUMNS = {OBSERVATION: 7, SUMMARY: 5, PROMPT: 1}  # after the five of the head


def card_of_row(kind: str, row: SQLiteValues, origin: str | None = None) -> DocumentCard:
    """A ``_CARD_SQL[kind]`` row as its card (the team database reads its cards in the same shape).

    ``origin``: the card's, when the row does not end with it ("" : this machine's own). A row
    without its provenance and flag is another machine's, read from the team database: its
    provenance is :attr:`Provenance.TEAM` and its text is checked here, whatever it claims. A row
    without its agent is Claude Code's (:data:`~sessionmem.protocol.agents.DEFAULT_AGENT`).
    """
    row_id, session, project, prompt_number, created_at = row[:5]
    width = 5 + _KIND_COLUMNS[kind]
    own = row[5:width]
    if origin is None:
        origin = text(row[width]) if len(row) > width else ""
    if len(row) > width + 2:
        provenance, flagged = text(row[width + 1]), flag(row[width + 2])
    else:
        provenance = Provenance.TEAM.value if origin else Provenance.TOOL.value
        flagged = instruction_like("\n".join(map(str, own)))
    agent = text(row[width + 3]) if len(row) > width + 3 else DEFAULT_AGENT
    head = partial(DocumentCard, kind=kind, id=integer(row_id), claude_session_id=text(session),
                   project=text(project), prompt_number=integer(prompt_number), created_at=real(created_at),
                   origin=origin, provenance=provenance, flagged=flagged, agent=agent)
    if kind == OBSERVATION:
        type_, title, subtitle, narrative = map(text, own[:4])
        facts, files_read, files_modified = map(text_list, own[4:])
        # The offline compressor's narrative repeats the prompt its subtitle holds: say it once.
        lead = (subtitle,) if subtitle and subtitle not in narrative else ()
        body = " ".join(part for part in (*lead, narrative, *facts) if part)
        files = list(dict.fromkeys(files_modified + files_read))
        return head(type=type_, title=title, text=body, files=files)
    if kind == SUMMARY:
        request, investigated, learned, completed, next_steps = map(text, own)
        body = " ".join(f"{label}: {part}" for label, part in (
            ("Completed", completed), ("Learned", learned), ("Investigated", investigated),
            ("Next", next_steps)) if part)
        return head(type=SUMMARY, title=request or "(session summary)", text=body, files=[])
    prompt = text(own[0])
    return head(type=PROMPT, title=prompt, text=prompt, files=[])


def cards(connection: apsw.Connection, keys: Sequence[tuple[str, int]]) -> dict[tuple[str, int], DocumentCard]:
    """The cards of ``keys`` that exist, by key."""
    found: dict[tuple[str, int], DocumentCard] = {}
    for kind in DOCUMENT_KINDS:
        if any(key_kind == kind for key_kind, _ in keys):
            for row in all_rows(connection, _CARD_SQL[kind], (_ids_json(keys, kind),)):
                card = card_of_row(kind, row)
                found[(kind, card.id)] = card
    return found


# -- documents to embed -----------------------------------------------------------------

# A document's text is cut here before tokenizing: the embedder reads ~256 tokens.
DOCUMENT_CHARS = 1200


def document_text(card: DocumentCard) -> str:
    """What a document's vector is made from: its title, then its body (once, not twice)."""
    title, body = card.title.strip(), card.text.strip()
    if card.kind == PROMPT:
        return title[:DOCUMENT_CHARS]
    text = body if title and title.lower() in body.lower() else f"{title}. {body}" if body else title
    return text[:DOCUMENT_CHARS]


def documents(connection: apsw.Connection, keys: Sequence[tuple[str, int]]) -> list[Document]:
    """The documents of ``keys`` that exist, in the order of ``keys``."""
    found = cards(connection, keys)
    return [Document(kind, row_id, document_text(found[(kind, row_id)]))
            for kind, row_id in keys if (kind, row_id) in found]


def document_ids(connection: apsw.Connection, *, after: dict[str, int] | None = None,
                 limit: int | None = None) -> dict[str, list[int]]:
    """Row ids of every kind, ascending; those above ``after[kind]`` only, at most ``limit`` of each."""
    found: dict[str, list[int]] = {}
    for kind in DOCUMENT_KINDS:
        table = TABLES[kind][0]
        rows = all_rows(connection, f"SELECT id FROM {table} WHERE id > ? ORDER BY id LIMIT ?",
                        ((after or {}).get(kind, 0), -1 if limit is None else limit))
        found[kind] = [integer(row_id) for (row_id,) in rows]
    return found


# -- timeline -----------------------------------------------------------------------------


def created_at(connection: apsw.Connection, kind: str, row_id: int) -> tuple[float, str] | None:
    """When the row was created, and its project; ``None`` if it does not exist."""
    table, alias = TABLES[kind][0], ALIASES[kind]
    row = optional_row(
        connection, f"SELECT {alias}.created_at, {PROJECT_COLUMNS[kind]} FROM {table} {alias} WHERE {alias}.id = ?",
        (row_id,))
    return (real(row[0]), text(row[1])) if row is not None else None


def around(connection: apsw.Connection, project: str, moment: float, anchor: tuple[str, int], *,
           before: int, after: int, origin: str | None = None) -> list[tuple[str, int]]:
    """Keys of the ``before`` documents of ``project`` created before ``anchor`` and the ``after``
    ones after it, with the anchor between them, oldest first (ties ordered by kind and id);
    ``origin``: those of that origin only (the anchor stays)."""
    earlier: list[tuple[float, str, int]] = []
    later: list[tuple[float, str, int]] = []
    for kind in DOCUMENT_KINDS:
        table, alias = TABLES[kind][0], ALIASES[kind]
        params: dict[str, object] = {"project": project, "moment": moment,
                                     "id": anchor[1] if kind == anchor[0] else -1, "before": before, "after": after}
        base = (f"SELECT {alias}.created_at, {alias}.id FROM {table} {alias} WHERE {PROJECT_COLUMNS[kind]} = :project"
                f" AND {origin_condition(alias, origin, params)}")
        earlier += [(real(at), kind, integer(row_id)) for at, row_id in all_rows(
            connection, base + f" AND ({alias}.created_at < :moment OR ({alias}.created_at = :moment AND {alias}.id < :id))"
            f" ORDER BY {alias}.created_at DESC, {alias}.id DESC LIMIT :before", params)]
        later += [(real(at), kind, integer(row_id)) for at, row_id in all_rows(
            connection, base + f" AND ({alias}.created_at > :moment OR ({alias}.created_at = :moment AND {alias}.id > :id"
            f" AND :id >= 0)) ORDER BY {alias}.created_at, {alias}.id LIMIT :after", params)]
    earlier = sorted(earlier)[-before:] if before else []
    later = sorted(later)[:after]
    return [(kind, row_id) for _, kind, row_id in earlier] + [anchor] + [(kind, row_id) for _, kind, row_id in later]


def timeline(connection: apsw.Connection, anchor: tuple[str, int], *, before: int,
             after: int, origin: str | None = None) -> list[DocumentCard] | None:
    """The cards of :func:`around` ``anchor``, oldest first; ``None`` when the anchor does not exist."""
    found = created_at(connection, *anchor)
    if found is None:
        return None
    moment, project = found
    keys = around(connection, project, moment, anchor, before=before, after=after, origin=origin)
    by_key = cards(connection, keys)
    return [by_key[key] for key in keys if key in by_key]
