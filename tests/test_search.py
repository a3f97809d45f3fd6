"""Search, timeline and observations by id over the HTTP API: modes, filters, hostile queries."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionmem.testing.harness import InProcessWorker, open_worker

SHOP, BLOG = "/home/me/shop", "/home/me/blog"


async def store_session(worker: InProcessWorker, session: str, cwd: str, prompt: str,
                        tools: list[tuple[str, dict[str, Any]]], *, summary: str = "") -> None:
    await worker.post("/api/sessions/init", {"claudeSessionId": session, "cwd": cwd, "prompt": prompt})
    for number, (tool, tool_input) in enumerate(tools):
        reply = await worker.request("POST", "/api/sessions/observations", {
            "claudeSessionId": session, "cwd": cwd, "tool_name": tool, "tool_input": tool_input,
            "tool_response": "ok", "tool_use_id": f"{session}-{number}"})
        assert reply.status == 202, reply.body
    if summary:
        await worker.post("/api/sessions/summarize", {"claudeSessionId": session, "cwd": cwd,
                                                      "last_assistant_message": summary})
    await worker.wait_idle()


@pytest.fixture
async def memory(tmp_path: Path) -> AsyncIterator[InProcessWorker]:
    """Two projects' memories, every row embedded."""
    async with open_worker(tmp_path / "data", embedder="minilm", batch_quiet_s=0.05) as worker:
        await store_session(worker, "shop-1", SHOP, "make checkout refuse an empty cart", [
            ("Edit", {"file_path": f"{SHOP}/src/cart.py", "old_string": "return total",
                      "new_string": "if not items: raise EmptyCart"}),
            ("Bash", {"command": "pytest tests/test_cart.py", "description": "run the cart tests"}),
        ], summary="Checkout now refuses an empty cart; next: show a friendly message.")
        await store_session(worker, "shop-2", SHOP, "prices should show two decimals", [
            ("Read", {"file_path": f"{SHOP}/src/price.py"}),
            ("Edit", {"file_path": f"{SHOP}/src/price.py", "old_string": "str(amount)",
                      "new_string": "f'{amount:.2f}'"}),
        ])
        await store_session(worker, "blog-1", BLOG, "fix the broken RSS feed dates", [
            ("Edit", {"file_path": f"{BLOG}/feed.py", "old_string": "strftime('%d')",
                      "new_string": "isoformat()"}),
        ])
        with trio.fail_after(60):
            await worker.services.index.caught_up()
        yield worker


def titles(answer: dict[str, Any]) -> list[str]:
    return [result["title"] for result in answer["results"]]


async def test_each_mode_finds_what_it_should(memory: InProcessWorker) -> None:
    words = await memory.get("/api/search?q=cart&mode=fts")
    assert words["vectors"] == "not asked" and words["results"]
    assert all(result["matchedBy"] == ["words"] for result in words["results"])
    assert any("cart" in title.lower() for title in titles(words))

    # No word in common with what it should find: only meaning can.
    question = "shopping basket with nothing in it"
    assert (await memory.get(f"/api/search?q={question}&mode=fts"))["results"] == []
    by_meaning = await memory.get(f"/api/search?q={question}&mode=vector&limit=3")
    assert by_meaning["vectors"] == "used" and "cart" in " ".join(titles(by_meaning)).lower()
    hybrid = await memory.get(f"/api/search?q={question}&limit=3")
    assert "cart" in " ".join(titles(hybrid)).lower()

    # Found by both retrievers: first in hybrid, and says so.
    both = await memory.get("/api/search?q=empty+cart+checkout&limit=5")
    assert both["results"][0]["matchedBy"] == ["words", "meaning"]
    assert both["results"][0]["score"] >= max(result["score"] for result in both["results"])
    assert both["mode"] == "hybrid" and {"kind", "id", "snippet", "createdAt", "files"} <= set(both["results"][0])


