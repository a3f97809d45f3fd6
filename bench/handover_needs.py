"""What a replayed session needed, read from its own tool uses: the ground truth of the handover eval.

- **Files**: the files its file tools (Read, Edit, MultiEdit, Write, NotebookEdit: the tools file
  recall answers, :data:`sessionmem.search.recall.FILE_TOOLS`) read or changed, failed or not.
- **Commands** (tests among them): the shell commands it ran, each as a key
  (:func:`command_key`: the program and its first two arguments that are not options, so
  ``cd app && pytest tests/test_api.py -q`` is ``pytest tests/test_api.py``); routine commands
  (``git status``, ``ls``: :func:`sessionmem.compress.commands.classify`) are not needed by anyone.
- **Errors**: a failed tool use (a command key, or a file tool on a path) that an earlier session
  of the project had met and solved: failed, then succeeded later in that same session.

What a session could have been handed is what earlier sessions had worked on: recall counts
only the needed files and commands that some earlier session touched or ran.

Paths are compared relative to the session's working directory (a path outside it stays
absolute), so two sessions started in the same repository agree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sessionmem.compress.commands import Kind, classify
from sessionmem.replay.convert import ReplaySession
from sessionmem.search.recall import FILE_TOOLS

TOOL_STAGES = ("PostToolUse", "PostToolUseFailure")
_SEPARATORS = re.compile(r"&&|\|\||;|\n|\|")
_PREFIXES = frozenset({"sudo", "time", "env", "nohup", "command", "exec"})
_REDIRECTION = re.compile(r"[<>&]")
_NOT_THE_WORK = frozenset({"cd", "export", "source", ".", "set", "echo", "true"})


def command_key(command: str) -> str:
    """The first simple command that does the work: its program and first two arguments that are neither
    options nor redirections (comments, ``cd``, ``export`` and the like passed over)."""
    for part in _SEPARATORS.split(command):
        words = [word.strip("'\"") for word in part.split()]
        while words and (words[0] in _PREFIXES or re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0])):
            words.pop(0)
        if not words or words[0] in _NOT_THE_WORK or words[0].startswith("#"):
            continue
        arguments = [word for word in words[1:] if word and not word.startswith("-") and not _REDIRECTION.search(word)]
        arguments = arguments[:2]
        return " ".join([words[0].rsplit("/", 1)[-1], *arguments])[:160]
    return ""


def relative(path: str, cwd: str) -> str:
    """``path`` relative to ``cwd`` when it lies inside it (else as given), without ``./``."""
    path = path.strip()
    if cwd and path.startswith(cwd.rstrip("/") + "/"):
        path = path[len(cwd.rstrip("/")) + 1:]
    return path[2:] if path.startswith("./") else path


@dataclass(frozen=True)
class ToolUse:
    session_id: str
    tool_use_id: str
    failed: bool
    file: str = ""  # relative path, for a file tool
    command: str = ""  # command key, for a shell command that is not routine

    @property
    def key(self) -> tuple[str, str] | None:
        """What a failure of this use and its later success have in common."""
        if self.file:
            return ("file", self.file)
        if self.command:
            return ("command", self.command)
        return None


def tool_uses(session: ReplaySession) -> list[ToolUse]:
    """The session's tool uses in order, each with the file it touched or the command it ran."""
    uses = []
    for event in session.events:
        if event.stage not in TOOL_STAGES:
            continue
        payload = event.payload
        tool, tool_input = payload.get("tool_name", ""), payload.get("tool_input")
        tool_input = tool_input if isinstance(tool_input, dict) else {}
        file = command = ""
        if tool in FILE_TOOLS and isinstance(tool_input.get(FILE_TOOLS[tool]), str):
            file = relative(tool_input[FILE_TOOLS[tool]], session.cwd)
        elif tool == "Bash" and isinstance(tool_input.get("command"), str):
            if classify(tool_input["command"]).kind is not Kind.ROUTINE:
                command = command_key(tool_input["command"])
        uses.append(ToolUse(session.session_id, str(payload.get("tool_use_id") or ""),
                            event.stage == "PostToolUseFailure", file, command))
    return uses


def solved_errors(uses: list[ToolUse]) -> set[tuple[str, str]]:
    """Keys of the uses that failed and later succeeded, in one session's uses."""
    failed: set[tuple[str, str]] = set()
    solved: set[tuple[str, str]] = set()
    for use in uses:
        key = use.key
        if key is None:
            continue
        if use.failed:
            failed.add(key)
        elif key in failed:
            solved.add(key)
    return solved


@dataclass
class Needs:
    """What one session touched (what makes an item relevant), and the part earlier sessions had worked on."""

    session_id: str
    cwd: str
    files: set[str]
    commands: set[str]
    errors: set[tuple[str, str]]  # its failures that an earlier session met and solved
    needed_files: set[str]  # of ``files``, those earlier sessions touched
    needed_commands: set[str]  # of ``commands``, those earlier sessions ran


@dataclass
class ProjectHistory:
    """A project's sessions as they are replayed: what the earlier ones touched, ran and solved."""

    files: set[str] = field(default_factory=set)
    commands: set[str] = field(default_factory=set)
    solved: set[tuple[str, str]] = field(default_factory=set)
    uses: dict[str, ToolUse] = field(default_factory=dict)  # by tool_use_id, of every session seen

    def needs(self, session: ReplaySession) -> Needs:
        """What ``session`` needed, given the sessions :meth:`add`-ed so far."""
        uses = tool_uses(session)
        files = {use.file for use in uses if use.file}
        commands = {use.command for use in uses if use.command}
        errors = {use.key for use in uses if use.failed and use.key in self.solved}
        return Needs(session.session_id, session.cwd, files, commands, {key for key in errors if key is not None},
                     files & self.files, commands & self.commands)

    def and_then(self, session: ReplaySession) -> ProjectHistory:
        """A copy of this history with ``session`` (a session's part before some point) added."""
        later = ProjectHistory(set(self.files), set(self.commands), set(self.solved), dict(self.uses))
        later.add(session)
        return later

    def add(self, session: ReplaySession) -> None:
        uses = tool_uses(session)
        self.files |= {use.file for use in uses if use.file}
        self.commands |= {use.command for use in uses if use.command}
        self.solved |= solved_errors(uses)
        self.uses.update((use.tool_use_id, use) for use in uses if use.tool_use_id)
