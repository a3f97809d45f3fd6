"""``sessionmem search`` and ``sessionmem show``: memory from a terminal.

Both ask the running worker (``GET /api/search``, ``POST /api/observations/batch``)
like every client, with the install's token; standard library only. ``--json``
prints the worker's answer as it is, for scripts. ``search --team`` asks the team
database itself (``source=team``); its ids are that database's, which ``show`` does not read.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any
from urllib.parse import urlencode

from sessionmem.cli.client import call, whole_number
from sessionmem.protocol import routes
from sessionmem.protocol.agents import AGENT_TITLES, AGENTS, DEFAULT_AGENT
from sessionmem.protocol.client_settings import ClientConfig
from sessionmem.protocol.framing import marks
from sessionmem.protocol.limits import MAX_PAGE, MAX_SEARCH_OFFSET, MAX_SEARCH_RESULTS
from sessionmem.protocol.project import ALL_PROJECTS, project_of
from sessionmem.protocol.safe_text import local_time, neutral_deep

WIDTH = 100
PROJECTS_NAMED = 20


def _marks(entry: dict[str, Any]) -> str:
    """``  from bob@laptop, unverified`` for a memory another machine wrote (its origin a label), as every
    place that shows memory to an agent marks it (:mod:`sessionmem.protocol.framing`)."""
    marked = marks(entry.get("origin") or "", bool(entry.get("flagged")))
    return f"  {marked}" if marked else ""


def _agent(entry: dict[str, Any]) -> str:
    """The title of the agent whose session made a memory (``Codex CLI``); a worker before agents: Claude Code."""
    agent = entry.get("agent") or DEFAULT_AGENT
    return AGENT_TITLES.get(agent, agent)


def _date(timestamp: float) -> str:
    return local_time(timestamp)


def _clip(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def cmd_search(args: argparse.Namespace, config: ClientConfig) -> int:
    query: dict[str, Any] = {"q": args.query, "mode": args.mode, "limit": args.limit, "offset": args.offset}
    if args.team:
        query["source"] = "team"
    project = project_of(os.getcwd()) if args.project == "." else None if args.project == ALL_PROJECTS else args.project
    for name, value in (("project", project), ("type", args.type), ("since", args.since), ("until", args.until),
                        ("file", args.file), ("kind", args.kind), ("origin", args.origin), ("agent", args.agent)):
        if value:
            query[name] = value
    answer = call(config, "GET", f"{routes.SEARCH}?{urlencode(query)}")
    if args.json:
        print(json.dumps(answer, indent=2))  # \u-escaped: no control or bidi character reaches a terminal raw
        return 0
    answer = neutral_deep(answer)  # stored text, printed to a terminal: no escape sequence of its own
    results = answer["results"]
    vectors = "" if answer["vectors"] in ("used", "not asked") else f" (vectors {answer['vectors']}: words only)"
    if answer.get("unembedded"):
        vectors = f" ({answer['unembedded']} documents not yet searchable by meaning: the index is catching up)"
    team = answer.get("source") == "team"
    where = " in the team database" if team else ""
    print(f"{len(results)} result(s) for {args.query!r}{where}, {answer['mode']}{vectors}")
    for result in results:
        label = f"#{result['id']}" if result["kind"] == "observation" else f"{result['kind']} {result['id']}"
        label = f"team {label}" if team else label
        found = "+".join(result["matchedBy"])
        origin = _marks(result)
        print(f"\n{label:>10}  {_date(result['createdAt'])}  {result['project']}{origin}  {_agent(result)}"
              f"  {result['type']}  [{found}]")
        print(f"{'':>10}  {_clip(result['title'], WIDTH)}")
        if result["snippet"] and result["snippet"] != result["title"]:
            print(f"{'':>10}  {_clip(result['snippet'], WIDTH)}")
    if not results and project and not team:
        _say_if_unknown(config, project)
    if answer["more"]:
        following = args.offset + args.limit
        print(f"\nmore with --offset {following}" if following <= MAX_SEARCH_OFFSET
              else "\nmore: narrow it down (--project, --type, --since, --file)")
    observation_ids = [str(r["id"]) for r in results if r["kind"] == "observation"][:5]
    if team and results:
        # The team database's ids: `show` reads this machine's memory, where they name other rows.
        print("\nthese ids are the team database's: `sessionmem show` reads this machine's memory, not them")
    elif observation_ids:
        print("\nfull records: sessionmem show " + " ".join(observation_ids))
    return 0


def _say_if_unknown(config: ClientConfig, project: str) -> None:
    """On stderr, when ``project`` has no memory at all: the projects that have (a misspelled
    name, or a directory whose project is named otherwise, finds nothing without a word)."""
    # Every project the worker lists (most recently active first), so an older one is not
    # taken for unknown; only the first few are named.
    known = [entry["project"] for entry in call(config, "GET", f"{routes.PROJECTS}?limit={MAX_PAGE}")["projects"]]
    if project not in known:
        listed = ", ".join(known[:PROJECTS_NAMED]) + (", …" if len(known) > PROJECTS_NAMED else "") or "none yet"
        print(f"no memory of project {project!r}; projects with memory: {listed}"
              f" (--project '{ALL_PROJECTS}': all)", file=sys.stderr)


def _observation_id(text: str) -> int:
    """An observation id as the context shows it (``#123``) or bare (``123``)."""
    try:
        number = int(text.removeprefix("#"))
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"not an observation id: {text!r} (a number from 1, like 123 or '#123')")
    return number


