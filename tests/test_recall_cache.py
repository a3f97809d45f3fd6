"""File recall's kept rows: kept for every session, kept up to date by what is stored, never kept stale."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sessionmem.records import CompressedObservation, FileMemory
from sessionmem.storage.sqlite import file_memory_cache
from sessionmem.storage.sqlite.file_memories import recalled_as
from sessionmem.storage.sqlite.file_memory_cache import FileRecallCache
from sessionmem.storage.sqlite.fulltext import file_matches
from sessionmem.testing.harness import InProcessWorker, open_worker

from .test_search import store_session
from .test_transfer import export_all

SHOP = "/home/me/shop"
AUTH = f"{SHOP}/src/auth.py"


def remembered(number: int, session: str, created_at: float, title: str) -> FileMemory:
    """A change to the file that ``session`` made."""
    return FileMemory(id=number, claude_session_id=session, created_at=created_at, type="change", title=title,
                      subtitle="", facts=[], modified=True)


def memory(number: int, session: str = "before") -> list[FileMemory]:
    return [remembered(number, session, 1.0, f"Edited auth.py #{number}")]


def edit(path: str, title: str = "Edited auth.py") -> CompressedObservation:
    return CompressedObservation("change", title, files_modified=(path,))


def test_a_store_joins_the_front_of_the_rows_of_every_file_a_lookup_would_find_it_for() -> None:
    cache = FileRecallCache()
    keys = [("shop", AUTH), ("shop", "src/auth.py"), ("shop", "auth.py"), ("shop", "tests/auth.py"),
            ("blog", AUTH)]
    for key in keys:
        assert cache.get(key) is None
        cache.put(key, cache.ticket(), memory(1))
    cache.stored("mine", "shop", [(7, 5.0, edit("/elsewhere/lib/util.py"))])  # another file: nothing changes
    assert all(cache.get(key) == memory(1) for key in keys)
    cache.stored("mine", "shop", [(8, 6.0, edit(AUTH, "Edited auth.py again")),
                                  (9, 7.0, CompressedObservation("discovery", "Read auth.py", files_read=(AUTH,)))])
    joined = [remembered(8, "mine", 6.0, "Edited auth.py again"), *memory(1)]
    assert [cache.get(key) for key in keys] == [joined, joined, joined, memory(1), memory(1)]  # (a bare read: never)
    assert cache.statistics().hits == 10 and cache.statistics().misses == 5


def test_a_row_read_after_its_commit_is_not_joined_twice() -> None:
    cache = FileRecallCache()
    key = ("shop", AUTH)
    read = [remembered(8, "mine", 6.0, "Edited auth.py"), *memory(1)]
    cache.put(key, cache.ticket(), read)  # read after the commit, kept before the store was told of it
    cache.stored("mine", "shop", [(8, 6.0, edit(AUTH))])
    assert cache.get(key) == read


def test_rows_read_while_stores_committed_are_kept_with_what_was_stored() -> None:
    cache = FileRecallCache()
    key = ("shop", AUTH)
    ticket = cache.ticket()  # the lookup starts reading...
    cache.stored("other", "shop", [(5, 1.0, edit(f"{SHOP}/tests/auth.py"))])  # ...a file of that name: not this
    cache.stored("other", "shop", [(6, 2.0, edit(AUTH))])  # this file: the read may not have seen it
    cache.stored("other", "blog", [(7, 3.0, edit(AUTH))])  # another project's
    cache.put(key, ticket, memory(1))
    assert cache.get(key) == [remembered(6, "other", 2.0, "Edited auth.py"), *memory(1)]
    seen = [remembered(6, "other", 2.0, "Edited auth.py"), *memory(1)]
    cache.put(("shop", "src/auth.py"), ticket, seen)  # a read that saw it: not joined twice
    assert cache.get(("shop", "src/auth.py")) == seen


def test_rows_read_before_the_stores_still_known_or_an_import_are_not_kept() -> None:
    cache = FileRecallCache(stores_known=2)
    key = ("shop", AUTH)
    ticket = cache.ticket()
    for number, name in enumerate(("a.py", "b.py", "auth.py", "c.py", "d.py")):  # auth.py's is forgotten by now
        cache.stored("other", "shop", [(number, 1.0, edit(f"{SHOP}/{name}"))])
    cache.put(key, ticket, memory(1))
    assert cache.get(key) is None
    cache.put(key, cache.ticket(), memory(2))
    assert cache.get(key) == memory(2)
    ticket = cache.ticket()
    cache.clear()
    cache.put(key, ticket, memory(3))
    assert cache.get(key) is None


def test_the_lookups_rule_in_python() -> None:
    """``recalled_as`` is ``file_memory_rows``'s rule (tests/test_storage.py holds the two alike)."""
    assert file_matches(AUTH, [AUTH]) and file_matches(" src/auth.py ", [AUTH]) and file_matches("auth.py", [AUTH])
    assert file_matches("SRC/auth.py", [AUTH])  # LIKE folds ASCII case...
    assert not file_matches("src/Auth.py", [AUTH])  # ...but the name is matched as it is
    assert not file_matches("tests/auth.py", [AUTH]) and not file_matches("th.py", [AUTH])
    assert file_matches("/home/me/shop/src/", ["/home/me/shop/src/"]) and not file_matches("src/", ["/x/src/"])
    assert not file_matches("é/auth.py", ["/x/É/auth.py"])  # LIKE folds ASCII letters only
    assert recalled_as(AUTH, edit(AUTH)) is True
    assert recalled_as(AUTH, CompressedObservation("discovery", "Read", files_read=(AUTH,))) is None
    assert recalled_as(AUTH, CompressedObservation("discovery", "Read", files_read=(AUTH,), compressor="anthropic")) \
        is False
    assert recalled_as(AUTH, CompressedObservation("bugfix", "Ran", files_read=(AUTH,))) is False


