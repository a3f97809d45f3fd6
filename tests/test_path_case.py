"""Keys on a disk that ignores case: one project and one file's memory, however their paths are spelled.

The project key is the directory's name as the disk spells it, asked of the disk: shown with the disk's answer
given as a parameter, and on a real case-insensitive disk (a FAT image mounted through FUSE, where this machine
allows: root, ``mkfs.vfat``, ``fusefat``). File recall matches names in any case where the OS's disks ignore it:
shown on a real store whose memories were written under the old rule.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sessionmem.protocol.path_case import case_insensitive_by_default, on_disk_name
from sessionmem.protocol.project import project_of
from sessionmem.records import CompressedObservation, FileMemory
from sessionmem.settings import load_settings
from sessionmem.storage.sqlite.file_memories import recalled_as
from sessionmem.storage.sqlite.file_memory_cache import FileRecallCache
from sessionmem.storage.sqlite.fulltext import file_matches
from sessionmem.storage.sqlite.store import open_sqlite_store
from sessionmem.storage.sqlite.values import all_rows
from sessionmem.testing.harness import open_worker

from .test_search import store_session


def test_the_oss_whose_own_disks_ignore_case() -> None:
    assert case_insensitive_by_default("darwin") and case_insensitive_by_default("win32")
    assert not case_insensitive_by_default("linux")


def test_a_name_is_spelled_as_its_directory_spells_it_where_the_disk_ignores_case(tmp_path: Path) -> None:
    (tmp_path / "Proj").mkdir()
    assert on_disk_name(str(tmp_path / "proj"), case_insensitive=True) == "Proj"
    assert on_disk_name(str(tmp_path / "PROJ") + "/", case_insensitive=True) == "Proj"
    assert on_disk_name(str(tmp_path / "proj"), case_insensitive=False) == "proj"
    assert on_disk_name(str(tmp_path / "proj")) == "proj"  # this disk tells case apart: as given
    assert on_disk_name(str(tmp_path / "Proj")) == "Proj"
    assert on_disk_name(str(tmp_path / "gone"), case_insensitive=True) == "gone"
    (tmp_path / "2024").mkdir()
    assert on_disk_name(str(tmp_path / "2024"), case_insensitive=True) == "2024"  # nothing to spell
    (tmp_path / "both" / "Make").mkdir(parents=True)
    (tmp_path / "both" / "make").mkdir()
    assert on_disk_name(str(tmp_path / "both" / "make")) == "make"  # a case-sensitive disk with both spellings


# -- a real case-insensitive disk -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def case_insensitive_disk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A directory on a disk that ignores case: where the temporary directory's disk already does (macOS's
    default APFS), a directory there; on Linux, a FAT file system mounted through FUSE (``make test`` installs
    mkfs.vfat and fusefat with apt-get), skipped only where the machine has no FUSE device to mount it on."""
    root = tmp_path_factory.mktemp("fat")
    (root / "Probe").mkdir()
    if (root / "probe").exists():
        yield root
        return
    tools = [shutil.which(name) for name in ("mkfs.vfat", "fusefat", "fusermount")]
    assert None not in tools, "needs mkfs.vfat and fusefat (apt: dosfstools fusefat; `make test` installs them)"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        pytest.skip("no FUSE device (/dev/fuse) to mount a case-insensitive disk on")
    mkfs, fusefat, fusermount = (str(tool) for tool in tools)
    image, mount = root / "fat.img", root / "mnt"
    mount.mkdir()
    with open(image, "wb") as f:
        f.truncate(16 * 1024 * 1024)
    subprocess.run([mkfs, str(image)], check=True, capture_output=True)
    mounted = subprocess.run([fusefat, "-o", "rw+", str(image), str(mount)], capture_output=True, text=True)
    assert mounted.returncode == 0 and os.path.ismount(mount), f"fusefat: {mounted.stderr.strip()}"
    try:
        yield mount
    finally:
        subprocess.run([fusermount, "-u", str(mount)], check=False, capture_output=True)


def test_one_directory_is_one_project_however_its_path_is_spelled(case_insensitive_disk: Path) -> None:
    (case_insensitive_disk / "ShopApp" / ".git").mkdir(parents=True)
    (case_insensitive_disk / "ShopApp" / "src").mkdir()
    (case_insensitive_disk / "Notes").mkdir()  # outside git
    spellings = [case_insensitive_disk / "ShopApp", case_insensitive_disk / "shopapp" / "src",
                 case_insensitive_disk / "SHOPAPP" / "Src"]
    assert {project_of(str(path)) for path in spellings} == {"ShopApp"}
    assert project_of(str(case_insensitive_disk / "notes")) == "Notes"