async def test_filters_narrow_every_mode(memory: InProcessWorker) -> None:
    for mode in ("hybrid", "fts", "vector"):
        shop = await memory.get(f"/api/search?q=fix+dates+cart+prices&mode={mode}&project=shop&limit=50")
        assert shop["results"] and {r["project"] for r in shop["results"]} == {"shop"}, mode
        every = await memory.get(f"/api/search?q=fix+dates+cart+prices&mode={mode}&project=*&limit=50")
        assert {r["project"] for r in every["results"]} > {"shop"}, mode  # '*' is every project, as MCP says
        edits = await memory.get(f"/api/search?q=cart+prices+feed&mode={mode}&type=bugfix,feature,change&limit=50")
        assert edits["results"] and all(r["kind"] == "observation" and r["type"] != "discovery"
                                        for r in edits["results"]), mode
        by_file = await memory.get(f"/api/search?q=prices+decimals&mode={mode}&file=src/price.py&limit=50")
        assert by_file["results"] and all(any(f.endswith("/src/price.py") for f in r["files"])
                                          for r in by_file["results"]), mode
        prompts = await memory.get(f"/api/search?q=cart&mode={mode}&kind=prompt&limit=50")
        assert prompts["results"] and {r["kind"] for r in prompts["results"]} == {"prompt"}, mode
        session = await memory.get(f"/api/search?q=cart+prices&mode={mode}&session=shop-2&limit=50")
        assert session["results"] and {r["claudeSessionId"] for r in session["results"]} == {"shop-2"}, mode
    future = await memory.get("/api/search?q=cart&since=1d")
    assert future["results"]  # stored just now
    assert (await memory.get(f"/api/search?q=cart&until={time.time() - 3600:.0f}"))["results"] == []
    assert (await memory.get("/api/search?q=cart&since=2999-01-01"))["results"] == []
    # A year the clock cannot hold is before everything, not a 500.
    assert (await memory.get("/api/search?q=cart&since=0001-01-01"))["results"] != []
    assert (await memory.get("/api/search?q=cart&file=nowhere.py"))["results"] == []


