"""The MCP server (``sessionmem mcp``): Claude searches its own memory through three tools.

It talks to the worker over HTTP only, through :mod:`sessionmem.protocol`, like every
other client (an import-linter contract keeps it away from the worker's internals).
Installed as ``sessionmem.mcpserver``: a top-level folder named ``mcp/`` would shadow
the SDK's own ``mcp`` package whenever Python runs from the repository root.
"""
