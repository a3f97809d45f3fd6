"""File recall's kept rows: kept for every session, dropped by what changes them, never kept stale."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sessionmem.records import FileMemory
from sessionmem.storage import sqlite
from sessionmem.storage.recall_cache import FileRecallCache
from sessionmem.testing.harness import InProcessWorker, open_worker

from .test_search import store_session
from .test_transfer import export_all

SHOP = "/home/me/shop"
AUTH = f"{SHOP}/src/auth.py"


def memory(number: int, session: str = "before") -> list[FileMemory]:
    return [FileMemory(number, session, 1.0, "change", f"Edited auth.py #{number}", "", [], True)]


def test_a_files_rows_serve_every_session_and_a_store_about_the_file_leaves_them_to_its_session() -> None:
    cache = FileRecallCache()
    absolute, relative = ("shop", AUTH), ("shop", "src/auth.py")
    for key in (absolute, relative):
        assert cache.get(key, "now") is None
        cache.put(key, cache.ticket(), memory(1))
    assert cache.get(absolute, "now") == memory(1) and cache.get(relative, "next") == memory(1)
    cache.stored("mine", ["/elsewhere/lib/util.py"])  # another file: nothing changes
    assert cache.get(absolute, "now") is not None and cache.get(relative, "now") is not None
    cache.stored("mine", [f"{SHOP}/src/auth.py"])  # its own memories are never its answer: still good for it
    assert cache.get(absolute, "mine") == memory(1) and cache.get(relative, "mine") == memory(1)
    assert cache.get(absolute, "now") is None and cache.get(relative, "now") is None  # stale for the others
    assert cache.statistics().dropped == 0 and cache.statistics().entries == 2
    cache.stored("mine", [AUTH])  # again: the same
    assert cache.get(absolute, "mine") == memory(1)
    cache.stored("other", [AUTH])  # a second session: stale for every session
    assert cache.get(absolute, "mine") is None and cache.get(relative, "mine") is None
    assert cache.statistics().dropped == 2 and cache.statistics().entries == 0
    cache.put(absolute, cache.ticket(), memory(2))  # read again: good for every session
    assert cache.get(absolute, "now") == memory(2) and cache.get(absolute, "other") == memory(2)


def test_rows_read_while_a_store_about_their_file_committed_are_not_kept() -> None:
    cache = FileRecallCache()
    key = ("shop", AUTH)
    ticket = cache.ticket()  # the lookup starts reading...
    cache.stored("other", [f"{SHOP}/tests/auth.py"])  # ...a file of the same name is stored meanwhile
    cache.put(key, ticket, memory(1))
    assert cache.get(key, "now") is None
    cache.put(key, cache.ticket(), memory(2))  # read after that commit: kept
    assert cache.get(key, "now") == memory(2)


def test_a_ticket_older_than_the_stores_it_remembers_is_refused() -> None:
    cache = FileRecallCache(capacity=2)
    key = ("shop", AUTH)
    ticket = cache.ticket()
    for name in ("a.py", "b.py", "auth.py", "c.py", "d.py"):  # auth.py's store is forgotten by now
        cache.stored("other", [f"{SHOP}/{name}"])
    cache.put(key, ticket, memory(1))
    assert cache.get(key, "now") is None


def test_names_a_stored_path_answers_for() -> None:
    cache = FileRecallCache()
    for path in ("src/auth.py", "auth.py", " src/auth.py ", "/home/me/shop/src/"):
        cache.put(("shop", path), cache.ticket(), memory(1))
    cache.stored("other", ["/home/me/shop/src/"])  # a directory's path: its basename column is ''
    assert cache.get(("shop", "/home/me/shop/src/"), "now") is None
    assert cache.get(("shop", "src/auth.py"), "now") is not None
    cache.put(("shop", AUTH), cache.ticket(), memory(1))
    cache.stored("other", ["/srv/app/tests/AUTH.py"])  # a file of another name: nothing changes
    cache.stored("other", ["/srv/app/tests/auth.py"])  # the same name elsewhere: only what it may answer goes
    assert cache.get(("shop", "auth.py"), "now") is None
    assert all(cache.get(("shop", path), "now") is not None for path in ("src/auth.py", " src/auth.py ", AUTH))
    cache.stored("another", ["/srv/app/SRC/auth.py"])  # a lookup's LIKE folds case
    assert all(cache.get(("shop", path), "now") is None for path in ("src/auth.py", " src/auth.py "))
    assert cache.get(("shop", AUTH), "now") is not None


def test_least_recently_used_rows_go_first_and_clear_voids_every_ticket() -> None:
    cache = FileRecallCache(capacity=2)
    keys = [("shop", f"{SHOP}/{name}") for name in ("a.py", "b.py", "c.py")]
    cache.put(keys[0], cache.ticket(), memory(1))
    cache.put(keys[1], cache.ticket(), memory(2))
    assert cache.get(keys[0], "now") is not None  # a.py used last: b.py goes first
    cache.put(keys[2], cache.ticket(), memory(3))
    assert cache.get(keys[1], "now") is None
    assert cache.get(keys[0], "now") is not None and cache.get(keys[2], "now") is not None
    ticket = cache.ticket()
    cache.clear()
    cache.put(keys[0], ticket, memory(1))
    assert cache.statistics().entries == 0 and cache.get(keys[0], "now") is None


async def read_of(worker: InProcessWorker, session: str, number: int) -> dict[str, Any]:
    reply = await worker.request("POST", "/api/sessions/observations", {
        "claudeSessionId": session, "cwd": SHOP, "tool_name": "Read", "tool_input": {"file_path": AUTH},
        "tool_response": "x = 1\n", "tool_use_id": f"{session}-read-{number}"})
    assert reply.status == 202, reply.body
    return reply.json()


async def kept_answers(worker: InProcessWorker) -> dict[str, int]:
    await worker.wait_idle()  # every observation stored (and so every answer it drops, dropped)
    store = (await worker.get("/debug"))["store"]
    return {**store["fileRecallCache"], "reads": store["gatheredReads"]["reads"]}


async def test_a_worker_recalls_from_kept_rows_and_never_misses_a_new_memory(tmp_path: Path) -> None:
    """Real store, real SQLite: reads of a file, by any session, ask SQLite once; another session's
    edit of it is recalled at the next read all the same."""
    async with open_worker(tmp_path / "data", embedder="none", batch_quiet_s=0.05) as worker:
        await store_session(worker, "before", SHOP, "fix the cookie", [
            ("Edit", {"file_path": AUTH, "old_string": "max_age=60", "new_string": "max_age=3600"})])
        # The edit asked once (nothing to tell yet); its store left the rows good for "before" only.
        assert await kept_answers(worker) == {"entries": 1, "hits": 0, "misses": 1, "dropped": 0, "reads": 1}
        first = await read_of(worker, "now", 0)
        assert "max_age=3600" in first["additionalContext"]
        for number in (1, 2):
            assert "additionalContext" not in await read_of(worker, "now", number)  # told once a session
        # Another session reading the file reads nothing, and is told too.
        assert "max_age=3600" in (await read_of(worker, "next", 0))["additionalContext"]
        assert await kept_answers(worker) == {"entries": 1, "hits": 3, "misses": 2, "dropped": 0, "reads": 2}

        # The session's own edit of the file does not change what it is told: its reads stay kept.
        await store_session(worker, "now", SHOP, "and the session length", [
            ("Edit", {"file_path": AUTH, "old_string": "length=1", "new_string": "length=7"})])
        assert "additionalContext" not in await read_of(worker, "now", 3)
        assert await kept_answers(worker) == {"entries": 1, "hits": 5, "misses": 2, "dropped": 0, "reads": 2}

        # Another session's edit of it: the next read asks SQLite and tells it (mere reads changed nothing).
        await store_session(worker, "third", SHOP, "cookies for the admin too", [
            ("Edit", {"file_path": AUTH, "old_string": "admin=False", "new_string": "admin=True"})])
        told = await read_of(worker, "now", 4)
        assert "admin=True" in told["additionalContext"] and "max_age" not in told["additionalContext"]
        assert await kept_answers(worker) == {"entries": 1, "hits": 5, "misses": 4, "dropped": 0, "reads": 4}

        # An import forgets every file's rows.
        records = await export_all(worker)
        assert (await worker.request("POST", "/api/import", {"records": records})).status == 200
        assert await kept_answers(worker) == {"entries": 0, "hits": 5, "misses": 4, "dropped": 1, "reads": 4}


async def test_a_session_whose_own_memories_crowd_the_kept_rows_is_answered_by_a_read_of_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kept rows are a file's newest memories of every session; an asking session that made all
    of them must still hear of an older memory of another session, as a lookup of its own finds it."""
    monkeypatch.setattr(sqlite, "ROWS_KEPT", 4)  # the newest 4: every one of them "busy"'s
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
        assert (await kept_answers(worker))["reads"] == reads + 2  # the kept rows once, then "busy"'s own
