"""The team routes of the worker's HTTP API, for the server and the command line alike (standard library only).

``GET`` :data:`TEAM`: the sync's status (connected, pushed, pulled, backlog, the share push
under way); ``POST`` :data:`TEAM_PUSH` ``{"project": NAME}``: copy the project's memory of this
machine into the team database (``sessionmem share push``). docs/http-api.md describes both.
"""

from __future__ import annotations

TEAM = "/api/team"
TEAM_PUSH = "/api/team/push"
