"""File recall's kept answers: kept per asking session, dropped by what changes them, never kept stale."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sessionmem.records import FileMemory
from sessionmem.storage.recall_cache import FileRecallCache
from sessionmem.testing.harness import InProcessWorker, open_worker

from .test_search import store_session
from .test_transfer import export_all

SHOP = "/home/me/shop"
AUTH = f"{SHOP}/src/auth.py"


def memory(number: int, session: str = "before") -> list[FileMemory]:
    return [FileMemory(number, session, 1.0, "change", f"Edited auth.py #{number}", "", [], True)]


def test_an_answer_is_kept_for_its_session_until_another_session_stores_about_the_file() -> None:
    cache = FileRecallCache()
    now, mine = ("shop", AUTH, "now", 6), ("shop", "src/auth.py", "mine", 6)
    for key in (now, mine):
        assert cache.get(key) is None
        cache.put(key, cache.ticket(), memory(1))
    assert cache.get(now) == memory(1) and cache.get(mine) == memory(1)
    cache.stored("mine", ["/elsewhere/lib/util.py"])  # another file: nothing changes
    assert cache.get(now) is not None and cache.get(mine) is not None
    cache.stored("mine", [f"{SHOP}/src/auth.py"])  # mine's own answers leave its observations out
    assert cache.get(now) is None and cache.get(mine) == memory(1)
    assert cache.statistics().dropped == 1 and cache.statistics().entries == 1


def test_an_answer_read_while_a_store_about_its_file_committed_is_not_kept() -> None:
    cache = FileRecallCache()
    key = ("shop", AUTH, "now", 6)
    ticket = cache.ticket()  # the lookup starts reading...
    cache.stored("other", [f"{SHOP}/tests/auth.py"])  # ...a file of the same name is stored meanwhile
    cache.put(key, ticket, memory(1))
    assert cache.get(key) is None
    cache.put(key, cache.ticket(), memory(2))  # read after that commit: kept
    assert cache.get(key) == memory(2)


def test_a_ticket_older_than_the_stores_it_remembers_is_refused() -> None:
    cache = FileRecallCache(capacity=2)
    key = ("shop", AUTH, "now", 6)
    ticket = cache.ticket()
    for name in ("a.py", "b.py", "auth.py", "c.py", "d.py"):  # auth.py's store is forgotten by now
        cache.stored("other", [f"{SHOP}/{name}"])
    cache.put(key, ticket, memory(1))
    assert cache.get(key) is None


def test_names_a_stored_path_answers_for() -> None:
    cache = FileRecallCache()
    for path in ("src/auth.py", "auth.py", " src/auth.py ", "/home/me/shop/src/"):
        cache.put(("shop", path, "now", 6), cache.ticket(), memory(1))
    cache.stored("other", ["/home/me/shop/src/"])  # a directory's path: its basename column is ''
    assert cache.get(("shop", "/home/me/shop/src/", "now", 6)) is None
    assert cache.get(("shop", "src/auth.py", "now", 6)) is not None
    cache.stored("other", ["/srv/app/src/auth.py"])
    assert all(cache.get(("shop", path, "now", 6)) is None for path in ("src/auth.py", "auth.py", " src/auth.py "))


def test_least_recently_used_answers_go_first_and_clear_voids_every_ticket() -> None:
    cache = FileRecallCache(capacity=2)
    keys = [("shop", f"{SHOP}/{name}", "now", 6) for name in ("a.py", "b.py", "c.py")]
    cache.put(keys[0], cache.ticket(), memory(1))
    cache.put(keys[1], cache.ticket(), memory(2))
    assert cache.get(keys[0]) is not None  # a.py used last: b.py goes first
    cache.put(keys[2], cache.ticket(), memory(3))
    assert cache.get(keys[1]) is None and cache.get(keys[0]) is not None and cache.get(keys[2]) is not None
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
    await worker.wait_idle()  # every observation stored (and so every answer it drops, dropped)
    store = (await worker.get("/debug"))["store"]
    return {**store["fileRecallCache"], "reads": store["gatheredReads"]["reads"]}


async def test_a_worker_recalls_from_its_kept_answers_and_never_misses_a_new_memory(tmp_path: Path) -> None:
    """Real store, real SQLite: repeated reads of a file ask SQLite once; another session's edit of it
    is recalled at the next read all the same."""
    async with open_worker(tmp_path / "data", embedder="none", batch_quiet_s=0.05) as worker:
        await store_session(worker, "before", SHOP, "fix the cookie", [
            ("Edit", {"file_path": AUTH, "old_string": "max_age=60", "new_string": "max_age=3600"})])
        # (the edit itself asked once too: its session's lookup of the file, kept)
        assert await kept_answers(worker) == {"entries": 1, "hits": 0, "misses": 1, "dropped": 0, "reads": 1}
        first = await read_of(worker, "now", 0)
        assert "max_age=3600" in first["additionalContext"]
        for number in (1, 2):
            assert "additionalContext" not in await read_of(worker, "now", number)  # told once a session
        assert await kept_answers(worker) == {"entries": 2, "hits": 2, "misses": 2, "dropped": 0, "reads": 2}

        # The session's own edit of the file does not change what it is told: still kept.
        await store_session(worker, "now", SHOP, "and the session length", [
            ("Edit", {"file_path": AUTH, "old_string": "length=1", "new_string": "length=7"})])
        assert "additionalContext" not in await read_of(worker, "now", 3)
        # its edit (a hit) and this read (a hit); "before"'s answer is dropped by that edit
        assert await kept_answers(worker) == {"entries": 1, "hits": 4, "misses": 2, "dropped": 1, "reads": 2}

        # Another session's edit of it drops the answer (its mere reads did not): the next read asks
        # SQLite and tells it.
        await store_session(worker, "third", SHOP, "cookies for the admin too", [
            ("Edit", {"file_path": AUTH, "old_string": "admin=False", "new_string": "admin=True"})])
        told = await read_of(worker, "now", 4)
        assert "admin=True" in told["additionalContext"] and "max_age" not in told["additionalContext"]
        assert await kept_answers(worker) == {"entries": 2, "hits": 4, "misses": 4, "dropped": 2, "reads": 4}

        # An import forgets every answer.
        records = await export_all(worker)
        assert (await worker.request("POST", "/api/import", {"records": records})).status == 200
        assert await kept_answers(worker) == {"entries": 0, "hits": 4, "misses": 4, "dropped": 4, "reads": 4}
