"""The coding agents sessionmem serves, by the name each memory records. Standard library only (hook hot path).

A hook knows which agent runs it (its command line names it); every request it sends
carries that name in :data:`AGENT_FIELD` (the context request as a query parameter),
and the worker records it on the session, so each memory says which agent made it.
A request without the field comes from a Claude Code hook (the only agent before the
field existed). The name is a label, never authority: it is one of :data:`AGENTS` or
the request is refused.
"""

from __future__ import annotations

CLAUDE_CODE = "claude-code"
CODEX = "codex"
GEMINI_CLI = "gemini-cli"
OPENCODE = "opencode"
AGENTS = (CLAUDE_CODE, CODEX, GEMINI_CLI, OPENCODE)
DEFAULT_AGENT = CLAUDE_CODE
# How people call them, for what the viewer, the CLI and the handover show.
AGENT_TITLES = {CLAUDE_CODE: "Claude Code", CODEX: "Codex CLI", GEMINI_CLI: "Gemini CLI", OPENCODE: "OpenCode"}

AGENT_FIELD = "agent"  # in every ingest body, and a query parameter of the context request


def known_agent(name: str) -> bool:
    return name in AGENTS
