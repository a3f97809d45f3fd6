"""``sessionmem mcp``: a stdio MCP server with three tools over the worker's memory.

Built on the official SDK's :class:`~mcp.server.mcpserver.MCPServer`; each tool is a
typed function whose parameters (pydantic ``Field`` s with descriptions and limits)
become its JSON schema. The tools follow claude-mem's progressive disclosure, cheapest
first, and say so in their descriptions so the model uses them in that order:

=====================  =====================================================  ==================
tool                   answers                                                cost
=====================  =====================================================  ==================
``search``             a compact index: one line a hit (id, date, type,       ~30 tokens a hit
                       title, files, a few words)
``timeline``           the same lines for what happened before and after      ~30 tokens a line
                       one hit, in order
``get_observations``   everything stored of the observations asked for        ~150-500 each
=====================  =====================================================  ==================

The project filter defaults to the project of the server's working directory (Claude
Code starts MCP servers in the session's directory), computed as the hooks compute it
(:func:`~sessionmem.protocol.project.project_of`); ``project="*"`` searches them all.

This module's annotations are evaluated (no ``from __future__ import annotations``):
the SDK reads them at run time to build each tool's schema.

Error handling:
    Bad arguments (the schema's, one the tool does not take, or the worker's own 400
    naming the parameter), an
    unknown id, and a worker that cannot be reached or started are tool errors
    (``isError``) with a message for the model; anything unexpected is a tool error
    too (the SDK's), logged to stderr. The server itself never stops for a tool call.
"""

import inspect
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, InputRequiredResult, Tool, ToolAnnotations
from pydantic import Field, Strict

from sessionmem import __version__
from sessionmem.mcpserver import render
from sessionmem.mcpserver.client import MemoryClient, MemoryRefused, MemoryUnavailable
from sessionmem.protocol.client_settings import ClientConfig
from sessionmem.protocol.framing import TOOLS_NOTE
from sessionmem.protocol.limits import (
    MAX_BATCH_IDS,
    MAX_QUERY_CHARS,
    MAX_SEARCH_OFFSET,
    MAX_SEARCH_RESULTS,
    MAX_TIMELINE_SIDE,
    printable_line,
)
from sessionmem.protocol.project import ALL_PROJECTS
from sessionmem.protocol.routes import MCP_SERVER_NAME, SEARCH_MODES, SEARCH_SOURCES
from sessionmem.records import DOCUMENT_KINDS, OBSERVATION_TYPES, AgentName, ObservationType

P = TypeVar("P")
# An integer argument must be a JSON number: pydantic's lax mode takes `true` as 1 and "5" as 5, so
# get_observations(ids=[true]) would answer observation 1.
Integer = Annotated[int, Strict()]

DEFAULT_LIMIT = 20
READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)

# Made from the tuples, so the tools' schemas follow them; a type checker reads these as Any.
Kind = Literal[DOCUMENT_KINDS]  # type: ignore[valid-type]
Mode = Literal[SEARCH_MODES]  # type: ignore[valid-type]
Source = Literal[SEARCH_SOURCES]  # type: ignore[valid-type]
Moment = Annotated[str | None, Field(
    max_length=64, description="A date (2026-11-01, 2026-11-01T14:30; local time), Unix seconds, "
                               "or an age: 30m, 12h, 7d, 2w ago.")]


def instructions(project: str) -> str:
    return (
        f"sessionmem is the memory of past Claude Code sessions: what was done, found and decided, "
        f"compressed into observations (one per tool use), session summaries and prompts. Use it "
        f"before re-investigating something that may have been done before. Work from cheap to "
        f"expensive: `search` for a compact index of hits, `timeline` for what happened around one, "
        f"`get_observations` for the full records of the few that matter. The current project is "
        f"{printable_line(project)!r}; pass project=\"*\" to search all projects. {TOOLS_NOTE}")


