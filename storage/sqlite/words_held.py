"""Which of a query's words each document holds, as its full-text index has them: what hybrid
search weighs a full-text match by (:func:`sessionmem.search.hybrid.fuse`).

bm25 adds up what each word a document holds is worth, so a document holding one rare word
of an eight-word question can rank first by words. The share of the question's words it
holds tells a document about the question from one that shares a word with it.

A document's words are those its full-text table indexes (its columns, read through the
table itself), cut into tokens by the tokenizer the tables are made with
(:data:`TOKENIZER`: Porter stemming, so ``fixing`` holds ``fixed``); a query word is held
when every token of it is (``pane_list_live`` is three tokens).

Each function takes a read connection and runs on a reader thread
(:class:`~sessionmem.storage.sqlite.readers.ReaderPool`); the SQLite store's async methods wrap them.

Error handling:
    A key whose row does not exist is left out of the answer; SQL errors propagate.
"""

from __future__ import annotations

from collections.abc import Sequence

import apsw

from sessionmem.records import DOCUMENT_KINDS
from sessionmem.storage.sqlite.fulltext import TABLES
from sessionmem.storage.sqlite.values import all_rows, integer, text, to_json

# The full-text tables' tokenizer (storage/sqlite/schema.py, tokenize=...): tests/test_search.py checks they agree.
TOKENIZER = ("porter", ("unicode61", "remove_diacritics", "2"))


def words_held(connection: apsw.Connection, terms: Sequence[str],
               keys: Sequence[tuple[str, int]]) -> dict[tuple[str, int], float]:
    """The share (0 to 1) of ``terms`` (a query's words, as ``search_terms.query_terms`` makes them) each of
    ``keys`` holds, by key."""
    name, arguments = TOKENIZER
    tokenizer = connection.fts5_tokenizer(name, list(arguments))

    def tokens(value: str, reason: int) -> set[str]:
        # Without offsets and colocated tokens, the tokenizer answers plain strings.
        return {str(token) for token in tokenizer(value.encode(), reason, None, include_offsets=False,
                                                   include_colocated=False)}

    wanted = [held for held in (tokens(term, apsw.FTS5_TOKENIZE_QUERY) for term in terms) if held]
    held: dict[tuple[str, int], float] = {}
    for kind in DOCUMENT_KINDS:
        ids = [row_id for key_kind, row_id in keys if key_kind == kind]
        if not ids:
            continue
        fts = TABLES[kind][1]
        # Through the full-text table: its columns, each row found by rowid (no MATCH, no scan).
        rows = all_rows(connection, f"SELECT f.rowid, f.* FROM json_each(?) j CROSS JOIN {fts} f ON f.rowid = j.value",
                        (to_json(ids),))
        for row in rows:
            found = tokens(" ".join(text(value) for value in row[1:] if value is not None), apsw.FTS5_TOKENIZE_DOCUMENT)
            share = sum(1 for word in wanted if word <= found) / len(wanted) if wanted else 0.0
            held[(kind, integer(row[0]))] = share
    return held
