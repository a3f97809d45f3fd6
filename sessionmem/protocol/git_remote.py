"""A repository's identity between machines: its normalized git remote. Standard library only.

One clone of a repository at ``~/src/app`` and another at ``~/work/app`` on a second
machine are one project; two unrelated directories both called ``app`` are not. The
name machines agree on is the work tree's remote URL, normalized (:func:`normalized_remote`):
``git@github.com:Owner/Repo.git``, ``ssh://git@github.com:22/owner/repo``,
``https://user:token@github.com/owner/repo.git/`` and ``git://github.com/owner/repo``
are all ``github.com/owner/repo``: lowercase, no scheme, no user or password, no port,
no ``.git``, no trailing slash. A remote that is a path (``/srv/git/app.git``,
``file://...``, ``../app``) or names this machine (``localhost``) is of one machine
only: it gives ``""``, as a work tree without a remote does.

The remote is read from the repository's own ``config`` file, without running git (a
hook cannot afford a process): ``origin``, else the first remote the file lists. The
work tree is found as :mod:`.project` finds it; a linked worktree reads its main
repository's config (``commondir``), a submodule its own. What the file does not say is
not guessed: ``include`` files and a user's ``url.<base>.insteadOf`` rewrites are not
followed.

:func:`repository_identity` also says whether the work tree root holds
:data:`SHARE_FILE`, the committed file that opts a repository into team memory.

Error handling:
    Never raises for what is on disk: an unreadable or malformed config, a missing
    directory or a path of another system give ``""`` (and ``False``).
"""

from __future__ import annotations

import os

from sessionmem.protocol.project import common_dir, git_dir_of_file, work_tree_root

SHARE_FILE = ".sessionmem-share"  # committed at a repository's root, it opts that repository into team memory
MAX_CONFIG_BYTES = 256 * 1024  # a repository's config is a few hundred bytes; more is not read
MAX_KEY = 512  # the longest project key kept (the worker refuses longer ones)
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


class RepositoryIdentity:
    """What a session records of its work tree: the project key and whether the repository opts in."""

    __slots__ = ("project_key", "share_file")

    def __init__(self, project_key: str = "", share_file: bool = False) -> None:
        self.project_key = project_key  # normalized remote, "" without one
        self.share_file = share_file

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RepositoryIdentity) and (self.project_key, self.share_file) == (
            other.project_key, other.share_file)

    def __repr__(self) -> str:
        return f"RepositoryIdentity({self.project_key!r}, {self.share_file!r})"


def repository_identity(cwd: str) -> RepositoryIdentity:
    """The project key and opt-in file of the git work tree containing ``cwd`` (none: empty)."""
    root = work_tree_root(cwd)
    if root is None:
        return RepositoryIdentity()
    config = _config_path(root)
    key = normalized_remote(remote_url(config)) if config is not None else ""
    return RepositoryIdentity(key, os.path.isfile(os.path.join(root, SHARE_FILE)))


def _config_path(root: str) -> str | None:
    """The config file of the repository whose work tree is ``root``."""
    git = os.path.join(root, ".git")
    if os.path.isdir(git):
        return os.path.join(git, "config")
    gitdir = git_dir_of_file(git, root)
    if gitdir is None:
        return None
    return os.path.join(common_dir(gitdir) or gitdir, "config")


def remote_url(config_path: str) -> str:
    """The URL of remote ``origin`` in the git config file at ``config_path``, else of the first remote."""
    try:
        with open(config_path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES)
    except OSError:
        return ""
    urls = remote_urls(raw.decode("utf-8", "replace"))
    return urls.get("origin") or next(iter(urls.values()), "")


def remote_urls(config: str) -> dict[str, str]:
    """Each remote's first ``url`` in a git config file's text, in the order the file names them.

    Git's syntax: ``[remote "name"]`` (the subsection keeps its case, ``\\"`` and
    ``\\\\`` escaped) or the old ``[remote.name]``; keys in any case; values quoted or
    not, ``#``/``;`` comments outside quotes, a trailing backslash continues the line.
    """
    urls: dict[str, str] = {}
    remote: str | None = None
    lines = config.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index].strip()
        index += 1
        if line.startswith("["):
            remote, rest = _section(line)
            line = rest.strip()
            if not line:
                continue
        if remote is None or not line or line[0] in "#;":
            continue
        name, equals, value = line.partition("=")
        if name.strip().lower() != "url" or not equals:
            continue
        while value.rstrip().endswith("\\") and not value.rstrip().endswith("\\\\") and index < len(lines):
            value = value.rstrip()[:-1] + lines[index]
            index += 1
        if remote not in urls:
            urls[remote] = _value(value)
    return urls


def _section(line: str) -> tuple[str | None, str]:
    """``(remote name or None, what follows the header on its line)`` for a section header line."""
    if '"' in line.partition("]")[0]:  # [section "subsection"]
        name, _, rest = line[1:].partition('"')
        sub: list[str] = []
        escaped = False
        for position, char in enumerate(rest):
            if escaped:
                sub.append(char)
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                tail = rest[position + 1 :].lstrip()
                if not tail.startswith("]"):
                    return None, ""
                return ("".join(sub) if name.strip().lower() == "remote" else None), tail[1:]
            else:
                sub.append(char)
        return None, ""
    header, closed, rest = line[1:].partition("]")
    if not closed:
        return None, ""
    section, dot, sub_name = header.strip().partition(".")
    if section.lower() == "remote" and dot and sub_name:
        return sub_name.lower(), rest  # the old syntax lowercases its subsection
    return None, rest


