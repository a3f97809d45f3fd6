"""Claude Code's own memory of a project: its CLAUDE.md files and its auto memory (``MEMORY.md``).

Claude Code keeps two memories of its own beside sessionmem's handover: CLAUDE.md, which people
write, and **auto memory**, notes Claude writes for itself (``MEMORY.md`` and topic files, the
first 200 lines of ``MEMORY.md`` loaded into every session). ``sessionmem doctor`` says whether
auto memory is on for the project (:func:`auto_memory`); the worker leaves out of the handover
what these files already say (:func:`memory_text`, ``search/already_said.py``). How Claude Code
decides, as the pinned CLI does:

- ``CLAUDE_CODE_DISABLE_AUTO_MEMORY`` set to a true value turns auto memory off, to a false one
  on, over any setting;
- else ``autoMemoryEnabled`` of the first settings file that sets it: the managed (policy)
  settings, the project's ``.claude/settings.local.json``, its ``.claude/settings.json``, the
  user's ``settings.json``; unset everywhere: on;
- its folder is ``autoMemoryDirectory`` (``~/`` expanded) from the same files, else
  ``<Claude's config dir>/projects/<project path, every character but letters and digits made
  a dash>/memory``. The project path is the repository's top folder (the nearest folder up
  that holds ``.git``), or the working directory outside a repository; the report names the
  one whose folder exists;
- the CLAUDE.md files loaded (:func:`instruction_files`): the managed one beside the managed
  settings, the user's ``<config dir>/CLAUDE.md``, and in the working directory and every folder
  above it, ``CLAUDE.md``, ``.claude/CLAUDE.md`` and ``CLAUDE.local.md``.

Standard library only: the doctor and the worker both read it.

Error handling:
    A settings file that is missing or does not parse is passed over (Claude Code reports its own
    settings errors), as is a memory file that cannot be read; nothing here raises for a file.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from sessionmem.protocol.client_settings import FALSE_WORDS, TRUE_WORDS

MANAGED_SETTINGS = {"darwin": Path("/Library/Application Support/ClaudeCode/managed-settings.json"),
                    "win32": Path("C:/Program Files/ClaudeCode/managed-settings.json")}
LINUX_MANAGED_SETTINGS = Path("/etc/claude-code/managed-settings.json")
ENV = "CLAUDE_CODE_DISABLE_AUTO_MEMORY"
MEMORY_LINES = 200  # of MEMORY.md, Claude Code loads the first 200 lines into a session
FILE_LIMIT = 256 * 1024  # read of each memory file: a larger one is read this far
COUNT_LIMIT = 16 << 20  # of MEMORY.md, counted this far (a link to /proc/self/pagemap "holds" 256 GiB)
PROJECT_FILES = ("CLAUDE.md", ".claude/CLAUDE.md", "CLAUDE.local.md")


def claude_config_dir(env: Mapping[str, str] = os.environ) -> Path:
    """Claude Code's config dir: ``$CLAUDE_CONFIG_DIR``, else ``~/.claude``."""
    config_dir = env.get("CLAUDE_CONFIG_DIR")
    return Path(config_dir) if config_dir else Path.home() / ".claude"


@dataclass(frozen=True)
class AutoMemory:
    enabled: bool
    why: str  # what decided it: the environment variable, a settings file, or the default
    folder: Path
    memory_lines: int | None  # lines of MEMORY.md; None: there is none yet
    memory_more: bool = False  # MEMORY.md goes on past COUNT_LIMIT: it holds more lines than memory_lines

    def line(self) -> str:
        """The doctor's line."""
        state = "on" if self.enabled else "off"
        where = (f"MEMORY.md {'over ' if self.memory_more else ''}{self.memory_lines} line(s) in {self.folder}" if self.memory_lines is not None
                 else f"no MEMORY.md yet in {self.folder}")
        return f"Claude Code's auto memory: {state} for this project ({self.why}); {where}"


def managed_settings(platform: str = sys.platform) -> Path:
    return MANAGED_SETTINGS.get(platform, LINUX_MANAGED_SETTINGS)


def settings_files(project: Path, env: Mapping[str, str], platform: str = sys.platform) -> list[Path]:
    """The settings files that may set auto memory, the one that wins first."""
    return [managed_settings(platform), project / ".claude" / "settings.local.json",
            project / ".claude" / "settings.json", claude_config_dir(env) / "settings.json"]


def regular_file_text(path: Path, limit: int = FILE_LIMIT) -> str | None:
    """The first ``limit`` bytes of ``path`` as text, if it is a regular file (``None`` if not, or unreadable)."""
    try:
        with _regular_file(path) as file:
            return None if file is None else file.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def line_count(path: Path) -> tuple[int, bool] | None:
    """The lines of ``path`` in its first :data:`COUNT_LIMIT` bytes, and whether it goes on past them, if it is
    a regular file (``None`` if not, or unreadable), read a chunk at a time: a repository's settings may
    point auto memory at a folder holding a file, or a link to one, of any size."""
    try:
        with _regular_file(path) as file:
            if file is None:
                return None
            lines, last, read = 0, b"\n", 0
            while read < COUNT_LIMIT and (chunk := file.read(min(1 << 20, COUNT_LIMIT - read))):
                lines, last, read = lines + chunk.count(b"\n"), chunk[-1:], read + len(chunk)
            return lines + (last != b"\n"), read >= COUNT_LIMIT and bool(file.read(1))
    except OSError:
        return None


