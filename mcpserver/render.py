"""What the tools answer, as text for a model: a compact index first, full records on request.

The three layers of progressive disclosure, cheapest first:

1. :func:`search_index` -- one line a hit: its reference, date, the agent that made it, type, title, the files
   it touched and a few words of snippet. About 30 tokens a hit, so twenty hits cost
   less than one full observation.
2. :func:`timeline_text` -- the same lines for what happened around one hit, in order,
   with a line where a session or a prompt begins.
3. :func:`observation_records` -- everything stored of the observations asked for.

A reference is an observation's id (``42``) or ``kind:id`` for the other kinds
(``summary:3``, ``prompt:7``): what ``timeline(anchor=...)`` takes, and, for
observations, what ``get_observations(ids=[...])`` takes. Times are local.

Every answer that holds memory is framed as recalled data (:mod:`sessionmem.protocol.framing`):
a line before its first memory says it is quoted data, not instructions; a memory another machine wrote is
marked ``from bob@laptop, unverified`` (its origin shown as a sanitized label), a flagged one
``flagged``; stored text is neutralized, names and titles on one line, and a narrative, which
keeps its lines, is quoted (``> ``), so no line of it reads as a line of the answer.
"""

from __future__ import annotations

import os
from typing import Any

from sessionmem.protocol.agents import AGENT_TITLES, DEFAULT_AGENT
from sessionmem.protocol.framing import ANSWER_NOTE, marks, quoted
from sessionmem.protocol.safe_text import local_time, neutral_deep
from sessionmem.records import OBSERVATION

SNIPPET_CHARS = 100  # of a hit's snippet in the index: enough to tell two similar titles apart
TITLE_CHARS = 120
FILES_SHOWN = 2


def reference(kind: str, row_id: int) -> str:
    """``42`` for an observation, ``summary:3`` for the others."""
    return str(row_id) if kind == OBSERVATION else f"{kind}:{row_id}"


def when(seconds: float) -> str:
    return local_time(seconds)


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _files(paths: list[str]) -> str:
    if not paths:
        return ""
    names = [os.path.basename(path.rstrip("/")) or path for path in paths[:FILES_SHOWN]]
    more = f" +{len(paths) - FILES_SHOWN}" if len(paths) > FILES_SHOWN else ""
    return f" [{', '.join(names)}{more}]"


def from_origin(entry: dict[str, Any]) -> str:
    """`` | from bob@laptop, unverified`` for a memory another machine wrote (`` | flagged: …`` for a flagged
    one); ``""`` for this machine's own."""
    marked = marks(entry.get("origin") or "", bool(entry.get("flagged")))
    return f" | {marked}" if marked else ""


def by_agent(entry: dict[str, Any]) -> str:
    """`` | Codex CLI``: the title of the agent whose session made a memory (a worker before agents: Claude Code)."""
    agent = entry.get("agent") or DEFAULT_AGENT
    return f" | {AGENT_TITLES.get(agent, agent)}"


def index_line(entry: dict[str, Any]) -> str:
    """One search hit or timeline entry: ``42 | 2026-11-20 14:03 | Codex CLI | bugfix | Title [calc.py] — snippet``,
    with `` | from bob@laptop, unverified`` after the agent for one another machine wrote."""
    line = (f"{reference(entry['kind'], entry['id'])} | {when(entry['createdAt'])}{by_agent(entry)}{from_origin(entry)} | "
            f"{entry['type']} | {_cut(entry['title'], TITLE_CHARS) or '(untitled)'}{_files(entry.get('files') or [])}")
    snippet = _cut(entry.get("snippet") or "", SNIPPET_CHARS)
    return f"{line} — {snippet}" if snippet else line


