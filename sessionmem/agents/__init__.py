"""Wiring sessionmem into coding agents other than Claude Code (whose wiring is :mod:`sessionmem.install`).

One module an agent: where its configuration lives, which of its hook events run the
hook entry (and with which agent name), how its MCP servers are registered, and how
``doctor`` sees that it all works. What the hooks then send is the one hook contract
(:mod:`sessionmem.protocol.agent_payloads` translates an agent's payload into it).
"""
