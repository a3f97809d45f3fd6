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
that choose where memory, a login or a key goes (:data:`FROM_THE_USER_ONLY`: the team database,
the model's address and keys, the proxy), which the user gives in ``settings.json``.

Who applies it: :func:`sessionmem.protocol.launch.ensure_worker` starts the worker with
:func:`hook_started_environment` and the data dir as its working directory, and ``sessionmem
serve`` applies :func:`worker_environment` to its own process (:func:`confine_process`) whoever
started it.
Standard library only: the hook process imports it.
"""

from __future__ import annotations

import os

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


# sessionmem's own settings that choose where memory, a login or a key goes, or that weaken a protection.
# A project's session can set any variable for its hooks (a committed `.claude/settings.json` has an `env`
# block), so a worker a hook starts never takes these from the hook's environment: the user gives them in
# `<data dir>/settings.json`, or to a `sessionmem serve` they run themselves.
FROM_THE_USER_ONLY = frozenset(f"SESSIONMEM_{name}" for name in (
    "DATABASE_URL", "SHARE_PROJECTS", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY",
    "OPENAI_BASE_URL", "LLM_PROXY", "LLM_CA_BUNDLE", "LLM_ALLOW_PLAIN_HTTP", "CLAUDE_CONFIG_DIR",
    "CLAUDE_CODE_OAUTH_TOKEN", "CLAUDE_PATH", "REDACT_SECRETS", "FAULT_INJECTION",
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