class StrictToolServer(MCPServer):
    """An :class:`MCPServer` whose tools refuse arguments they do not take.

    The SDK validates the arguments a tool takes and drops any others: a misspelt
    ``projet="*"`` searched the current project as if nothing was asked, and the model
    was never told. Here an unknown argument is a tool error naming it and listing the
    tool's own, and each tool's input schema says ``additionalProperties: false`` so a
    client can see it before calling.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._parameters: dict[str, tuple[str, ...]] = {}

    # The SDK's options are passed on as they are, not repeated here.
    def add_tool(self, fn: Callable[..., Any], name: str | None = None, **kwargs: Any) -> None:  # type: ignore[override]
        super().add_tool(fn, name=name, **kwargs)
        self._parameters[name or fn.__name__] = tuple(inspect.signature(fn).parameters)

    async def list_tools(self) -> list[Tool]:
        return [tool.model_copy(update={"input_schema": {**tool.input_schema, "additionalProperties": False}})
                for tool in await super().list_tools()]

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
                        ) -> CallToolResult | InputRequiredResult:
        taken = self._parameters.get(name)
        unknown = sorted(set(arguments) - set(taken)) if taken is not None else []
        if unknown:
            listed = ", ".join(printable_line(argument[:64]) for argument in unknown[:5])
            raise ToolError(f"{name} takes no argument {listed}; its arguments are: {', '.join(taken or ())}")
        return await super().call_tool(name, arguments, context)


def _project_param(project: str | None, default: str) -> dict[str, str]:
    """The ``project`` query parameter: the default project, none for ``*``, or the one named."""
    chosen = default if project is None else project.strip()
    return {} if chosen in (ALL_PROJECTS, "") else {"project": chosen}


def _scope(params: dict[str, str | int]) -> str:
    scope = f"project {printable_line(str(params['project']))}" if "project" in params else "all projects"
    return f"{scope} of the team database" if params.get("source") == "team" else scope


def build_server(client: MemoryClient, default_project: str) -> StrictToolServer:
    """The MCP server with its three tools, asking ``client``; ``default_project`` is searched unless told otherwise."""
    server = StrictToolServer(MCP_SERVER_NAME, version=__version__, instructions=instructions(default_project),
                              log_level="WARNING")
    search = _search_tool(client, default_project)
    timeline = _timeline_tool(client, default_project)
    get_observations = _get_observations_tool(client)
    server.add_tool(search, title="Search memory", annotations=READ_ONLY, structured_output=False, description=(
        f"Search the memory of past Claude Code sessions (project {printable_line(default_project)!r} unless "
        f"`project` says otherwise) by words and meaning. Returns a compact index, one line a hit: "
        f"`id | date | type | title [files] — snippet`; an observation's id is a number, other kinds are "
        f"`summary:3`, `prompt:7`. Start here: it is cheap. Then call `get_observations` with the ids that "
        f"matter for their full records (facts, narrative, files), or `timeline` with one id for what "
        f"happened before and after it. `source=\"team\"` searches the team database instead (every machine's "
        f"shared projects), for reading the hits it lists only."))
    server.add_tool(timeline, title="Timeline around a memory", annotations=READ_ONLY, structured_output=False,
                    description=(
        "What happened around one point of past work, oldest first, in the compact line format of `search` "
        "(the anchor marked `>`, a line where a session or a prompt begins). Give `anchor` (an id from "
        "`search`) or `query` (its best hit becomes the anchor). Use `get_observations` for full records."))
    server.add_tool(get_observations, title="Full observations", annotations=READ_ONLY, structured_output=False,
                    description=(
        f"Full records of past observations by id (up to {MAX_BATCH_IDS}): title, type, date, session, "
        f"tool, subtitle, narrative, facts, files read and modified, concepts. Costs far more than a "
        f"`search` line: ask only for the ids you need, as `search` or `timeline` listed them."))
    return server


async def _ask(call: Callable[[P], Awaitable[dict[str, Any]]], params: P) -> dict[str, Any]:
    """``call(params)``; the worker's refusal or absence as a tool error the model reads."""
    try:
        return await call(params)
    except (MemoryRefused, MemoryUnavailable) as exc:
        raise ToolError(str(exc)) from None


