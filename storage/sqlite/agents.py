"""A row's agent in SQL: the agent of the session that made it (``sessions.agent``, schema v11).

Observations, summaries and prompts do not repeat their session's agent: every read that
shows a row joins its session already (for its Claude session id) and selects ``s.agent``
beside it, and a read a filter narrows adds :func:`agent_condition`. Measured on 100,000
observations in 2,000 sessions (``bench/agent_filter.py``): a search's 400 candidates are checked
through their sessions in 0.2 to 0.4 ms (a column of its own: 0.03 to 0.2 ms), and the newest 50
of an agent with a tenth or more of the rows are found in 0.2 to 0.6 ms; only an agent with almost
no rows makes the newest-first walk read every row of the list (3 ms for a project of 5,000, 18 ms
for all 100,000). A copy of the agent on observations, summaries and prompts, kept on every write,
import and pull, is not worth those milliseconds.
"""

from __future__ import annotations

from typing import Any


def agent_condition(alias: str, agent: str | None, params: dict[str, Any]) -> str:
    """The condition that the row aliased ``alias`` (with a ``session_db_id``) was made in a session of
    ``agent`` (named parameter ``agent`` added to ``params``); ``"1"`` when ``agent`` is ``None``.

    The unary ``+`` keeps SQLite off the ``session_db_id`` index: driven by it, a list of the
    newest rows of a common agent gathers and sorts all of them first (112 ms for 90,000
    rows instead of 0.4 ms walking newest first).
    """
    if agent is None:
        return "1"
    params["agent"] = agent
    return f"+{alias}.session_db_id IN (SELECT id FROM sessions WHERE agent = :agent)"