def cmd_show(args: argparse.Namespace, config: ClientConfig) -> int:
    answer = call(config, "POST", routes.OBSERVATION_BATCH, {"ids": args.ids})
    if args.json:
        print(json.dumps(answer, indent=2))  # \u-escaped: no control or bidi character reaches a terminal raw
        return 0 if not answer["missing"] else 1
    answer = neutral_deep(answer)
    for row in answer["observations"]:
        origin = _marks(row)
        print(f"#{row['id']}  {_date(row['createdAt'])}  {row['project']}{origin}  session {row['claudeSessionId']}"
              f"  prompt {row['promptNumber']}  {_agent(row)}")
        print(f"  {row['type']}: {row['title']}  ({row['toolName']}, {row['compressor']}"
              f"{', from ' + row['provenance'] if row.get('provenance') else ''})")
        for label, value in (("subtitle", row["subtitle"]), ("narrative", row["narrative"])):
            if value:  # its further lines indented too: none starts a line of its own
                print(f"  {label}: " + value.replace("\n", "\n    "))
        for fact in row["facts"]:
            print(f"  - {fact}")
        for label in ("filesRead", "filesModified", "concepts"):
            if row[label]:
                print(f"  {label}: {', '.join(row[label])}")
        print()
    if answer["missing"]:
        print(f"no observation with id {', '.join(map(str, answer['missing']))}", file=sys.stderr)
        return 1
    return 0


def add_commands(sub: Any, common: Any, client: Any) -> None:
    """Register ``search`` and ``show`` (``client(args)`` gives the command's ClientConfig)."""
    search = sub.add_parser("search", help="search memory: by words, by meaning, or both")
    common(search)
    search.add_argument("query", help="what to look for (plain words; no query syntax)")
    search.add_argument("--project", help="one project (`.`: the current directory's); default all (`*`)")
    search.add_argument("--mode", choices=("hybrid", "fts", "vector"), default="hybrid",
                        help="hybrid (default): words and meaning; fts: words; vector: meaning")
    search.add_argument("--type", help="observation types, comma-separated (bugfix, feature, discovery, ...)")
    search.add_argument("--kind", help="observation, summary, prompt (comma-separated)")
    search.add_argument("--since", help="a date (2026-11-01), Unix seconds or an age (12h, 7d)")
    search.add_argument("--until", help="likewise")
    search.add_argument("--file", help="observations that read or modified this file (a path or its end)")
    search.add_argument("--origin", help="where memories came from: local (this machine), a machine or user name, "
                                         "or user@machine")
    search.add_argument("--agent", choices=AGENTS, help="memories one coding agent made (its sessions'); default all")
    search.add_argument("--limit", type=whole_number(1, MAX_SEARCH_RESULTS), default=10,
                        help=f"results (1-{MAX_SEARCH_RESULTS}, default 10)")
    search.add_argument("--offset", type=whole_number(0, MAX_SEARCH_OFFSET), default=0,
                        help="results to skip (the next page: --offset 10)")
    search.add_argument("--team", action="store_true",
                        help="search the team database itself (every machine's shared projects, pulled here or "
                             "not) instead of this machine's memory; needs database_url")
    search.add_argument("--json", action="store_true", help="the worker's JSON answer")
    search.set_defaults(fn=lambda args: cmd_search(args, client(args)))
    show = sub.add_parser("show", help="full records of observations by id")
    common(show)
    show.add_argument("ids", nargs="+", type=_observation_id,
                      help="observation ids: 123, or '#123' as the context shows them (quoted: # starts a shell comment)")
    show.add_argument("--json", action="store_true", help="the worker's JSON answer")
    show.set_defaults(fn=lambda args: cmd_show(args, client(args)))