async def test_memory_kept_under_the_old_key_is_found_from_another_spelling(case_insensitive_disk: Path,
                                                                            tmp_path: Path) -> None:
    """A session in ``<disk>/Blog`` stored its memory under ``Blog`` (the old rule: the name as the path
    spells it). A session in ``<disk>/blog`` -- the same directory -- is given that memory at its start."""
    (case_insensitive_disk / "Blog").mkdir()
    async with open_worker(tmp_path / "data", embedder="none", batch_quiet_s=0.05) as worker:
        await store_session(worker, "before", str(case_insensitive_disk / "Blog"), "fix the broken RSS feed dates", [
            ("Edit", {"file_path": str(case_insensitive_disk / "Blog" / "feed.py"),
                      "old_string": "strftime('%d')", "new_string": "isoformat()"})])
        project = project_of(str(case_insensitive_disk / "blog"))  # what the next session's hooks send
        assert project == "Blog"
        reply = await worker.request("GET", f"/api/context/inject?project={project}")
        assert reply.status == 200 and "feed.py" in reply.body.decode()


# -- file recall -------------------------------------------------------------------------------------------------

README = "/Users/me/Shop/docs/ReadMe.md"


def _edit(path: str) -> CompressedObservation:
    return CompressedObservation("change", "Edited the readme", files_modified=(path,))


def test_a_files_name_matches_in_any_case_only_where_names_are_folded() -> None:
    assert not file_matches("/users/me/shop/docs/README.md", [README])  # a case-sensitive disk: another file
    assert file_matches("/users/me/shop/docs/README.md", [README], fold_case=True)
    assert file_matches("docs/readme.MD", [README], fold_case=True)
    assert not file_matches("other/readme.md", [README], fold_case=True)  # still the path's end
    assert recalled_as("/USERS/ME/SHOP/DOCS/README.MD", _edit(README), fold_case=True) is True
    assert recalled_as("/USERS/ME/SHOP/DOCS/README.MD", _edit(README)) is None


def test_kept_rows_of_one_file_are_one_entry_in_any_case_and_joined_by_stores_in_any_case() -> None:
    cache = FileRecallCache(fold_case=True)
    key = cache.key("Shop", "/users/me/shop/docs/readme.md")
    assert key == cache.key("Shop", "/Users/me/Shop/docs/README.md")
    cache.put(key, cache.ticket(), [])
    cache.stored("other", "Shop", [(5, 2.0, _edit(README))])
    assert [row.id for row in cache.get(cache.key("Shop", "/USERS/me/shop/DOCS/readme.md")) or []] == [5]
    assert FileRecallCache().key("Shop", README) == ("Shop", README)  # a case-sensitive disk: as asked


async def test_file_memory_stored_under_the_old_spelling_is_recalled_in_any_case(tmp_path: Path) -> None:
    """Memories written by a worker of before (names matched exactly) under ``ReadMe.md`` are recalled for
    ``readme.md`` by a store that folds names (macOS, Windows): it adds its index to the old database when
    it opens it; a store that does not fold still tells the two apart."""
    data = tmp_path / "data"
    async with open_worker(data, embedder="none", batch_quiet_s=0.05) as worker:
        await store_session(worker, "before", "/Users/me/Shop", "explain the install steps", [
            ("Edit", {"file_path": README, "old_string": "pip install", "new_string": "uv tool install"})])
    database = load_settings({}, data_dir=str(data)).db_path

    async def recalled(path: str, *, fold_file_case: bool) -> list[FileMemory]:
        async with open_sqlite_store(database, fold_file_case=fold_file_case) as store:
            return await store.file_memories("Shop", path, exclude_session="now", limit=3)

    assert [m.claude_session_id for m in await recalled(README, fold_file_case=False)] == ["before"]
    assert await recalled("/users/me/shop/docs/readme.md", fold_file_case=False) == []
    for spelling in ("/users/me/shop/docs/readme.md", "/USERS/ME/SHOP/DOCS/README.MD", README):
        found = await recalled(spelling, fold_file_case=True)
        assert [(m.claude_session_id, m.modified) for m in found] == [("before", True)], spelling
    async with open_sqlite_store(database, fold_file_case=True) as store:
        plan = await store._readers.run(lambda connection: all_rows(
            connection, "EXPLAIN QUERY PLAN SELECT observation_id FROM observation_files"
                        " WHERE basename = 'readme.md' COLLATE NOCASE ORDER BY observation_id DESC LIMIT 5"))
    assert "observation_files_basename_nocase" in str(plan)  # the lookup's cost does not grow with the memory