def _search_tool(client: MemoryClient, default_project: str) -> Callable[..., Awaitable[str]]:
    """The ``search`` tool: its parameters are the schema the model reads (``default_project`` named in them)."""

    async def search(
        query: Annotated[str, Field(min_length=1, max_length=MAX_QUERY_CHARS,
                                    description="What to look for: words, a question, or the meaning of what was "
                                                "done (e.g. 'why did the login test fail').")],
        project: Annotated[str | None, Field(
            max_length=1000, description=f"Project to search. Default: the current project ({default_project!r}). "
                                         f"'*' searches every project.")] = None,
        kinds: Annotated[list[Kind] | None, Field(
            max_length=len(DOCUMENT_KINDS), description="What to search: observations (one per tool use), "
                                                        "session summaries, user prompts. Default: all three.")] = None,
        types: Annotated[list[ObservationType] | None, Field(
            max_length=len(OBSERVATION_TYPES), description="Only observations of these types.")] = None,
        file: Annotated[str | None, Field(
            max_length=4096, description="Only observations that read or modified this file (a path, or its end: "
                                         "'src/app.py').")] = None,
        concept: Annotated[str | None, Field(max_length=200, description="Only observations tagged with this "
                                                                         "concept (e.g. 'gotcha').")] = None,
        session: Annotated[str | None, Field(max_length=256, description="Only this Claude session id.")] = None,
        origin: Annotated[str | None, Field(
            max_length=300, description="Only memories from this origin: 'local' (this machine's own), a "
                                        "machine or user name, or user@machine as hits show it "
                                        "('from bob@laptop').")] = None,
        agent: Annotated[AgentName | None, Field(
            description="Only memories one coding agent made (its sessions'): claude-code, codex, gemini-cli or "
                        "opencode. Default: every agent's.")] = None,
        since: Moment = None,
        until: Moment = None,
        mode: Annotated[Mode, Field(description="hybrid: words and meaning (best); fts: exact words only; "
                                                "vector: meaning only.")] = SEARCH_MODES[0],
        limit: Annotated[Integer, Field(ge=1, le=MAX_SEARCH_RESULTS, description="Hits per page.")] = DEFAULT_LIMIT,
        offset: Annotated[Integer, Field(ge=0, le=MAX_SEARCH_OFFSET, description="Hits to skip (next page).")] = 0,
        source: Annotated[Source, Field(
            description="local: this machine's memory (default). team: the team database itself, every shared "
                        "project of every machine (when one is configured); its ids are not this machine's, so "
                        "`get_observations` and `timeline` cannot read them.")] = SEARCH_SOURCES[0],
    ) -> str:
        params: dict[str, str | int] = {"q": query, "mode": mode, "limit": limit, "offset": offset,
                                        **_project_param(project, default_project)}
        optional = {"kind": ",".join(kinds or ()), "type": ",".join(types or ()), "file": file,
                    "concept": concept, "session": session, "origin": origin, "agent": agent, "since": since,
                    "until": until,
                    "source": source if source != SEARCH_SOURCES[0] else None}
        params.update({name: value for name, value in optional.items() if value})
        return render.search_index(await _ask(client.search, params), scope=_scope(params))

    return search


def _timeline_tool(client: MemoryClient, default_project: str) -> Callable[..., Awaitable[str]]:
    """The ``timeline`` tool: around an id from search, or around the best hit of a query."""

    async def timeline(
        anchor: Annotated[Integer | str | None, Field(
            description="The hit to center on: an observation id (42) or kind:id (summary:3, prompt:7), as "
                        "search shows them.")] = None,
        query: Annotated[str | None, Field(
            max_length=MAX_QUERY_CHARS, description="Instead of an anchor: center on the best search hit for "
                                                    "this query.")] = None,
        project: Annotated[str | None, Field(
            max_length=1000, description=f"With query: the project to search (default {default_project!r}; "
                                         f"'*' for all).")] = None,
        before: Annotated[Integer, Field(ge=0, le=MAX_TIMELINE_SIDE, description="Entries before the anchor.")] = 5,
        after: Annotated[Integer, Field(ge=0, le=MAX_TIMELINE_SIDE, description="Entries after the anchor.")] = 5,
    ) -> str:
        params: dict[str, str | int] = {"before": before, "after": after}
        if anchor is not None and str(anchor).strip():
            params["anchor"] = str(anchor).strip()
        elif query is not None and query.strip():
            params.update(q=query, **_project_param(project, default_project))
        else:
            raise ToolError("give an anchor (an id from search: 42, summary:3) or a query")
        return render.timeline_text(await _ask(client.timeline, params))

    return timeline


def _get_observations_tool(client: MemoryClient) -> Callable[..., Awaitable[str]]:
    """The ``get_observations`` tool: full records by id."""

    async def get_observations(
        ids: Annotated[list[Annotated[Integer, Field(ge=1, le=2**63 - 1)]], Field(
            min_length=1, max_length=MAX_BATCH_IDS,
            description="Observation ids, as search and timeline show them (plain numbers).")],
    ) -> str:
        reply = await _ask(client.observations, ids)
        if not reply["observations"]:
            raise ToolError(f"no observation with id {', '.join(map(str, reply['missing']))} "
                            f"(ids come from search or timeline)")
        return render.observation_records(reply)

    return get_observations


def run(config: ClientConfig, project: str) -> None:
    """Serve MCP on stdin/stdout until the client closes it."""
    build_server(MemoryClient(config), project).run("stdio")