def test_least_recently_used_rows_go_first_and_clear_voids_every_ticket() -> None:
    cache = FileRecallCache(capacity=2)
    keys = [("shop", f"{SHOP}/{name}") for name in ("a.py", "b.py", "c.py")]
    cache.put(keys[0], cache.ticket(), memory(1))
    cache.put(keys[1], cache.ticket(), memory(2))
    assert cache.get(keys[0]) is not None  # a.py used last: b.py goes first
    cache.put(keys[2], cache.ticket(), memory(3))
    assert cache.get(keys[1]) is None
    assert cache.get(keys[0]) is not None and cache.get(keys[2]) is not None
    ticket = cache.ticket()
    cache.clear()
    cache.put(keys[0], ticket, memory(1))
    assert cache.statistics().entries == 0 and cache.get(keys[0]) is None


async def read_of(worker: InProcessWorker, session: str, number: int) -> dict[str, Any]:
    reply = await worker.request("POST", "/api/sessions/observations", {
        "claudeSessionId": session, "cwd": SHOP, "tool_name": "Read", "tool_input": {"file_path": AUTH},
        "tool_response": "x = 1\n", "tool_use_id": f"{session}-read-{number}"})
    assert reply.status == 202, reply.body
    return reply.json()


async def kept_answers(worker: InProcessWorker) -> dict[str, int]:
    await worker.wait_idle()  # every observation stored (and so joined to the rows kept)
    store = (await worker.get("/debug"))["store"]
    return {**store["fileRecallCache"], "reads": store["gatheredReads"]["reads"]}


async def test_a_worker_recalls_from_kept_rows_and_never_misses_a_new_memory(tmp_path: Path) -> None:
    """Real store, real SQLite: reads of a file, by any session, ask SQLite once; edits of it, by any
    session, join the kept rows and are recalled at the next read all the same."""
    async with open_worker(tmp_path / "data", embedder="none", batch_quiet_s=0.05) as worker:
        await store_session(worker, "before", SHOP, "fix the cookie", [
            ("Edit", {"file_path": AUTH, "old_string": "max_age=60", "new_string": "max_age=3600"})])
        # The edit asked once (nothing to tell yet); its store joined the rows that read.
        assert await kept_answers(worker) == {"entries": 1, "hits": 0, "misses": 1, "dropped": 0, "reads": 1}
        first = await read_of(worker, "now", 0)
        assert "max_age=3600" in first["additionalContext"]
        for number in (1, 2):
            assert "additionalContext" not in await read_of(worker, "now", number)  # told once a session
        # Another session reading the file reads nothing, and is told too.
        assert "max_age=3600" in (await read_of(worker, "next", 0))["additionalContext"]
        assert await kept_answers(worker) == {"entries": 1, "hits": 4, "misses": 1, "dropped": 0, "reads": 1}

        # The session's own edit of the file does not change what it is told.
        await store_session(worker, "now", SHOP, "and the session length", [
            ("Edit", {"file_path": AUTH, "old_string": "length=1", "new_string": "length=7"})])
        assert "additionalContext" not in await read_of(worker, "now", 3)

        # Another session's edit of it is told at the next read, and nothing was read for it.
        await store_session(worker, "third", SHOP, "cookies for the admin too", [
            ("Edit", {"file_path": AUTH, "old_string": "admin=False", "new_string": "admin=True"})])
        told = await read_of(worker, "now", 4)
        assert "admin=True" in told["additionalContext"] and "max_age" not in told["additionalContext"]
        assert await kept_answers(worker) == {"entries": 1, "hits": 8, "misses": 1, "dropped": 0, "reads": 1}

        # An import forgets every file's rows.
        records = await export_all(worker)
        assert (await worker.request("POST", "/api/import", {"records": records})).status == 200
        assert await kept_answers(worker) == {"entries": 0, "hits": 8, "misses": 1, "dropped": 1, "reads": 1}


async def test_a_session_whose_own_memories_crowd_the_kept_rows_is_answered_by_a_read_of_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kept rows are a file's newest memories of every session; an asking session that made all
    of them must still hear of an older memory of another session, as a lookup of its own finds it."""
    monkeypatch.setattr(file_memory_cache, "ROWS_KEPT", 4)  # the newest 4: every one of them "busy"'s
    async with open_worker(tmp_path / "data", embedder="none", batch_quiet_s=0.05) as worker:
        await store_session(worker, "before", SHOP, "fix the cookie", [
            ("Edit", {"file_path": AUTH, "old_string": "max_age=60", "new_string": "max_age=3600"})])
        await store_session(worker, "busy", SHOP, "many small edits", [
            ("Edit", {"file_path": AUTH, "old_string": f"v{n}", "new_string": f"v{n + 1}"}) for n in range(4)])
        store = worker.services.store

        async def recalled(session: str) -> list[str]:
            return [m.claude_session_id for m in await store.file_memories("shop", AUTH, exclude_session=session,
                                                                          limit=1)]

        reads = (await kept_answers(worker))["reads"]
        assert await recalled("someone") == ["busy"]  # the newest, from the kept rows
        assert await recalled("busy") == ["before"]  # past its own rows: read for it alone
        assert await recalled("someone") == ["busy"]
        assert (await kept_answers(worker))["reads"] == reads + 1  # "busy"'s own (the rows were read at the first edit)
