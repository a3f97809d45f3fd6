"""The code watch: a loaded module's file changed on disk is noticed once it holds still.

The whole path (a worker from a wheel, a module rewritten under it, the same process serving
again with the new code) is in tests/test_wheel.py.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
import trio

from sessionmem.runtime import codewatch


def load(source: Path) -> str:
    """A module of ours, as far as the watch can tell: in sys.modules under sessionmem., with a file."""
    source.write_text("VERSION = 1\n")
    module = types.ModuleType(f"sessionmem._codewatch_{source.stem}")
    module.__file__ = str(source)
    sys.modules[module.__name__] = module
    return module.__name__


@pytest.fixture
def loaded_module(tmp_path: Path) -> Iterator[Path]:
    source = tmp_path / "probe.py"
    name = load(source)
    try:
        yield source
    finally:
        del sys.modules[name]


@pytest.fixture
def looks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many looks at the files the watch has finished (``looks[0]``): tests wait for a look
    rather than sleep for one, which a busy machine may not have taken yet."""
    done = [0]
    stamps = codewatch.stamps

    def counted(paths: Iterable[str]) -> dict[str, codewatch.Stamp]:
        found = stamps(paths)
        done[0] += 1
        return found

    monkeypatch.setattr(codewatch, "stamps", counted)
    return done


async def wait_for_looks(looks: list[int], count: int) -> None:
    with trio.fail_after(10):
        while looks[0] < count:
            await trio.sleep(0.01)


def test_the_files_of_loaded_modules_of_ours_only(loaded_module: Path) -> None:
    files = codewatch.loaded_code_files()
    assert str(loaded_module) in files and codewatch.__file__ in files
    assert trio.__file__ not in files and list(files) == sorted(files)


async def test_a_rewritten_module_is_a_change_once_it_holds_still(loaded_module: Path, looks: list[int],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # Writes come every 0.1 s; a second of settling holds even when a busy machine delays one.
    monkeypatch.setattr(codewatch, "SETTLE_S", 1.0)
    found: list[str] = []

    async def watch() -> None:
        found.append(await codewatch.wait_for_code_change(0.05))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        await wait_for_looks(looks, 3)
        assert found == []  # nothing changed: nothing said
        for version in range(2, 6):  # an upgrade writing for a while: still settling
            loaded_module.write_text(f"VERSION = {version}  # {'x' * version}\n")
            await trio.sleep(0.1)
        assert found == []
        with trio.fail_after(5):
            while not found:
                await trio.sleep(0.02)
    assert found == [str(loaded_module)]


async def test_a_module_gone_is_a_change(loaded_module: Path, looks: list[int],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codewatch, "SETTLE_S", 0.05)
    found: list[str] = []

    async def watch() -> None:
        found.append(await codewatch.wait_for_code_change(0.05))

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            await wait_for_looks(looks, 1)  # its first look taken
            loaded_module.unlink()
    assert found == [str(loaded_module)]


async def test_a_module_loaded_after_the_first_look_is_watched_too(loaded_module: Path, tmp_path: Path,
                                                                    looks: list[int],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codewatch, "SETTLE_S", 0.05)
    found: list[str] = []

    async def watch() -> None:
        found.append(await codewatch.wait_for_code_change(0.05))

    later = tmp_path / "later.py"
    try:
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch)
                await wait_for_looks(looks, 2)  # its first looks taken
                load(later)  # as the warm-up imports the embedder
                await wait_for_looks(looks, looks[0] + 2)  # a whole look since: the new module is known
                assert found == []  # a newly loaded module is no change
                later.write_text("VERSION = 2  # upgraded\n")
    finally:
        del sys.modules["sessionmem._codewatch_later"]
    assert found == [str(later)]


def test_a_data_dir_deleted_or_replaced_is_no_longer_the_workers(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "sessionmem.db").write_bytes(b"x")
    identity = codewatch.DataDirIdentity(data, data / "sessionmem.db")
    assert identity.still_ours()
    (data / "sessionmem.db").write_bytes(b"written again, in place")
    assert identity.still_ours()  # the worker's own writes are not a change
    data.rename(tmp_path / "moved")
    data.mkdir()
    assert not identity.still_ours()  # moved away, a new directory at the path
    data.rmdir()
    assert not identity.still_ours()  # gone


@pytest.mark.slow
def test_a_worker_whose_data_dir_is_deleted_starts_again_on_the_new_one(tmp_path: Path) -> None:
    # After `rm -rf` of the data dir, the hooks (no token in the new directory) spool; a worker that
    # stayed on the deleted database would import their spool into it, and those sessions would be lost.
    import json
    import shutil

    from sessionmem.protocol import routes
    from sessionmem.protocol.spool import pending_spool_files, write_spool_file
    from sessionmem.protocol.state import read_state
    from sessionmem.testing.worker_process import WorkerProcess, start_worker

    data = tmp_path / "data"
    worker = start_worker(data, env={"SESSIONMEM_COMPRESSOR": "offline", "SESSIONMEM_EMBEDDER": "none"})
    restarted: WorkerProcess | None = None
    try:
        worker.post(routes.INIT, {"claudeSessionId": "before", "cwd": "/home/me/shop", "prompt": "old memory"})
        worker.wait_idle()
        first = read_state(str(data))
        assert first is not None
        shutil.rmtree(data)
        body = {"claudeSessionId": "after", "cwd": "/home/me/shop", "prompt": "a session after the reset"}
        assert write_spool_file(str(data), routes.INIT, json.dumps(body).encode())[0]  # as a hook does
        restarted = worker.wait_until(lambda: WorkerProcess.attach(data), timeout=30)
        assert restarted is not None
        state = read_state(str(data))
        assert state is not None and state.pid == first.pid and state.started_at > first.started_at
        sessions = restarted.wait_until(lambda: restarted.get(routes.SESSIONS)["sessions"] or None, timeout=30)
        assert [s["claudeSessionId"] for s in sessions] == ["after"]  # the spool, imported here; the old store gone
        assert pending_spool_files(str(data)) == []
    finally:
        (restarted or worker).stop()
        if worker.process is not None and worker.process.poll() is None:
            worker.stop()
