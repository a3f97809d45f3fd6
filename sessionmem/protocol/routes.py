"""The worker's HTTP routes, the field names of ingest bodies, and the words both sides read.

Paths with parameters are written ``{name}``; :func:`path` fills them in for clients,
and the server turns them into its own rule syntax. Field names follow the claude-mem
hook lifecycle reference (camelCase ids, Claude Code's own snake_case tool fields).
The worker's request structs (``sessionmem.server.payloads``) must have exactly the
fields listed in :data:`BODY_FIELDS`; a test checks it.
"""

from __future__ import annotations

# -- ingest: what hooks send ------------------------------------------------------------
INIT = "/api/sessions/init"
OBSERVATIONS = "/api/sessions/observations"
SUMMARIZE = "/api/sessions/summarize"
COMPLETE = "/api/sessions/complete"
INGEST = (INIT, OBSERVATIONS, SUMMARIZE, COMPLETE)
LEGACY_INIT = "/sessions/{session_db_id}/init"  # the reference's path, by database id

# -- control and health ----------------------------------------------------------------
HEALTH = "/api/health"
READINESS = "/api/readiness"
PROCESSING = "/api/processing"
REPLAY = "/api/sessions/{claude_session_id}/replay"
STORAGE = "/api/storage"  # GET: sizes on disk and what holds them
PRUNE = "/api/maintenance/prune"  # POST {"olderThanDays": 30, "vacuum": false}: raw tool data pruned now
EXPORT = "/api/export"  # GET ?project=&since=&after=: a page of exported records, and where the next starts
IMPORT = "/api/import"  # POST {"records": [...]}: exported records stored (idempotent)
EXPORT_FORMAT = "sessionmem-export"  # an export's header names it, and the version of its records
EXPORT_VERSION = 1

# -- reads -------------------------------------------------------------------------------
CONTEXT = "/api/context/inject"
SESSIONS = "/api/sessions"
OBSERVATION_LIST = "/api/observations"
OBSERVATION = "/api/observations/{observation_id}"
SUMMARIES = "/api/summaries"
SEARCH = "/api/search"  # GET ?q=&mode=&source=&project=&kind=&type=&since=&until=&file=&concept=&session=&agent=&limit=&offset=
SEARCH_MODES = ("hybrid", "fts", "vector")  # ?mode= of SEARCH; the first is the default
# ?source= of SEARCH: this machine's memory (the default), or the team database itself (its own ids)
SEARCH_SOURCES = ("local", "team")
TIMELINE = "/api/timeline"  # GET ?anchor=<observation id | kind:id>&before=&after=, or ?q= (and filters)
OBSERVATION_BATCH = "/api/observations/batch"  # POST {"ids": [...]}: full observations, in the order asked
PROJECTS = "/api/projects"  # GET ?limit=&offset=&q=: projects with sessions, the most recently active first
STREAM = "/stream"

# -- team memory (sessionmem.team; docs/team.md) ------------------------------------------
TEAM = "/api/team"  # GET: the sync's status (connected, pushed, pulled, backlog, the share push under way)
# POST {"project": NAME}: the project's memory of this machine copied into the team database (`sessionmem share push`)
TEAM_PUSH = "/api/team/push"

# -- operators ---------------------------------------------------------------------------
DEBUG = "/debug"  # the /debug page for a browser (Accept prefers text/html); the JSON snapshot for anyone else
DEBUG_JSON = "/debug.json"  # the JSON snapshot, whatever the Accept header says
DEBUG_STREAM = "/debug/stream"  # Server-Sent Events: `snapshot`, the JSON snapshot, each second
DEBUG_ACTOR = "/debug/actors/{claude_session_id}"  # a session actor's statistics, recent messages and errors

# -- web pages (sessionmem.web) ----------------------------------------------------------
VIEWER = "/"  # the memory viewer
ASSETS = "/assets/{name}"  # the pages' scripts and styles, served from the package

# -- access (sessionmem.protocol.auth) ---------------------------------------------------
LOGIN_CODE = "/api/auth/login-code"  # POST, with the token: a single-use code for a browser
LOGIN = "/login"  # GET ?code=...&next=/path: trades the code for a page login's cookie
LOGOUT = "/logout"  # POST: ends the page login of the cookie sent

# -- ingest body fields ------------------------------------------------------------------
# "agent": the agent that sent the event (protocol/agents.py, AGENT_FIELD); absent: Claude Code.
SESSION_FIELDS = ("claudeSessionId", "cwd", "project", "idempotencyKey", "occurredAt", "agent")
BODY_FIELDS = {
    INIT: SESSION_FIELDS + ("prompt", "projectKey", "shareFile"),
    OBSERVATIONS: SESSION_FIELDS + ("tool_name", "tool_input", "tool_response", "tool_use_id", "agent_id",
                                    "agent_type", "hook_event_name", "error", "failed"),
    # "compacting": true on a PreCompact's checkpoint (the agent compacts the session's context next).
    SUMMARIZE: SESSION_FIELDS + ("last_user_message", "last_assistant_message", "compacting"),
    COMPLETE: SESSION_FIELDS + ("reason",),
}
IDEMPOTENCY_KEY = "idempotencyKey"  # an event with a key seen before is answered as a duplicate, not stored
OCCURRED_AT = "occurredAt"  # when the event happened, Unix seconds (backfill); absent: when it arrived
PROJECT_KEY = "projectKey"  # a prompt's repository between machines: its normalized git remote (protocol/git_remote.py)
SHARE_FILE_FIELD = "shareFile"  # true: the prompt's repository root holds the team opt-in file

# -- replies -----------------------------------------------------------------------------
READY = "ready"  # GET /api/readiness: 200 {"status": "ready"}
STARTING = "starting"  # ... or 503 whose error says "starting" while the journal is replayed
RETRY_AFTER = "retry-after"  # on a 503: seconds to wait before sending again
CONTEXT_COUNT_HEADER = "x-sessionmem-observations"  # observations in the injected context
# On the context answer, the first time a repository that commits the share file asks (its SessionStart
# sends ``projectKey`` and ``shareFile=1`` in the query): the team database it asks to share with,
# percent-encoded. The hook tells the user, who alone decides (docs/team.md#sharing-and-consent).
SHARE_REQUEST_HEADER = "x-sessionmem-share-request"
# A line the user must see once (`auto` moved them onto a paid model): SessionStart adds it to its system message.
NOTICE_HEADER = "x-sessionmem-notice"

# -- the MCP server (``sessionmem mcp``) -------------------------------------------------
MCP_SERVER_NAME = "sessionmem"  # its name in Claude Code's mcpServers (plugin/.mcp.json says the same)
# Claude Code calls its tools ``mcp__<server>__<tool>`` (user scope, --mcp-config) or
# ``mcp__plugin_<plugin>_<server>__<tool>`` (the plugin). Their use is not recorded: memory
# read back must not become new memory (as an injected <sessionmem-context> is stripped).
OWN_TOOL_PREFIXES = (f"mcp__{MCP_SERVER_NAME}__", f"mcp__plugin_sessionmem_{MCP_SERVER_NAME}__")


def path(template: str, **values: object) -> str:
    """``template`` with its ``{name}`` parameters filled in, percent-encoded."""
    if not values:
        return template
    from urllib.parse import quote  # only clients with parameters pay for it

    return template.format(**{name: quote(str(value), safe="") for name, value in values.items()})
