"""What Claude Code's own memory already says, so that the handover does not say it again.

A session starts with its CLAUDE.md files and its auto memory (``MEMORY.md``) loaded
(:mod:`sessionmem.protocol.claude_memory` finds them, as Claude Code does). A memory the handover
would repeat from them costs characters and says nothing new, so :class:`AlreadySaid` reads them
for the session's working directory and :meth:`Known.says` tells which observations they cover:

- **a shell command they hold**, whole (a CLAUDE.md that says "run the tests with
  `python -m pytest -q`" needs no memory of the tests being run that way): the command of a
  shell observation, at least :data:`MIN_COMMAND_CHARS` long, found whole in their text
  (whitespace and case aside);
- **a line they hold**: an observation whose title has at least :data:`MIN_WORDS` words that
  mean something, :data:`LINE_SHARE` of them on one line of theirs ("Use uv, not pip, to
  install" beside a MEMORY.md line "- use uv, not pip, to install packages").

The files are only read, never handed over or stored: what they say stays Claude Code's.

Resource handling:
    The files are found and read on a worker thread (:func:`trio.to_thread.run_sync`), and read
    again only when one of them changes (its size or modification time, looked at every time);
    which files they are is found again once a minute (:data:`FILES_FOR_S`); the parsed text of the
    newest :data:`CACHED` working directories is kept, behind a lock (two SessionStarts at once read on
    two threads).

Error handling:
    A file that cannot be read, or is not a regular file (a repository's CLAUDE.md may link to a FIFO
    or a device, whose read would never end), counts as empty; a working directory that is not an absolute path
    of an existing folder has nothing known.
"""

from __future__ import annotations

import os
import re
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path

import msgspec
import trio

from sessionmem.protocol.claude_memory import memory_files, read_memory_file
from sessionmem.records import ObservationRow

MIN_COMMAND_CHARS = 6  # shorter ("ls", "make") says too little to be the file's own command
MIN_WORDS = 4
LINE_SHARE = 0.8
CACHED = 64
# Which files a directory's memory is (its CLAUDE.md files, auto memory's folder: they depend on its settings and
# its repository) is found again after this long; whether one of them changed is looked at every time.
FILES_FOR_S = 60.0
_WORD = re.compile(r"[a-z0-9][a-z0-9_.-]*[a-z0-9]|[a-z0-9]")
_COMMAND_FACT = "command: "
# Words that say nothing of what a line is about.
_STOP = frozenset("the and for with from into that this then than was were are not but all any its it's "
                  "has have had use used using run ran runs".split())


def _words(text: str) -> set[str]:
    return {word for word in _WORD.findall(text.lower()) if len(word) >= 3 and word not in _STOP}


def _flat(text: str) -> str:
    return " ".join(text.lower().split())


class Known(msgspec.Struct, frozen=True):
    """The text of Claude Code's own memory of a project, ready to be asked what it says."""

    text: str  # flattened: lower case, one space between words
    lines: list[frozenset[str]]  # each line's words that mean something

    @classmethod
    def of(cls, text: str) -> Known:
        lines = [frozenset(words) for line in text.splitlines() if (words := _words(line))]
        return cls(_flat(text), lines)

    def says(self, row: ObservationRow) -> bool:
        """Whether ``row`` is already said: its shell command, or its title, is in the text."""
        if not self.text:
            return False
        command = next((fact[len(_COMMAND_FACT):] for fact in row.facts if fact.startswith(_COMMAND_FACT)), "")
        command = _flat(command)
        if len(command) >= MIN_COMMAND_CHARS and command in self.text and re.search(
                r"(?<![\w-])" + re.escape(command) + r"(?![\w-])", self.text):  # whole: not `pytest` in `pytest-cov`
            return True
        words = _words(row.title)
        if len(words) < MIN_WORDS:
            return False
        return any(len(words & line) >= LINE_SHARE * len(words) for line in self.lines)


NOTHING_KNOWN = Known("", [])


class _Read(msgspec.Struct, frozen=True):
    """A working directory's memory files: which they are (found at ``found_at``), as last seen, and what they say."""

    found_at: float  # time.monotonic()
    paths: tuple[str, ...]
    stamps: tuple[tuple[str, int, int], ...]  # those that exist: path, modification time (ns), size
    known: Known


class AlreadySaid:
    """What Claude Code's own memory says, by working directory (one owner: the context planner).

    ``env``: where Claude Code's configuration is (``CLAUDE_CONFIG_DIR``, as the user's Claude Code
    has it) and whether auto memory is switched off; ``claude_config_dir`` (sessionmem's setting of
    that name), when given, over it.
    """

    def __init__(self, env: Mapping[str, str] | None = None, *, claude_config_dir: str = "") -> None:
        self._env = dict(os.environ if env is None else env)
        if claude_config_dir:
            self._env["CLAUDE_CONFIG_DIR"] = os.path.expanduser(claude_config_dir)
        self._cache: OrderedDict[str, _Read] = OrderedDict()
        self._lock = threading.Lock()  # two SessionStarts at once read on two threads

    async def known(self, cwd: str) -> Known:
        """What the memory files of a session started in ``cwd`` say (:data:`NOTHING_KNOWN` for a bad ``cwd``)."""
        if not cwd or not os.path.isabs(cwd):
            return NOTHING_KNOWN
        return await trio.to_thread.run_sync(self._known, cwd)

    def _known(self, cwd: str) -> Known:  # on a worker thread
        now = time.monotonic()
        with self._lock:
            read = self._cache.get(cwd)
        if read is None or now - read.found_at > FILES_FOR_S:
            if not os.path.isdir(cwd):
                return NOTHING_KNOWN
            found_at, paths = now, tuple(map(str, memory_files(Path(cwd), self._env)))
        else:
            found_at, paths = read.found_at, read.paths
        stamps = []
        for path in paths:  # ~1 µs a path: os.stat of a string, not pathlib
            try:
                found = os.stat(path)
            except OSError:
                continue
            if stat.S_ISREG(found.st_mode):  # a FIFO or a device a repository links to is not read
                stamps.append((path, found.st_mtime_ns, found.st_size))
        stamped = tuple(stamps)
        if read is not None and read.stamps == stamped:
            known = read.known
        else:
            known = Known.of("\n".join(read_memory_file(Path(path)) for path, _, _ in stamped)) if stamped \
                else NOTHING_KNOWN
        with self._lock:
            self._cache[cwd] = _Read(found_at, paths, stamped, known)
            self._cache.move_to_end(cwd)
            while len(self._cache) > CACHED:
                self._cache.popitem(last=False)
        return known
