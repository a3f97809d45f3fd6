"""Passwords out of text: the one scrubber for every message that may quote the team database's URL.

The database URL (``database_url``) may hold a password, and a driver's error, a status line
or a doctor's report may quote it. Whatever is shown or logged of such a message passes
through :func:`sanitized` first: the worker's connections (``storage/pg/connections.py``),
the sync's status (``team/sync.py``) and ``sessionmem doctor`` (``cli/team_doctor.py``).

What it takes out, every spelling of the secret a message may carry:

- the URL itself, and the password it holds, as written and decoded: in the userinfo
  (``postgresql://ann:p%40ss@host``: ``p%40ss`` and ``p@ss``), in the query
  (``?password=...``), or as a keyword of a ``key=value`` connection string, quoted
  (``password='it\\'s'``: both ``'it\\'s'`` and ``it's``) or not;
- whatever else looks like a password: the userinfo password of any URL
  (``scheme://user:***@``), and the value after ``password=`` in any case and spelling
  (``PGPASSWORD=...``, ``Password = "..."``), quoted or not, up to the next blank.

Standard library only (the command line needs it without the database driver): the
URL and connection string are read here, as libpq reads their passwords.

Error handling:
    Never raises: a URL that cannot be read gives no password of its own, and the patterns
    above still apply.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, unquote, urlsplit

MASK = "***"
_URL_USERINFO = re.compile(r"([a-z][a-z0-9+.-]*://[^:/@\s]*):[^@\s]*@", re.IGNORECASE)
_PASSWORD_VALUE = re.compile(r"""(password\s*=\s*)('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|\S+)""", re.IGNORECASE)
_KEYWORD = re.compile(r"""([A-Za-z_]+)\s*=\s*('(?:[^'\\]|\\.)*'|\S+)""")
_ESCAPE = re.compile(r"\\(.)")


def _url_passwords(url: str) -> set[str]:
    """The password of a ``postgresql://`` URL, in its userinfo or its query, as written and decoded."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return set()
    found = {password, unquote(password)} if password else set()
    for field in parts.query.split("&"):
        key, _, value = field.partition("=")
        if unquote(key).strip().lower() == "password" and value:
            found |= {value, unquote(value)}
    found |= {value for key, value in parse_qsl(parts.query) if key.lower() == "password"}
    return found


def _keyword_passwords(conninfo: str) -> set[str]:
    """The password of a ``key=value`` connection string, as written (quoted) and as libpq reads it."""
    found = set()
    for key, value in _KEYWORD.findall(conninfo):
        if key.lower() == "password":
            found.add(value)
            if value.startswith("'") and value.endswith("'") and len(value) > 1:
                found.add(_ESCAPE.sub(r"\1", value[1:-1]))
    return found


def passwords(url: str) -> set[str]:
    """Every spelling of the password ``url`` holds (none: it holds none, or cannot be read)."""
    if not url:
        return set()
    found = _url_passwords(url) if "://" in url else _keyword_passwords(url)
    return {secret for secret in found if secret}


def sanitized(message: str, url: str) -> str:
    """``message`` without ``url``, the password it holds in any spelling, or anything that looks like a password."""
    for secret in sorted({url, *passwords(url)} - {""}, key=len, reverse=True):
        message = message.replace(secret, MASK)
    message = _URL_USERINFO.sub(rf"\1:{MASK}@", message)
    return _PASSWORD_VALUE.sub(rf"\1{MASK}", message)
