"""What a hook process needs to know, read fast and failing open. Standard library only.

Same sources and precedence as the worker's settings (``sessionmem.config``):
defaults < ``<data dir>/settings.json`` < environment. A value that cannot be read
falls back to its default -- a hook never fails on configuration.
"""

from __future__ import annotations

import os

from sessionmem.hooks import fastjson

DEFAULTS = {"host": "127.0.0.1", "port": 37777, "hook_timeout_s": 2.0, "start_timeout_s": 2.0,
            "system_message": True}
_ENV = {"SESSIONMEM_HOST": "host", "SESSIONMEM_PORT": "port", "SESSIONMEM_HOOK_TIMEOUT": "hook_timeout_s",
        "SESSIONMEM_START_TIMEOUT": "start_timeout_s", "SESSIONMEM_SYSTEM_MESSAGE": "system_message"}


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie -- exited, not yet reaped by its parent -- does not)."""
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True  # no /proc: trust the signal check


class HookConfig:
    __slots__ = ("data_dir", "host", "port", "hook_timeout_s", "start_timeout_s", "system_message", "problems")

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.problems: list[str] = []
        self.data_dir = os.path.expanduser(env.get("SESSIONMEM_DATA_DIR") or "~/.sessionmem")
        values: dict[str, object] = dict(DEFAULTS)
        try:
            with open(os.path.join(self.data_dir, "settings.json"), encoding="utf-8") as f:
                from_file = fastjson.loads(f.read())
            if isinstance(from_file, dict):
                values.update({k: v for k, v in from_file.items() if k in DEFAULTS})
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as exc:
            self.problems.append(f"settings.json unreadable: {exc}")
        for name, key in _ENV.items():
            if name in env:
                values[key] = env[name]
        for key, default in DEFAULTS.items():
            value = values[key]
            try:
                if isinstance(default, bool):
                    value = value if isinstance(value, bool) else str(value).strip().lower() in ("1", "true", "yes", "on")
                elif isinstance(default, int):
                    value = int(value)  # type: ignore[call-overload]
                elif isinstance(default, float):
                    value = float(value)  # type: ignore[arg-type]
                else:
                    value = str(value)
            except (TypeError, ValueError):
                self.problems.append(f"{key}={value!r} is invalid; using {default!r}")
                value = default
            setattr(self, key, value)

    def worker_port(self) -> int:
        """The port in ``worker.json`` if that worker is alive (it may have bound port 0), else ``port``."""
        try:
            with open(os.path.join(self.data_dir, "worker.json"), encoding="utf-8") as f:
                state = fastjson.loads(f.read())
            if process_alive(int(state["pid"])):
                return int(state["port"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return self.port  # type: ignore[no-any-return]

    @property
    def log_path(self) -> str:
        return os.path.join(self.data_dir, "hooks.log")
