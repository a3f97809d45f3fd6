"""The items a handover holds, read from the text the worker answered, and their score against a session's needs.

An **item** is one line Claude reads: an observation line of the SessionStart context (a
collapsed line, ``- #4, …, #9, #10, #11 (×6) discovery: Read src/app.py``, counts as the
observations it names, the files of those it shows standing for the rest: a line collapses the
same action on the same file), a recalled observation (``- #12 (2025-06-01) change: …``), the
last session's summary (one item; after a compaction, the session's own fields are one more) or an
earlier session's line, or a recalled summary.

An item is **relevant** to a category when it names, for

- files: a file the session touched (one of its observations' ``filesRead``/``filesModified``,
  or the path in its text);
- commands: a command the session ran (the observation's own tool use has the same command key,
  or the key is in its text);
- errors: an error the session met that an earlier session solved (the observation's own tool
  use has that failure's key).

Precision is relevant observations over observations handed over (a summary counts one),
pooled over sessions; recall is the needed files, commands and errors that some item named,
over those needed (:mod:`handover_needs`), pooled too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from handover_needs import Needs, ProjectHistory, relative

CATEGORIES = ("files", "commands", "errors")
SURFACES = ("session_start", "prompt_recall", "file_recall")
ALL = "all"  # the three surfaces together

_CONTEXT_LINE = re.compile(r"^- ((?:#\d+|…)(?:, (?:#\d+|…))*)(?: \(×(\d+)\))? ")
_RECALLED_OBSERVATION = re.compile(r"^- #(\d+) \(")
_RECALLED_SUMMARY = re.compile(r"^- summary (\d+) \(")
_IDS = re.compile(r"#(\d+)")


@dataclass
class Item:
    surface: str
    text: str
    ids: list[int] = field(default_factory=list)  # observation ids shown (none: a summary)
    count: int = 1  # observations it stands for (a summary: 1)
    kind: str = ""  # what sort of line: "summary", "earlier" (a session's line), else the observation's type


def context_items(text: str) -> list[Item]:
    """The items of a SessionStart context (``server/context_markdown.py``'s layout)."""
    items: list[Item] = []
    section = ""
    summaries: dict[str, list[str]] = {}  # the last session's, a compacted session's own: one item each
    for line in text.splitlines():
        if line.startswith("## "):
            section = line
            continue
        if section.startswith(("## Last session", "## This session so far")) and line.startswith("- **"):
            summaries.setdefault(section, []).append(line)
        elif section.startswith("## Earlier sessions") and line.startswith("- "):
            items.append(Item("session_start", line, kind="earlier"))
        elif (match := _CONTEXT_LINE.match(line)) is not None:
            ids = [int(i) for i in _IDS.findall(match.group(1))]
            kind = line[match.end():].split(":", 1)[0]
            items.append(Item("session_start", line, ids, int(match.group(2) or len(ids)), kind))
    return [Item("session_start", "\n".join(lines), kind="summary") for lines in summaries.values()] + items


def recall_items(text: str, surface: str) -> list[Item]:
    """The items of a recall answer (``search/recall.py``'s layout)."""
    items = []
    for line in text.splitlines():
        if (match := _RECALLED_OBSERVATION.match(line)) is not None:
            items.append(Item(surface, line, [int(match.group(1))]))
        elif _RECALLED_SUMMARY.match(line):
            items.append(Item(surface, line))
    return items


def row_line(row: dict[str, Any]) -> str:
    """How a recency baseline's observation would read: as a recalled line does, without the date."""
    detail = f" — {row['subtitle']}" if row.get("subtitle") else ""
    return f"- #{row['id']} {row['type']}: {row['title']}{detail}"


@dataclass
class Named:
    """What one item names of a session's needs."""

    files: set[str]
    commands: set[str]
    errors: set[tuple[str, str]]

    def relevant(self, category: str) -> bool:
        return bool(getattr(self, category))


def _mentioned(text: str, needs: Needs) -> tuple[set[str], set[str]]:
    """The session's files (a whole path, not the end of a longer one) and command keys that ``text`` names."""
    if needs.cwd:
        text = text.replace(needs.cwd.rstrip("/") + "/", " ")
    files = {path for path in needs.files
             if path in text and re.search(r"(?<![\w/.-])" + re.escape(path) + r"(?![\w/-])", text)}
    return files, {command for command in needs.commands if command in text}


def named(item: Item, needs: Needs, rows: dict[int, dict[str, Any]], history: ProjectHistory) -> Named:
    """The files, commands and errors of ``needs`` that ``item`` names; ``rows``: observations as the HTTP API
    writes them (camelCase fields)."""
    files, commands = _mentioned(item.text, needs)
    errors: set[tuple[str, str]] = set()
    for row_id in item.ids:
        row = rows.get(row_id)
        if row is None:
            continue
        in_files, in_commands = _mentioned(" ".join([row.get("title", ""), row.get("subtitle", ""),
                                                     row.get("narrative", ""), *row.get("facts", [])]), needs)
        files |= in_files
        commands |= in_commands
        files |= {relative(path, needs.cwd) for path in [*row.get("filesRead", []), *row.get("filesModified", [])]
                  } & needs.files
        use = history.uses.get(row.get("toolUseId") or "")
        if use is not None:
            if use.command in needs.commands:
                commands.add(use.command)
            if use.key in needs.errors and use.key is not None:
                errors.add(use.key)
    return Named(files, commands, errors)


@dataclass
class Tally:
    """Pooled counts of one surface (or baseline) over sessions."""

    sessions: int = 0
    observations: int = 0  # handed over, a summary counting one
    characters: int = 0
    relevant: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CATEGORIES + ("any",), 0))
    needed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0))
    found: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0))

    def add(self, items: Iterable[Item], characters: int, needs: Needs, rows: dict[int, dict[str, Any]],
            history: ProjectHistory) -> dict[str, Any]:
        """Score one session's ``items`` into the pool; returns that session's own counts."""
        relevant = dict.fromkeys(CATEGORIES + ("any",), 0)
        observations = 0
        union = Named(set(), set(), set())
        lines = []  # each item: its kind, the observations it stands for, whether relevant (any, files)
        for item in items:
            found = named(item, needs, rows, history)
            lines.append([item.kind, item.count, any(found.relevant(category) for category in CATEGORIES),
                          found.relevant("files")])
            observations += item.count
            for category in CATEGORIES:
                relevant[category] += item.count * found.relevant(category)
            relevant["any"] += item.count * any(found.relevant(category) for category in CATEGORIES)
            union.files |= found.files
            union.commands |= found.commands
            union.errors |= found.errors
        needed, got = {}, {}
        for category, wanted, named_ in (("files", needs.needed_files, union.files),
                                         ("commands", needs.needed_commands, union.commands),
                                         ("errors", needs.errors, union.errors)):
            needed[category], got[category] = len(wanted), len(wanted & named_)
        self.sessions += 1
        self.characters += characters
        self.observations += observations
        for category, count in relevant.items():
            self.relevant[category] += count
        for category in CATEGORIES:
            self.needed[category] += needed[category]
            self.found[category] += got[category]
        return {"observations": observations, "characters": characters, "relevant": relevant, "needed": needed,
                "found": got, "lines": lines}

    def figures(self) -> dict[str, Any]:
        def ratio(part: int, whole: int) -> float | None:
            return round(part / whole, 4) if whole else None

        return {
            "sessions": self.sessions, "observations": self.observations, "characters": self.characters,
            "observations_per_session": ratio(self.observations, self.sessions),
            "characters_per_session": ratio(self.characters, self.sessions),
            "precision": {category: ratio(self.relevant[category], self.observations)
                          for category in CATEGORIES + ("any",)},
            "recall": {category: ratio(self.found[category], self.needed[category]) for category in CATEGORIES},
            "needed": dict(self.needed), "found": dict(self.found),
        }
