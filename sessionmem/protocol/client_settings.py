"""The settings clients read (hooks, commands, backfill), and the defaults they share with the worker.

Same sources and precedence as the worker's settings (``sessionmem.settings``):
defaults < ``<data dir>/settings.json`` < environment. Every key here is also a worker
setting with the same name, environment variable and default (:data:`DEFAULTS`,
:data:`ENV`): one definition, read by both.

Error handling:
    A value that cannot be read falls back to its default and is noted in
    :attr:`ClientConfig.problems` -- a hook never fails on configuration.
"""

from __future__ import annotations

import os

from sessionmem.protocol import fastjson
from sessionmem.protocol.limits import FIELD_CAP

DEFAULT_DATA_DIR = "~/.sessionmem"
DATA_DIR_ENV = "SESSIONMEM_DATA_DIR"
SETTINGS_FILE = "settings.json"
HOOK_LOG_FILE = "hooks.log"

TYPE_CHECKING = False  # typing costs a hook ~4 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from collections.abc import Mapping  # collections.abc costs a hook ~2 ms: annotations only
    from typing import TypedDict

    class Defaults(TypedDict):
        """Each default's type: the type a value of the setting is coerced to."""

        host: str
        port: int
        hook_timeout_s: float
        start_timeout_s: float
        system_message: bool
        tool_response_cap: int


DEFAULTS: Defaults = {
    "host": "127.0.0.1",
    "port": 37777,
    "hook_timeout_s": 2.0,  # a hook's HTTP budget for one event
    "start_timeout_s": 2.0,  # SessionStart: longest wait for a worker it started
    "system_message": True,  # SessionStart: the one-line "memories loaded" message
    "tool_response_cap": FIELD_CAP,  # bytes of one tool field, as sent and as stored
}
ENV = {
    "SESSIONMEM_HOST": "host",
    "SESSIONMEM_PORT": "port",
    "SESSIONMEM_HOOK_TIMEOUT": "hook_timeout_s",
    "SESSIONMEM_START_TIMEOUT": "start_timeout_s",
    "SESSIONMEM_SYSTEM_MESSAGE": "system_message",
    "SESSIONMEM_TOOL_RESPONSE_CAP": "tool_response_cap",
}
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off", "")


def data_dir_from(environ: Mapping[str, str]) -> str:
    return os.path.expanduser(environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR)


class ClientConfig:
    """What a client needs: where the data dir is, how to reach the worker, how long to wait."""

    __slots__ = ("data_dir", "host", "port", "hook_timeout_s", "start_timeout_s", "system_message",
                 "tool_response_cap", "problems")
    # Set from DEFAULTS by key (each coerced to its default's type): declared for the type checker.
    data_dir: str
    host: str
    port: int
    hook_timeout_s: float
    start_timeout_s: float
    system_message: bool
    tool_response_cap: int
    problems: list[str]

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.problems = []
        self.data_dir = data_dir_from(env)
        values: dict[str, object] = dict(DEFAULTS)
        try:
            with open(os.path.join(self.data_dir, SETTINGS_FILE), encoding="utf-8") as f:
                from_file = fastjson.loads(f.read())
            if isinstance(from_file, dict):
                values.update({k: v for k, v in from_file.items() if k in DEFAULTS})
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as exc:
            self.problems.append(f"{SETTINGS_FILE} unreadable: {exc}")
        for name, key in ENV.items():
            if name in env:
                values[key] = env[name]
        for key, default in DEFAULTS.items():
            setattr(self, key, self._coerce(key, values[key], default))

    def _coerce(self, key: str, value: object, default: object) -> object:
        try:
            if isinstance(default, bool):
                if isinstance(value, bool):
                    return value
                word = str(value).strip().lower()
                if word not in TRUE_WORDS + FALSE_WORDS:
                    raise ValueError(value)
                return word in TRUE_WORDS
            if isinstance(default, (int, float)):
                if not isinstance(value, (str, int, float)):  # as int() and float() do on JSON's other values
                    raise TypeError(value)
                return int(value) if isinstance(default, int) else float(value)
            return str(value)
        except (TypeError, ValueError):
            self.problems.append(f"{key}={value!r} is invalid; using {default!r}")
            return default

    def token(self) -> str | None:
        """The data dir's auth token (read each time: the worker may have just created it)."""
        from sessionmem.protocol.auth import read_token

        return read_token(self.data_dir)

    def worker_port(self) -> int:
        """The port in ``worker.json`` if that worker is alive (it may have bound port 0), else ``port``: where
        a worker is, or would be, for what is shown. Requests go to :meth:`live_port` only."""
        return self.live_port() or self.port

    def live_port(self) -> int | None:
        """The port of this data dir's live worker, from ``worker.json``: its process runs, as this user's;
        else None. Nothing is sent to a port no worker of ours holds: with the worker down (a reboot,
        ``sessionmem stop``), another user of the machine may listen on its port, and would get the token,
        every event unredacted, and the last word on what the agent is handed."""
        from sessionmem.protocol.state import read_state

        state = read_state(self.data_dir)
        return state.port if state is not None else None

    @property
    def hook_log_path(self) -> str:
        return os.path.join(self.data_dir, HOOK_LOG_FILE)
