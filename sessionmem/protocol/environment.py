"""What of its starter's environment the worker keeps: an allow-list, one definition for the launcher and the worker.

The worker is started by whoever comes first -- a SessionStart hook from inside some
project's Claude Code session, ``sessionmem serve`` in a shell, ``make run`` -- and then
serves every session of every project. The environment of that first starter is one
project's: a committed ``.claude/settings.json`` can set ``ANTHROPIC_BASE_URL``,
``ANTHROPIC_API_KEY``, ``HTTPS_PROXY`` or ``PYTHONPATH`` for its sessions and their hooks.
Inherited, they would send later batches of every project (and the user's OAuth token) to
that host, or bill that key instead of the user's subscription. So the worker keeps only
what describes the user and the machine (:func:`describes_user`, which the Claude Code
CLI's runs keep too), libpq's password for the team database and its own settings
(``SESSIONMEM_*``); the compressor's provider comes from sessionmem's settings
(``sessionmem.settings``) and the user's own Claude Code login, never from here. The same
session can set ``SESSIONMEM_*`` variables as well: a worker that a hook starts leaves out those
that choose where memory, a login or a key goes, what a model costs or what is kept
(:data:`FROM_THE_USER_ONLY`: the team database, the model, its address, keys and budget, the
proxy, the address it listens on, redaction), which the user gives in ``settings.json``; and it
starts only in a data dir the user could have meant (:func:`unfit_data_dir`).

Who applies it: :func:`sessionmem.protocol.launch.ensure_worker` starts the worker with
:func:`hook_started_environment` and the data dir as its working directory, and ``sessionmem
serve`` applies :func:`worker_environment` to its own process (:func:`confine_process`) whoever
started it.
Standard library only: the hook process imports it.
"""

from __future__ import annotations

import os

from sessionmem.protocol.oskit import real_home

TYPE_CHECKING = False  # typing costs a hook ~4 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from collections.abc import Mapping

# Who the user is and how the machine is set up (and the locale, LC_*): a project's session has no reason to
# change these.
USER_AND_MACHINE = frozenset({
    "HOME", "PATH", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR",
    "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_RUNTIME_DIR",
})
# libpq's own ways to give the team database's password (docs/team.md): a password, not an address.
TEAM_PASSWORD = frozenset({"PGPASSFILE", "PGPASSWORD"})


def describes_user(name: str) -> bool:
    """Whether the environment variable ``name`` says who the user is or how the machine is set up."""
    return name in USER_AND_MACHINE or name.startswith("LC_")


# sessionmem's own settings that choose where memory, a login or a key goes, what a model costs, what is
# kept, or that weaken a protection. A project's session can set any variable for its hooks (a committed
# `.claude/settings.json` has an `env` block), and the worker a hook starts serves every project after it,
# so that worker never takes these from the hook's environment: the user gives them in
# `<data dir>/settings.json`, or to a `sessionmem serve` they run themselves. (One project's env block once
# sent every project's tool use to a model the user had turned off, on the dearest model without a budget,
# and froze the worker with a redaction pattern of its own.)
FROM_THE_USER_ONLY = frozenset(f"SESSIONMEM_{name}" for name in (
    "DATABASE_URL", "SHARE_PROJECTS", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY",
    "OPENAI_BASE_URL", "LLM_PROXY", "LLM_CA_BUNDLE", "LLM_ALLOW_PLAIN_HTTP", "CLAUDE_CONFIG_DIR",
    "CLAUDE_CODE_OAUTH_TOKEN", "CLAUDE_PATH", "REDACT_SECRETS", "FAULT_INJECTION",
    # what it costs, where it listens, what it keeps, whose it says the memory is
    "COMPRESSOR", "MODEL", "OPENAI_MODEL", "LLM_DAILY_TOKENS", "LLM_SESSION_TOKENS", "HOST",
    "REDACT_PATTERNS", "SKIP_TOOLS", "RAW_RETENTION_DAYS", "ACCESS_LOG", "MAX_BODY_BYTES", "MACHINE_NAME",
    "USER_NAME",
))


def kept(name: str) -> bool:
    """Whether the worker keeps the environment variable ``name``."""
    return describes_user(name) or name in TEAM_PASSWORD or name.startswith("SESSIONMEM_")


def worker_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without what the worker does not keep (see the module docstring)."""
    return {name: value for name, value in environ.items() if kept(name)}


def hook_started_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """What a worker that a hook starts inherits: :func:`worker_environment` without :data:`FROM_THE_USER_ONLY`."""
    return {name: value for name, value in environ.items() if kept(name) and name not in FROM_THE_USER_ONLY}


LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})  # the addresses a hook may pass to the worker it starts


def unfit_data_dir(data_dir: str) -> str:
    """Why a hook must not start a worker in ``data_dir`` (``""``: it may). A project's session chooses the
    hook's ``SESSIONMEM_DATA_DIR`` and ``HOME`` too: a relative one, or one inside a repository (a clone's own
    committed folder), would have the worker read that repository's ``settings.json`` as the user's own, and
    run the command it names. The user starts a worker there themselves, with ``sessionmem serve``."""
    if not os.path.isabs(data_dir):
        return f"the data dir {data_dir!r} is not an absolute path"
    home = real_home()  # a home kept in git (dotfiles) is the user's, not a clone's: looked for below it
    folder = os.path.realpath(data_dir)
    while folder != home:
        if os.path.lexists(os.path.join(folder, ".git")):
            return f"the data dir {data_dir!r} is inside a repository ({folder})"
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return ""


def left_out(environ: Mapping[str, str]) -> list[str]:
    """The names in ``environ`` the worker does not keep, sorted (for the log: names only, never values)."""
    return sorted(name for name in environ if not kept(name))


def confine_process(data_dir: str) -> list[str]:
    """Confine this process as the launcher starts the worker: drop what :func:`kept` refuses from
    ``os.environ`` (children inherit the rest) and work in ``data_dir``. Returns the names dropped."""
    dropped = left_out(os.environ)
    for name in dropped:
        del os.environ[name]
    os.chdir(data_dir)
    return dropped