@contextlib.contextmanager
def _regular_file(path: Path) -> Iterator[BinaryIO | None]:
    """``path`` open for reading if it is a regular file, else None.

    A cloned repository chooses its CLAUDE.md and ``.claude/settings.json``: one that is a link to a FIFO or
    a terminal would block the read for good, so only a regular file is opened, and without waiting for a
    writer (``O_NONBLOCK``, should it have been swapped for a FIFO since).

    Error handling:
        ``OSError`` from opening is None; from reading, it reaches the caller.
    """
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        yield None
        return
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            yield None
            return
        with os.fdopen(descriptor, "rb", closefd=False) as file:
            yield file
    finally:
        os.close(descriptor)


def _read(path: Path) -> dict[str, object]:
    text = regular_file_text(path)
    try:
        loaded = json.loads(text) if text is not None else None
    except ValueError:
        return {}
    return loaded if isinstance(loaded, dict) else {}


def project_folder_name(project: Path) -> str:
    """The name Claude Code gives a project's folder under ``projects/``: every other character a dash."""
    return re.sub(r"[^A-Za-z0-9]", "-", str(project))


def repository_top(cwd: Path) -> Path | None:
    """The top folder of the git repository holding ``cwd``: the nearest folder up that holds ``.git`` (a
    folder, or a worktree's file), if any."""
    for folder in (cwd, *cwd.parents):
        if (folder / ".git").exists():
            return folder
    return None


def auto_memory(cwd: Path, env: Mapping[str, str] = os.environ, platform: str = sys.platform) -> AutoMemory:
    """Auto memory for the project at ``cwd``, as Claude Code started there would have it, with the lines of
    its ``MEMORY.md``."""
    enabled, why, folder = auto_memory_setting(cwd, env, platform)
    counted = line_count(folder / "MEMORY.md")
    return AutoMemory(enabled, why, folder, counted[0] if counted else None, bool(counted and counted[1]))


def auto_memory_setting(cwd: Path, env: Mapping[str, str] = os.environ,
                        platform: str = sys.platform) -> tuple[bool, str, Path]:
    """Whether auto memory is on for the project at ``cwd``, what decided it, and its folder."""
    top = repository_top(cwd) or cwd
    files = [(path, _read(path)) for path in settings_files(top, env, platform)]
    switch = env.get(ENV, "").strip().lower()
    if switch and switch in TRUE_WORDS + FALSE_WORDS:
        enabled, why = switch in FALSE_WORDS, f"{ENV}={env[ENV]}"
    else:
        setting = next(((path, values["autoMemoryEnabled"]) for path, values in files
                        if isinstance(values.get("autoMemoryEnabled"), bool)), None)
        enabled, why = (True, "the default") if setting is None else (
            bool(setting[1]), f"autoMemoryEnabled {str(setting[1]).lower()} in {setting[0]}")
    directory = next((values["autoMemoryDirectory"] for _, values in files
                      if isinstance(values.get("autoMemoryDirectory"), str) and values["autoMemoryDirectory"]), None)
    if isinstance(directory, str):
        return enabled, why, Path(directory).expanduser()
    candidates = [claude_config_dir(env) / "projects" / project_folder_name(path) / "memory" for path in (top, cwd)]
    return enabled, why, next((candidate for candidate in candidates if candidate.is_dir()), candidates[0])


def instruction_files(cwd: Path, env: Mapping[str, str] = os.environ, platform: str = sys.platform) -> list[Path]:
    """The CLAUDE.md files a session started in ``cwd`` loads, whether they exist or not: the managed one, the
    user's, then those of every folder from the top (``/`` excepted) down to ``cwd``."""
    folders = [folder for folder in reversed((cwd, *cwd.parents)) if folder.parent != folder]
    return [managed_settings(platform).with_name("CLAUDE.md"), claude_config_dir(env) / "CLAUDE.md",
            *(folder / name for folder in folders for name in PROJECT_FILES)]


def instruction_files_line(cwd: Path, env: Mapping[str, str] = os.environ, platform: str = sys.platform) -> str:
    """The doctor's line: the CLAUDE.md files a session started in ``cwd`` loads, which the handover does not
    repeat."""
    found = [str(path) for path in instruction_files(cwd, env, platform) if path.is_file()]
    if not found:
        return "CLAUDE.md: none for this project"
    return f"CLAUDE.md: {', '.join(found)} (the handover leaves out what they, and MEMORY.md, already say)"


def memory_files(cwd: Path, env: Mapping[str, str] = os.environ, platform: str = sys.platform) -> list[Path]:
    """Every file of Claude Code's own memory a session started in ``cwd`` loads: its CLAUDE.md files, then
    ``MEMORY.md`` when auto memory is on."""
    enabled, _, folder = auto_memory_setting(cwd, env, platform)
    return [*instruction_files(cwd, env, platform), *([folder / "MEMORY.md"] if enabled else [])]


def read_memory_file(path: Path) -> str:
    """The text Claude Code loads of ``path`` (of ``MEMORY.md``, its first :data:`MEMORY_LINES` lines), at most
    :data:`FILE_LIMIT` bytes of it; ``""`` if it is not a regular file or cannot be read."""
    text = regular_file_text(path) or ""
    return "\n".join(text.splitlines()[:MEMORY_LINES]) if path.name == "MEMORY.md" else text