_ESCAPES = {"n": "\n", "t": "\t", "b": "\b", "\\": "\\", '"': '"'}


def _value(raw: str) -> str:
    """A config value as git reads it: quotes joined, escapes applied, comments and outer blanks dropped."""
    out: list[str] = []
    quoted = escaped = False
    pending_space = ""
    for char in raw.strip():
        if escaped:
            out.append(pending_space + _ESCAPES.get(char, char))
            pending_space = ""
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif not quoted and char in "#;":
            break
        elif not quoted and char in " \t":
            pending_space += char
        else:
            out.append(pending_space + char)
            pending_space = ""
    return "".join(out)


def normalized_remote(url: str) -> str:
    """``url`` (any spelling git accepts) as ``host/path``: lowercase, no scheme, credentials, port,
    ``.git`` or trailing slash; ``""`` for a path, a ``file://`` URL, a local host, or nothing usable.

    The host is the one git connects to: a URL's authority ends at its first ``/``, ``?`` or
    ``#``, and an scp-like address's host at its first ``:``. A ``@`` past that (a password
    holding ``/``, ``:``, ``#`` or ``?`` unescaped, or a path made to read as another host:
    ``https://evil.example/@github.com/acme/app``, ``evil.example:x@github.com:acme/app``)
    gives no identity at all: credentials never survive, and no remote passes for another
    repository's (a repository its user agreed to share). Hosts allow no ``@`` in a
    repository's path, so no real remote is lost by it.
    """
    text = url.strip()
    helper, helper_sep, address = text.partition("::")
    if helper_sep and helper.replace("-", "").replace("_", "").isalnum():
        text = address  # a remote helper's <transport>::<address>
    scheme, sep, rest = text.partition("://")
    if sep:
        if not (scheme[:1].isalpha() and all(c.isalnum() or c in "+.-" for c in scheme)):
            return ""
        if scheme.lower() == "file":
            return ""
        end = min((at for at in (rest.find("/"), rest.find("?"), rest.find("#")) if at >= 0), default=len(rest))
        if "@" in rest[end:]:
            return ""
        authority = rest[:end].rpartition("@")[2]  # user, password: gone before anything else is read
        path = rest[end:].split("#", 1)[0].split("?", 1)[0].removeprefix("/")
        host, port = _host_and_port(authority)
        if port and not port.isdigit():
            path = port + "/" + path  # ssh://host:owner/repo: not a port, the path's start
        return _joined(host, path)
    if not text or text[0] in "/~\\" or text.startswith(("./", "../", ".\\", "..\\")) or text in (".", "..") \
            or (len(text) > 1 and text[1] == ":" and text[0].isalpha() and (len(text) == 2 or text[2] in "/\\")):
        return ""  # a path: /srv/app.git, ./app, ~/app, C:\app, C:/app
    user, _, rest = text.rpartition("@")  # scp-like [user@]host:path; the user gone
    if ":" in user or "/" in user:
        return ""  # the "@" is past the host's ":" (or a path's "/"): see the docstring
    host, port = _host_and_port(rest.partition("/")[0])
    if not port:
        return ""  # no "host:" before the first slash: a relative path (app/.git, app)
    path = rest[len(rest.partition(":")[0]) + 1 :] if not rest.startswith("[") else rest[rest.find("]") + 2 :]
    return _joined(host, path)


def checked_key(value: str) -> str:
    """A project key a client sent, made as :func:`normalized_remote` makes one; ``""`` if it is none.

    A key is already ``host/path``; anything else (a URL, an scp-like address, a path)
    is normalized as a remote would be. So a key stored is always one this module
    could have made: no scheme, no credentials, no port, lowercase.
    """
    text = value.strip()
    if "://" in text:
        return normalized_remote(text)
    user, _, rest = text.rpartition("@")  # whatever a user part held
    if ":" in user or "/" in user:
        return ""  # the "@" is past a host: no identity (see normalized_remote)
    if rest.startswith("["):
        end = rest.find("]")
        host, path = (rest[: end + 1], rest[end + 2 :]) if end > 0 and rest[end + 1 : end + 2] == "/" else ("", "")
    elif ":" in rest.partition("/")[0]:
        return normalized_remote(rest)  # an scp-like address
    else:
        host, _, path = rest.partition("/")
    return _joined(host, path)


def _host_and_port(authority: str) -> tuple[str, str]:
    """``host[:port]`` (an IPv6 host in brackets) split; for an scp-like address, port is the path's start."""
    authority = authority.strip()
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            return "", ""
        return authority[: end + 1], authority[end + 2 :] if authority[end + 1 : end + 2] == ":" else ""
    host, _, port = authority.partition(":")
    return host, port


def _joined(host: str, path: str) -> str:
    host = host.strip().lower()
    allowed = ".-_[]:" if host.startswith("[") else ".-_"  # a colon only inside an IPv6 address
    if not host or host in LOCAL_HOSTS or not all(char.isalnum() or char in allowed for char in host):
        return ""
    parts = [part for part in path.replace("\\", "/").split("/") if part and part != "."]
    if parts and parts[-1].lower().endswith(".git"):  # once, as git names a clone's directory
        parts[-1] = parts[-1][: -len(".git")]
        if not parts[-1]:
            parts.pop()
    if not parts:
        return ""
    key = (host + "/" + "/".join(parts)).lower()
    return key if len(key) <= MAX_KEY and key.isprintable() and " " not in key else ""
