"""A short conversation with ``codex app-server`` over stdio: Codex's own account of its hooks and its config.

Codex runs a hook someone else wrote only once the user trusted it, and records that
trust as the hook's hash in its ``config.toml``. The hash is Codex's to compute: asked
through its app server (``hooks/list``), Codex says which hooks it found, their current
hash and whether it trusts them, and writes its own configuration (``config/batchWrite``)
the way it reads it, comments and all. sessionmem never computes the hash or edits
``config.toml`` by hand, so a change in either on Codex's side cannot make it trust
the wrong thing or break the file.

The protocol is JSON-RPC 2.0, one JSON object a line (``initialize``, then the
``initialized`` notification, then requests). Notifications the server sends between
answers (warnings, status) are skipped.

Resource handling:
    :class:`CodexAppServer` is a context manager: one ``codex app-server`` child for the
    conversation, its stdin closed and the child waited for (killed after
    :data:`EXIT_WAIT_S`) on the way out. A reader thread turns its stdout into a queue, so
    every answer is waited for with a deadline.

Error handling:
    Anything that is not an answer in time -- no ``codex`` binary, a child that exits, an
    error reply, a reply that is not JSON, an answer not in the shape asked for -- raises
    :class:`CodexUnavailable` with what happened; callers tell the user what to do by hand
    instead. Codex's answers are read as any input from another program is: a hook it
    describes in another shape (a field of another type) is not one sessionmem trusts.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
from collections.abc import Mapping
from typing import Any

import msgspec

ANSWER_TIMEOUT_S = 20.0  # a first start of Codex on a loaded machine reads its whole config
EXIT_WAIT_S = 5.0
CLIENT_INFO = {"name": "sessionmem", "title": "sessionmem", "version": "1"}


class CodexUnavailable(Exception):
    """Codex's app server could not be asked (missing, failed, or answered an error)."""


class ListedHook(msgspec.Struct, frozen=True, rename="camel"):
    """A hook as ``hooks/list`` describes it: the fields sessionmem reads (Codex's others are passed over)."""

    key: str | None = None
    event_name: str | None = None
    command: str | None = None
    source: str | None = None  # "user", "project", ...
    source_path: str | None = None  # the file it was found in
    current_hash: str | None = None
    trust_status: str | None = None  # "trusted", "untrusted", ...


class _HooksOfOneFolder(msgspec.Struct):
    hooks: list[Any] | None = None  # each read on its own (ListedHook): one in another shape is passed over


class _HookListing(msgspec.Struct):
    data: list[_HooksOfOneFolder]


class CodexAppServer:
    """See the module docstring. ``codex`` is the binary to run; ``env`` its environment (``CODEX_HOME`` says
    which configuration it reads)."""

    def __init__(self, codex: str, *, env: Mapping[str, str] | None = None, timeout_s: float = ANSWER_TIMEOUT_S):
        self._argv = [codex, "app-server"]
        self._env = dict(os.environ if env is None else env)
        self._timeout_s = timeout_s
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._next_id = 0
        self._child: subprocess.Popen[str] | None = None

    def __enter__(self) -> CodexAppServer:
        try:
            self._child = subprocess.Popen(self._argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                           stderr=subprocess.DEVNULL, env=self._env, text=True, encoding="utf-8")
        except OSError as exc:
            raise CodexUnavailable(f"cannot run {self._argv[0]}: {exc.strerror or exc}") from None
        threading.Thread(target=self._read, name="codex-app-server-reader", daemon=True).start()
        try:
            self.request("initialize", {"clientInfo": CLIENT_INFO})
            self._send({"jsonrpc": "2.0", "method": "initialized"})
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        child, self._child = self._child, None
        if child is None:
            return
        try:
            if child.stdin is not None:
                child.stdin.close()
        except OSError:
            pass
        try:
            child.wait(timeout=EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()

    def _read(self) -> None:
        child = self._child
        assert child is not None and child.stdout is not None
        for line in child.stdout:
            self._lines.put(line)
        self._lines.put(None)  # the child closed its stdout: no answer will come

    def _send(self, message: dict[str, Any]) -> None:
        child = self._child
        if child is None or child.stdin is None:
            raise CodexUnavailable("the Codex app server is not running")
        try:
            child.stdin.write(json.dumps(message) + "\n")
            child.stdin.flush()
        except OSError as exc:
            raise CodexUnavailable(f"the Codex app server stopped listening: {exc}") from None

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Codex's ``result`` for one request."""
        self._next_id += 1
        wanted = self._next_id
        self._send({"jsonrpc": "2.0", "id": wanted, "method": method, "params": params})
        while True:
            try:
                line = self._lines.get(timeout=self._timeout_s)
            except queue.Empty:
                raise CodexUnavailable(f"no answer to {method} from the Codex app server within "
                                       f"{self._timeout_s:.0f} s") from None
            if line is None:
                raise CodexUnavailable(f"the Codex app server exited before answering {method}")
            try:
                message = json.loads(line)
            except ValueError:
                continue  # not protocol (a stray log line): not an answer
            if not isinstance(message, dict) or message.get("id") != wanted:
                continue  # a notification, or a request of the server's own
            if "error" in message:
                error = message["error"]
                detail = error.get("message") if isinstance(error, dict) else error
                raise CodexUnavailable(f"Codex refused {method}: {detail}")
            result = message.get("result")
            if not isinstance(result, dict):
                raise CodexUnavailable(f"Codex answered {method} with no result")
            return result

    def hooks(self, cwd: str) -> list[ListedHook]:
        """Every hook Codex finds for a session in ``cwd``: its key, event, command, source file, current hash
        and trust status (``hooks/list``). A hook described in another shape is passed over: it is not one
        sessionmem wrote, nor one it can trust; an answer not in the shape of a listing is an error."""
        result = self.request("hooks/list", {"cwds": [cwd]})
        try:
            listing = msgspec.convert(result, _HookListing)
        except msgspec.ValidationError as exc:
            raise CodexUnavailable(f"Codex answered hooks/list with no list of hooks ({exc})") from None
        found: list[ListedHook] = []
        for hook in (hook for entry in listing.data for hook in entry.hooks or []):
            try:
                found.append(msgspec.convert(hook, ListedHook))
            except msgspec.ValidationError:
                continue
        return found

    def config(self) -> dict[str, Any]:
        """The configuration Codex reads (``config/read``), as it answers it."""
        config = self.request("config/read", {}).get("config")
        if not isinstance(config, dict):
            raise CodexUnavailable("Codex answered config/read with no configuration")
        return config

    def write_config(self, edits: list[dict[str, Any]]) -> None:
        """Apply ``edits`` (``{"keyPath", "mergeStrategy": "upsert"|"replace", "value"}``; a ``None`` value
        with ``replace`` removes the key) to the user's ``config.toml``, as Codex writes it."""
        self.request("config/batchWrite", {"edits": edits})
