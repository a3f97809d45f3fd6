"""Keys made of paths on a disk that ignores case: one directory, one spelling. Standard library only.

macOS (APFS and HFS+ as Apple formats them) and Windows (NTFS) ignore case by default, and so
do FAT sticks, WSL's ``/mnt/c`` and ext4 ``casefold`` directories on Linux: ``/Users/me/Proj``
and ``/users/me/proj`` are one directory there, and a key made of how a path happens to be
spelled would split one project's memory (or one file's) in two.

**Project keys** (:func:`on_disk_name`, used by :mod:`.project`): the key is the directory's
name as the disk spells it, read from its parent's listing. Whether the disk ignores case is
asked of the disk itself, not guessed from the OS (a Mac can have a case-sensitive volume, a
Linux machine a FAT stick): the name with its case swapped is looked up. That runs in every
hook, so its cost was measured (5,000 calls, the busy 2-core Linux CI box): on a case-sensitive
disk one failed ``stat`` (7-13 µs), on a case-insensitive one two ``stat`` calls and a listing
of the parent directory (0.1-0.2 ms for 50 entries), against the hook's 25 ms. Nothing is
cached: a hook process lives for one event. A name with no letter whose case can
change (``2024``) needs nothing. Keys made before this rule from the disk's own spelling (what
``getcwd`` and a shell's completion give) are the same keys: no stored project is renamed.

**File recall** (:data:`FOLDS_FILE_CASE`): the worker matches a file's name in any ASCII case
(its directories already were, by ``LIKE``) where the OS's own disks ignore case by default:
macOS and Windows. That is decided once per process, without a look at the disk: the lookup
runs on the worker's event loop, where a ``stat`` per file would be blocking I/O, and erring
costs little (on a case-sensitive Mac volume, a memory of ``Makefile`` recalled for a
``makefile`` of the same project; on a case-insensitive Linux mount, the exact-case match of
before). Stored paths keep their spelling: a lookup in any case finds both the old ones and the
new.

Error handling:
    Never raises: a path that does not exist, or cannot be listed, keeps its own spelling.
"""

from __future__ import annotations

import os
import sys

from sessionmem.protocol.oskit import NATIVE_WINDOWS

# The platforms whose own disks ignore case by default: Apple's APFS and HFS+, Windows' NTFS.
CASE_INSENSITIVE_PLATFORMS = frozenset({"darwin", *NATIVE_WINDOWS})


def case_insensitive_by_default(platform: str = sys.platform) -> bool:
    """Whether ``platform``'s own disks ignore case unless formatted otherwise."""
    return platform in CASE_INSENSITIVE_PLATFORMS


FOLDS_FILE_CASE = case_insensitive_by_default()  # file recall matches names in any ASCII case here


def on_disk_name(path: str, *, case_insensitive: bool | None = None) -> str:
    """The last name of ``path`` as its directory spells it on a disk that ignores case; as given otherwise.

    ``on_disk_name("/users/me/proj") == "Proj"`` when ``/Users/me/Proj`` is the directory on a
    case-insensitive disk; on a case-sensitive disk, or for a path that does not exist, the
    name is ``path``'s own (``"proj"``). ``case_insensitive`` says what the disk would answer
    instead of asking it (None: ask): the name is then looked for in its parent's listing.
    """
    parent, name = os.path.split(path)
    if not name:  # "dir/": the name of the path without its trailing separator
        parent, name = os.path.split(parent)
    other = name.swapcase()
    if not name or other == name or case_insensitive is False:
        return name
    if case_insensitive is None:
        try:
            os.stat(os.path.join(parent, other))
            os.stat(path)
        except (OSError, ValueError):
            return name  # no such name: the disk tells case apart (or the path is gone)
    try:
        entries = os.listdir(parent or os.curdir)
    except OSError:
        return name
    if name in entries:
        return name  # spelled as the disk spells it (or both spellings exist: a case-sensitive disk)
    folded = name.casefold()
    matches = [entry for entry in entries if entry.casefold() == folded]
    return matches[0] if len(matches) == 1 else name