async def test_a_project_is_searched_by_meaning_among_its_own(memory: InProcessWorker,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The graph's nearest vectors are all another project's: the project's own are found all the same,
    compared one by one or, for a large share of the graph, through it."""
    for number, prompt in enumerate(["an empty cart must not reach checkout", "checkout of an empty cart crashes",
                                     "refuse checkout when the cart is empty"]):
        await store_session(memory, f"shop-cart-{number}", SHOP, prompt, [
            ("Edit", {"file_path": f"{SHOP}/src/checkout.py", "old_string": "pay(cart)",
                      "new_string": "if cart.empty: refuse()"})])
    await memory.services.index.caught_up()
    monkeypatch.setattr("sessionmem.search.hybrid.MIN_DEPTH", 1)
    monkeypatch.setattr("sessionmem.search.hybrid.MAX_NEAREST", 6)  # the graph is asked for 6 at most
    path = "/api/search?q=refuse+an+empty+cart+at+checkout+time&mode=vector&project=blog&limit=1"
    (found,) = (await memory.get(path))["results"]
    assert found["project"] == "blog" and found["matchedBy"] == ["meaning"]
    unfiltered = await memory.get(path.replace("project=blog", "project=*"))
    assert unfiltered["results"][0]["project"] == "shop"  # the nearest of all is the shop's
    monkeypatch.setattr("sessionmem.index.hnsw.EXACT_PER_ASKED", 0)  # through the graph
    assert (await memory.get(path))["results"] == [found]
    # Every document of the blog is the answer when asked for all, by meaning: none of the shop's.
    every = await memory.get(path.replace("limit=1", "limit=50"))
    assert every["results"] and {r["project"] for r in every["results"]} == {"blog"}


async def test_paging(memory: InProcessWorker) -> None:
    for mode in ("hybrid", "fts"):
        query = f"/api/search?q=cart+prices+feed+tests&mode={mode}"
        first = await memory.get(f"{query}&limit=2")
        second = await memory.get(f"{query}&limit=2&offset=2")
        assert first["more"] and len(first["results"]) == 2 and second["results"], mode
        keys = [(r["kind"], r["id"]) for r in first["results"] + second["results"]]
        assert len(set(keys)) == len(keys), mode
    # Words alone rank the same at any depth: two pages are the first four.
    both = await memory.get("/api/search?q=cart+prices+feed+tests&mode=fts&limit=4")
    assert [(r["kind"], r["id"]) for r in both["results"]] == keys


# Full-text query syntax never reaches SQLite: each is a search for its words, or a clear 400.
HOSTILE_QUERIES = ['"', '"unbalanced', "*", "cart*", "NEAR(cart price)", "cart AND OR NOT", "title:cart",
                   "{title subtitle}:cart", "^cart", "cart -price", "'; DROP TABLE observations; --", "\x00",
                   "((((", "cart\u202e", "a" * 3999, "漢字 カート", "🛒"]


async def test_query_syntax_is_never_passed_through(memory: InProcessWorker) -> None:
    """Every hostile query, by words and hybrid: a 200; one holding "cart" finds the cart. (One worker asked
    each: a test a query would build the embedded memory for each of them.)"""
    failures = []
    for query in HOSTILE_QUERIES:
        for mode in ("fts", "hybrid"):
            reply = await memory.request("GET", "/api/search?" + _encode({"q": query, "mode": mode}))
            if reply.status != 200:
                failures.append((query[:40], mode, reply.status, reply.body[:300]))
            elif mode == "fts" and "cart" in query and not any("cart" in title.lower() for title in titles(reply.json())):
                failures.append((query[:40], mode, "the cart not found", reply.body[:300]))
    assert not failures, failures


def _encode(params: dict[str, str]) -> str:
    from urllib.parse import urlencode

    return urlencode(params)


BAD_PARAMETERS = [
    ("", "?q"), ("q=%20%20", "?q"), ("q=" + "x" * 4001, "?q"), ("q=cart&mode=fuzzy", "?mode"),
    ("q=cart&limit=0", "?limit"), ("q=cart&limit=101", "?limit"), ("q=cart&type=nonsense", "?type"),
    ("q=cart&kind=file", "?kind"), ("q=cart&since=last+tuesday", "?since"), ("q=cart&offset=-1", "?offset"),
    ("q=cart&until=nan", "?until"), ("q=cart&since=1e400", "?since"),
    ("q=%FF%FE", "?"), ("q=cart&file=%C3", "?"),  # escapes that are not UTF-8: not searched for as text
]


async def test_bad_parameters_are_a_clear_400(memory: InProcessWorker) -> None:
    failures = []
    for query, problem in BAD_PARAMETERS:
        reply = await memory.request("GET", "/api/search?" + query)
        if reply.status != 400 or reply.json()["path"] != problem:
            failures.append((query[:40], problem, reply.status, reply.body[:300]))
    assert not failures, failures


async def test_random_queries_never_fail(memory: InProcessWorker) -> None:
    """Hypothesis over query text and filters: a 200 or a 400, never a 5xx."""
    seen: list[int] = []

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(q=st.text(max_size=300), mode=st.sampled_from(["hybrid", "fts", "vector"]),
           file=st.text(max_size=50), since=st.text(max_size=20))
    def check(q: str, mode: str, file: str, since: str) -> None:
        async def ask() -> None:
            reply = await memory.request("GET", "/api/search?" + _encode(
                {"q": q, "mode": mode, "file": file, "since": since}))
            seen.append(reply.status)
            assert reply.status in (200, 400), reply.body

        trio.from_thread.run(ask)

    await trio.to_thread.run_sync(check)
    assert 200 in seen


async def test_timeline_around_an_observation(memory: InProcessWorker) -> None:
    found = await memory.get("/api/search?q=decimals&kind=observation&mode=fts")
    anchor = found["results"][0]["id"]
    timeline = await memory.get(f"/api/timeline?anchor={anchor}&before=2&after=2")
    entries = timeline["entries"]
    assert timeline["anchorKind"] == "observation" and timeline["anchorId"] == anchor
    assert timeline["project"] == "shop" and [e["anchor"] for e in entries].count(True) == 1
    assert [e["createdAt"] for e in entries] == sorted(e["createdAt"] for e in entries)
    assert len(entries) <= 5 and all(e["claudeSessionId"].startswith("shop") for e in entries)
    assert (await memory.get("/api/timeline?q=RSS+feed&before=1&after=1"))["project"] == "blog"
    prompt = await memory.get("/api/timeline?anchor=prompt:1&before=0&after=1")
    assert prompt["entries"][0]["kind"] == "prompt" and prompt["entries"][0]["anchor"]
    for query, status in [("anchor=99999", 404), ("anchor=file:3", 400), ("anchor=x", 400), ("", 400),
                          ("q=zzzzqqq&mode=fts", 404), ("anchor=1&before=51", 400)]:
        reply = await memory.request("GET", f"/api/timeline?{query}")
        assert reply.status == status, (query, reply.body)


async def test_observations_by_id_in_the_order_asked(memory: InProcessWorker) -> None:
    reply = await memory.request("POST", "/api/observations/batch", {"ids": [3, 1, 424242, 3]})
    assert reply.status == 200
    body = reply.json()
    assert [row["id"] for row in body["observations"]] == [3, 1] and body["missing"] == [424242]
    assert {"narrative", "facts", "filesModified", "toolName"} <= set(body["observations"][0])
    for bad in [{"ids": list(range(1, 102))}, {"ids": ["1"]}, {"ids": [0]}, {"ids": [2**63]}, {}, []]:
        assert (await memory.request("POST", "/api/observations/batch", bad)).status == 400, bad


def _observations_db(path: Path, titles: list[str]) -> Any:
    """A database holding one observation per title (project ``shop``, one a second), for the SQL alone."""
    from sessionmem.storage.sqlite.connection_setup import open_writer

    connection = open_writer(path)
    with connection:
        connection.execute("INSERT INTO sessions (id, claude_session_id, project, cwd, first_prompt, prompt_counter,"
                           " status, created_at, updated_at) VALUES (1, 's1', 'shop', '/shop', '', 1, 'completed',"
                           " 0, 0)")
        connection.executemany(
            "INSERT INTO observations (id, session_db_id, project, prompt_number, event_id, tool_name, tool_use_id,"
            " type, title, subtitle, facts, narrative, concepts, files_read, files_modified, compressed, compressor,"
            " created_at, stored_at) VALUES (?1, 1, 'shop', 1, ?1, 'Bash', 't' || ?1, 'discovery', ?2, '', '[]',"
            " '', '[]', '[]', '[]', 1, 'offline', ?1, ?1)", list(enumerate(titles, start=1)))
    return connection


def test_full_text_search_keeps_the_rarer_words_within_its_budget(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from sessionmem.records import OBSERVATION, SearchFilters
    from sessionmem.storage.sqlite import fulltext

    titles = ["common"] * 6 + ["common middling"] * 3 + ["common middling rare"]
    connection = _observations_db(tmp_path / "db", titles)
    monkeypatch.setattr(fulltext, "MATCH_BUDGET", 5)
    # 10 rows hold "common", 4 "middling", 1 "rare": the two rarer fit in 5 rows, "common" does not.
    assert fulltext.affordable_match(connection, OBSERVATION, ["common", "middling", "rare"]) == (
        '"rare" OR "middling"', 5)
    assert fulltext.affordable_match(connection, OBSERVATION, ["rare", "middling"]) == ('"rare" OR "middling"', 4)
    # Only words too common to afford: the rows holding all of them.
    assert fulltext.affordable_match(connection, OBSERVATION, ["common"]) == ('"common"', -1)
    assert fulltext.affordable_match(connection, OBSERVATION, ["absent"]) == ('"absent"', 0)
    # Ranked in the full-text table, then filtered, ranked again joined to the rows when the
    # filters leave too few; or, for a small share of the rows, joined from the start: the same answers.
    for share in (0.0, 2.0):
        monkeypatch.setattr(fulltext, "RANK_FIRST_SHARE", share)
        found = fulltext.search_text(connection, ["common", "middling", "rare"], SearchFilters(project="shop"), 10)
        assert [key.row_id for key in found][:1] == [10] and {key.row_id for key in found} == {7, 8, 9, 10}
        # The best two matches are too late for the filter: the best that passes.
        early = fulltext.search_text(connection, ["middling"], SearchFilters(project="shop", until=7.5), 1)
        assert [key.row_id for key in early] == [7]
        assert fulltext.search_text(connection, ["common"], SearchFilters(project="blog"), 5) == []
    connection.close()


def test_a_small_projects_search_ranks_its_own_rows_among_many(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A project with few rows beside a large one: its own matches, best first, whichever way it is ranked."""
    from sessionmem.records import OBSERVATION, SearchFilters
    from sessionmem.storage.sqlite import fulltext

    connection = _observations_db(tmp_path / "db", ["parser bug", "parser", "lexer"])
    with connection:  # another project, whose matches all rank above the shop's
        connection.execute("INSERT INTO sessions (id, claude_session_id, project, created_at, updated_at)"
                           " VALUES (2, 's2', 'blog', 0, 0)")
        connection.executemany(
            "INSERT INTO observations (session_db_id, project, prompt_number, event_id, tool_name, tool_use_id, type,"
            " title, compressed, compressor, created_at) VALUES (2, 'blog', 1, ?1, 'Bash', 'b' || ?1, 'discovery',"
            " 'parser bug parser bug', 1, 'offline', ?1)", [(n,) for n in range(100, 400)])
    shop = SearchFilters(project="shop", kinds=(OBSERVATION,))
    answers = []
    listed = {OBSERVATION: np.array([1, 2, 3], dtype=np.int64)}  # the shop's rows, as the store keeps them
    for share in (0.0, fulltext.RANK_FIRST_SHARE):  # the shop's 3 rows: ranked with the blog's first, or joined
        monkeypatch.setattr(fulltext, "RANK_FIRST_SHARE", share)
        for listed_rows in (0, fulltext.LISTED_ROWS):  # joined to their rows, or checked against their list
            monkeypatch.setattr(fulltext, "LISTED_ROWS", listed_rows)
            answers.append(fulltext.search_text(connection, ["parser", "bug"], shop, 2))
            answers.append(fulltext.search_text(connection, ["parser", "bug"], shop, 2, project_rows=listed))
            answers.append(fulltext.search_text(connection, ["parser", "bug"], shop, 3, every_word_first=True,
                                                project_rows=listed)[:2])
    assert all(answer == answers[0] for answer in answers)
    # Another filter beside the project: never the list alone.
    early = SearchFilters(project="shop", kinds=(OBSERVATION,), until=1.5)
    assert [key.row_id for key in fulltext.search_text(connection, ["parser", "bug"], early, 2,
                                                       project_rows=listed)] == [1]
    assert [key.row_id for key in answers[0]] == [1, 2]  # both words, then one
    assert answers[0][0].score > answers[0][1].score
    connection.close()


def test_a_typed_search_ranks_documents_with_every_word_first(tmp_path: Path) -> None:
    """Every word, best first, then some: the same ranking at any depth, so pages neither repeat nor skip."""
    from sessionmem.records import SearchFilters
    from sessionmem.storage.sqlite import fulltext

    titles = ["parser parser parser parser", "parser bug", "bug in the lexer",
              "parser bug seen once in a long and winding note about many other things",
              *[f"bug report {n}" for n in range(10)], *[f"unrelated note {n}" for n in range(10)]]
    connection = _observations_db(tmp_path / "db", titles)
    shop = SearchFilters(project="shop")
    any_word = [key.row_id for key in fulltext.search_text(connection, ["parser", "bug"], shop, 10)]
    # bm25 alone puts the row that only repeats the rare "parser" above the rows with both words...
    assert any_word[0] == 1
    typed = [key.row_id for key in fulltext.search_text(connection, ["parser", "bug"], shop, 10, every_word_first=True)]
    # ...a typed search puts both rows with every word first, then the others in bm25's order.
    assert typed[:2] == [2, 4] and typed[2:] == [row for row in any_word if row not in (2, 4)]
    for depth in range(1, len(typed) + 1):
        assert [key.row_id for key in fulltext.search_text(connection, ["parser", "bug"], shop, depth,
                                                         every_word_first=True)] == typed[:depth]
    # One word: nothing to hold every one of.
    assert [key.row_id for key in fulltext.search_text(connection, ["bug"], shop, 10, every_word_first=True)] == [
        key.row_id for key in fulltext.search_text(connection, ["bug"], shop, 10)]
    connection.close()


def test_words_held_counts_the_query_words_each_document_holds_as_its_index_has_them(tmp_path: Path) -> None:
    from sessionmem.records import OBSERVATION, PROMPT
    from sessionmem.storage.search_terms import query_terms
    from sessionmem.storage.sqlite.words_held import words_held

    titles = ["Fixed the websocket reconnect in pane_list_live.ex", "websocket timeouts", "nothing alike"]
    connection = _observations_db(tmp_path / "db", titles)
    terms = query_terms("fixing the websocket timeout in pane_list_live")
    keys = [(OBSERVATION, 1), (OBSERVATION, 2), (OBSERVATION, 3), (OBSERVATION, 99), (PROMPT, 1)]
    # Four words (less "the" and "in"): Porter stemming holds "fixing" in "Fixed" and "timeout" in
    # "timeouts"; a word of several tokens is held when all of them are. Rows that do not exist: left out.
    assert words_held(connection, terms, keys) == {(OBSERVATION, 1): 3 / 4, (OBSERVATION, 2): 2 / 4,
                                                   (OBSERVATION, 3): 0.0}
    assert words_held(connection, [], keys[:1]) == {(OBSERVATION, 1): 0.0}
    connection.close()


def test_words_held_tokenizes_as_the_full_text_tables_do(tmp_path: Path) -> None:
    from sessionmem.storage.sqlite.fulltext import TABLES
    from sessionmem.storage.sqlite.words_held import TOKENIZER

    connection = _observations_db(tmp_path / "db", [])
    name, arguments = TOKENIZER
    for _, fts, _ in TABLES.values():
        (sql,) = connection.execute("SELECT sql FROM sqlite_master WHERE name = ?", (fts,)).fetchone()
        assert f"tokenize='{' '.join((name, *arguments))}'" in sql, fts
    connection.close()


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(max_size=80), st.lists(st.sampled_from(
    ["continue", "yes", "go", "on", "the", "is", "what", "this", "fix", "calc.py", "tests", "Fix", ", "]),
    max_size=8).map(" ".join)))
def test_a_text_says_what_work_is_about_when_it_holds_three_search_words(text: str) -> None:
    """The rule that passes over "continue" (as a focus, as a prompt to recall for) is the search's own words,
    read lazily: the same answer as counting :func:`query_terms`."""
    from sessionmem.storage.search_terms import FOCUS_MIN_WORDS, query_terms, says_what_about

    assert says_what_about(text) == (len(query_terms(text)) >= FOCUS_MIN_WORDS)
    assert not says_what_about("continue") and not says_what_about("yes, go on")
    assert says_what_about("fix calc.py") and says_what_about("what is this")
