"""This machine's paths out of the records that leave it for the team database.

A record of a session names where its user keeps their work: the files it read and
edited (absolute paths), and its texts quote commands (``cd /home/ann/src/shop && make``).
A path of one machine tells the others where a user lives and what their folders are
called, and means nothing there. So before a record is pushed, every text of it (titles,
narratives, facts, files, prompts, summaries) is rewritten:

- a path under the session's working directory becomes relative to it
  (``/home/ann/src/shop/cart.py`` is ``cart.py``), and the directory itself ``.``;
- any other path under the home directory starts with ``~``
  (``/home/ann/.aws/config`` is ``~/.aws/config``).

A path is matched only whole: ``/home/ann/src/shop-old`` is not under ``/home/ann/src/shop``
(it becomes ``~/src/shop-old``), and ``/mnt/home/ann`` is not the home ``/home/ann``. The
root directory is never taken for either. Identity fields (session and tool use ids, the
project, the tool's name) are left as they are.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache

import msgspec

from sessionmem.storage.export_records import Record

# The fields of the transfer records that hold text or lists of text written by a session.
TEXT_FIELDS = frozenset({
    "first_prompt", "text", "title", "subtitle", "narrative", "facts", "concepts", "files_read", "files_modified",
    "request", "investigated", "learned", "completed", "next_steps", "notes",
})
_PATH_CHARACTER = r"[\w.\-~]"  # what continues a path's name (a "/" after it is a deeper path, kept whole)


@lru_cache(maxsize=256)
def _pattern(directory: str) -> re.Pattern[str]:
    """``directory`` as a whole path: not the tail of a longer name before it, nor the head of one after it."""
    return re.compile(rf"(?<!{_PATH_CHARACTER}){re.escape(directory)}(?:(/)(?={_PATH_CHARACTER})|(?!{_PATH_CHARACTER}))")


def _usable(directory: str | None) -> str:
    """``directory`` without a trailing ``/``; "" for none, a relative one, or the root."""
    directory = (directory or "").rstrip("/")
    return directory if directory.startswith("/") else ""


def without_local_paths_in(text: str, *, cwd: str | None, home: str | None) -> str:
    """``text`` with the paths under ``cwd`` relative to it and those under ``home`` from ``~``."""
    working, user = _usable(cwd), _usable(home)
    if working and working in text:
        text = _pattern(working).sub(lambda found: "" if found[1] == "/" else ".", text)
    if user and user in text:
        text = _pattern(user).sub(lambda found: "~" + (found[1] or ""), text)
    return text


def without_local_paths(record: Record, *, cwd: str | None, home: str | None = None) -> Record:
    """``record`` with its texts rewritten (see the module docstring); ``home``: this user's home directory
    (default: ``~`` of this process)."""
    home = os.path.expanduser("~") if home is None else home
    changes: dict[str, object] = {}
    for name in TEXT_FIELDS & set(record.__struct_fields__):
        value = getattr(record, name)
        if isinstance(value, str):
            rewritten: object = without_local_paths_in(value, cwd=cwd, home=home)
        elif isinstance(value, list):
            rewritten = [without_local_paths_in(item, cwd=cwd, home=home) if isinstance(item, str) else item
                         for item in value]
        else:
            continue
        if rewritten != value:
            changes[name] = rewritten
    return msgspec.structs.replace(record, **changes) if changes else record