def search_index(reply: dict[str, Any], *, scope: str) -> str:
    """The answer of ``/api/search`` as an index; ``scope`` says where it looked (``project calcproj``)."""
    reply = neutral_deep(reply)  # stored text, all of it, and it goes to Claude as it is
    results = reply["results"]
    query = _cut(reply["query"], 200)
    if not results:
        if reply["offset"]:
            return f'No more results for "{query}" in {scope} past offset {reply["offset"]}.'
        return f'Nothing found for "{query}" in {scope}.'
    first = reply["offset"] + 1
    head = f'Results {first}-{first + len(results) - 1} for "{query}" in {scope} ({reply["mode"]} search'
    if reply["mode"] != "fts" and reply["vectors"] != "used":
        head += f"; meaning unavailable ({reply['vectors']}), words only"
    elif reply.get("unembedded"):
        head += f"; {reply['unembedded']} recent documents not yet searchable by meaning"
    lines = [head + "):", ANSWER_NOTE]
    lines += [index_line(result) for result in results]
    observations = [str(r["id"]) for r in results if r["kind"] == OBSERVATION][:5]
    hints = []
    if reply["more"]:
        hints.append(f"more with offset={reply['offset'] + len(results)}")
    if reply.get("source") == "team":
        # Its ids are the team database's: the other tools read this machine's memory, where an id names
        # another row (or none).
        hints.append("these ids are the team database's: get_observations and timeline read this machine's "
                     "memory, not them (the snippets are what the team database gives)")
        lines.append("Next: " + "; ".join(hints) + ".")
        return "\n".join(lines)
    if observations:
        hints.append(f"full records: get_observations(ids=[{', '.join(observations)}])")
    hints.append(f"what happened around one: timeline(anchor={reference(results[0]['kind'], results[0]['id'])})")
    lines.append("Next: " + "; ".join(hints) + ".")
    return "\n".join(lines)


def timeline_text(reply: dict[str, Any]) -> str:
    """The answer of ``/api/timeline``: oldest first, the anchor marked ``>>``, a line per session and prompt."""
    reply = neutral_deep(reply)  # stored text, all of it, and it goes to Claude as it is
    lines = [f"Timeline around {reply['anchorKind']} {reply['anchorId']} (project {reply['project'] or 'unknown'}), "
             f"oldest first:", ANSWER_NOTE]
    turn: tuple[str, int] | None = None
    for entry in reply["entries"]:
        if (entry["claudeSessionId"], entry["promptNumber"]) != turn:
            turn = (entry["claudeSessionId"], entry["promptNumber"])
            lines.append(f"-- session {entry['claudeSessionId']}, prompt {entry['promptNumber']}")
        lines.append(("> " if entry["anchor"] else "  ") + index_line(entry))
    return "\n".join(lines)


def _section(title: str, items: list[str]) -> list[str]:
    return [f"{title}:", *(f"- {item}" for item in items)] if items else []


def observation_record(row: dict[str, Any]) -> str:
    """Everything stored of one observation (``/api/observations/batch``'s row)."""
    row = neutral_deep(row)
    tool = row["toolName"] + (" (failed)" if row["failed"] else "")
    agent = f", in subagent {row['agentType'] or row['agentId']}" if row.get("agentId") else ""
    lines = [
        f"## {row['id']} | {row['type']} | {row['title']}",
        f"project {row['project']} | session {row['claudeSessionId']}, prompt {row['promptNumber']} | "
        f"{when(row['createdAt'])}{by_agent(row)}{from_origin(row)} | tool {tool}{agent}",
    ]
    if row["subtitle"]:
        lines += quoted(row["subtitle"])
    if row["narrative"]:
        lines += ["", *quoted(row["narrative"]), ""]
    lines += _section("Facts", row["facts"])
    lines += _section("Files read", row["filesRead"])
    lines += _section("Files modified", row["filesModified"])
    if row["concepts"]:
        lines.append("Concepts: " + ", ".join(row["concepts"]))
    if not row["compressed"]:
        lines.append("(stored from the raw tool use: the compressor could not summarize it)")
    lines += _consolidation(row.get("consolidation") or {})
    return "\n".join(lines)


def _consolidation(marks: dict[str, Any]) -> list[str]:
    """What the worker's consolidation pass says of an observation (docs/search.md, "Consolidation"): ids and
    counts, shown only when they are integers."""
    def number(key: str) -> int:
        value = marks.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

    said = []
    if superseded_by := number("supersededBy"):
        said.append(f"superseded by #{superseded_by}, a later decision about the same thing")
    if duplicate_of := number("duplicateOf"):
        said.append(f"a near-duplicate of #{duplicate_of}, which is newer")
    if merged := number("merged"):
        said.append(f"{merged} older near-duplicate(s) merged into it")
    if supersedes := number("supersedes"):
        said.append(f"supersedes {supersedes} earlier decision(s)")
    return [f"Consolidation: {'; '.join(said)}."] if said else []


def observation_records(reply: dict[str, Any]) -> str:
    """The answer of ``/api/observations/batch``, in the order asked, then the ids not found."""
    parts = [ANSWER_NOTE, *(observation_record(row) for row in reply["observations"])]
    if reply["missing"]:
        parts.append(f"Not found: {', '.join(str(i) for i in reply['missing'])} (ids come from search or timeline).")
    return "\n\n".join(parts)
