"""The markdown injected at SessionStart, from a :class:`~sessionmem.search.context.ContextPlan`.

Framed as recalled data (:mod:`sessionmem.protocol.framing`): wrapped in
``<sessionmem-context>`` -- the worker strips that tag from whatever it ingests, so injected
memory is never stored again as new memory -- and a heading and the preamble before the first
memory say, in plain words, that what follows is quoted data from earlier sessions, not
instructions. Output stays within a token budget (estimated at four characters a token), filled
in this order: after a compaction, the session's own work so far; the latest session's summary,
the chosen memories (best session first), then one line for each earlier session; what does not
fit is left out whole.

Memories another machine wrote say so, "from bob@laptop, unverified"
(:func:`~sessionmem.protocol.framing.from_origin`): on their session's heading (or on their own
line, when a session holds rows of several origins), on the last session's heading and on an
earlier session's line. This machine's own say nothing. When the last session is another
machine's, its next steps are labelled as that machine's, never as this user's. A flagged memory
is marked on its line.

Memories another coding agent made than the one asking (``agent``: the SessionStart's, Claude
Code when it names none) say which, "(Codex CLI)" (:func:`~sessionmem.protocol.framing.by_agent`):
on their session's heading, on the last session's heading and on an earlier session's line (a
session is one agent's, so its lines need no mark of their own). The asking agent's own say nothing.

Stored text is untrusted: every field printed here is neutralized and on one line
(:func:`sessionmem.protocol.safe_text.one_line`), so none of it starts a line of its own.
"""

from __future__ import annotations

import msgspec

from sessionmem.protocol.agents import DEFAULT_AGENT
from sessionmem.protocol.framing import (
    FRAME_CLOSE,
    UNVERIFIED,
    by_agent,
    context_head,
    from_origin,
    marks,
    origin_label,
)
from sessionmem.protocol.instructions import withhold
from sessionmem.protocol.safe_text import local_time, one_line
from sessionmem.records import OBSERVATION, SUMMARY, Provenance, SummaryRow
from sessionmem.search.context import ContextLine, ContextPlan, SessionGroup, SessionState

CHARS_PER_TOKEN = 4
HEADING_READ = 300  # characters of a session's first prompt read for its heading (which shows 100)
EARLIER_SHARE = 0.2  # of the budget kept for earlier sessions' one-liners, when there are some
FOOTER = ("More: the sessionmem MCP tools (`search`, `timeline`, `get_observations`), or "
          '`sessionmem search "<words>"` and `sessionmem show <id>` in a shell.')


def estimate_tokens(text: str) -> int:
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def _when(timestamp: float) -> str:
    return local_time(timestamp)


def _ids(ids: list[int]) -> str:
    shown = ", ".join(f"#{i}" for i in ids[-3:])
    # "#54…#72" would read as a range; the ids between are elided, not all of 54 to 72.
    return (f"#{ids[0]}, …, " + shown if len(ids) > 3 else shown) + (f" (×{len(ids)})" if len(ids) > 1 else "")


def _line(line: ContextLine, group_origin: str = "") -> str:
    detail = f" — {one_line(line.detail, 160)}" if line.detail else ""
    marked = marks(line.origin if line.origin != group_origin else "", line.flagged)
    return f"- {_ids(line.ids)} {line.type}: {one_line(line.title, 120)}{f' ({marked})' if marked else ''}{detail}"


IMPORTED = "from an imported file"


def _agent_mark(agent: str, asking: str) -> str:
    """`` (Codex CLI)`` after a session's time when another agent than ``asking`` made it, else nothing."""
    mark = by_agent(agent, asking)
    return f" ({mark})" if mark else ""


def _group_header(group: SessionGroup, asking: str) -> str:
    # The session's first prompt: an imported or a pulled session's is anyone's, and a heading has no flag
    # of its own to mark it, so an order there is withheld (the prompt itself is stored, and flagged).
    about = f" · {one_line(withhold(group.request[:HEADING_READ])[0], 100)}" if group.request else ""
    origin = f" · {from_origin(group.origin)}" if group.origin else ""
    return f"### {_when(group.started_at)}{_agent_mark(group.agent, asking)}{about}{origin}"


def _summary_lines(summary: SummaryRow, asking: str) -> list[str]:
    """The last session's summary; another machine's, or an imported file's, says whose its next steps are."""
    imported = not summary.origin and summary.provenance == Provenance.IMPORT
    marked = "; ".join(mark for mark in (by_agent(summary.agent, asking), marks(summary.origin, summary.flagged),
                                         IMPORTED if imported else "") if mark)
    lines = [f"## Last session ({_when(summary.created_at)}{f', {marked}' if marked else ''})"]
    # Another machine's next steps are its user's (or anyone's who wrote the row), not this user's; a file's
    # whoever's wrote it.
    next_steps = (f"Next steps noted on {origin_label(summary.origin)} ({UNVERIFIED})" if summary.origin
                  else f"Next steps noted in an imported file ({UNVERIFIED})" if imported else "Next steps")
    for label, text in (("Request", summary.request), ("Completed", summary.completed),
                        ("Learned", summary.learned), ("Investigated", summary.investigated),
                        (next_steps, summary.next_steps)):
        if text:
            lines.append(f"- **{label}:** {one_line(text, 400)}")
    return lines + [""]


def _state_fields(state: SessionState) -> list[str]:
    """A compacted session's own work so far: its heading and its fields (where it stands follows, a line
    an observation)."""
    summary = state.summary
    # A checkpoint written from instruction-like text says so, as the last session's summary does.
    marked = marks("", summary.flagged) if summary is not None else ""
    lines = [f"## This session so far (from before its conversation was compacted{f'; {marked}' if marked else ''})"]
    for label, text in (("Request", state.request), ("Latest request", state.latest_request),
                        ("Completed", summary.completed if summary else ""),
                        ("Learned", summary.learned if summary else ""),
                        ("Next steps", summary.next_steps if summary else ""),
                        ("Also changed", ", ".join(state.files_changed))):
        if text:
            lines.append(f"- **{label}:** {one_line(text, 400)}")
    return lines


def _earlier_line(summary: SummaryRow, asking: str) -> str:
    outcome = summary.completed or summary.learned or summary.investigated
    marked = marks(summary.origin, summary.flagged)
    return (f"- {_when(summary.created_at)}{_agent_mark(summary.agent, asking)}{f' · {marked}' if marked else ''} · "
            f"{one_line(summary.request or '(no request)', 100)}" + (f" → {one_line(outcome, 160)}" if outcome else ""))


class _Budget:
    def __init__(self, tokens: int) -> None:
        self.left = tokens

    def take(self, lines: list[str]) -> bool:
        cost = sum(estimate_tokens(line) + 1 for line in lines)
        if cost > self.left:
            return False
        self.left -= cost
        return True


class RenderedContext(msgspec.Struct, frozen=True):
    text: str  # "" when there is no memory
    told: list[tuple[str, int]]  # the memories it names, (kind, row id): observations and summaries
    observations: int  # observations it names


def render_context(plan: ContextPlan, *, token_budget: int, agent: str = DEFAULT_AGENT) -> tuple[str, int]:
    """The injected text (``""`` when there is no memory) and how many observations it names."""
    rendered = render_handover(plan, token_budget=token_budget, agent=agent)
    return rendered.text, rendered.observations


def render_handover(plan: ContextPlan, *, token_budget: int, agent: str = DEFAULT_AGENT) -> RenderedContext:
    """The injected text and the memories it tells (:class:`~sessionmem.search.told.ToldLedger` records them),
    for a session of ``agent``: what another agent made is marked as that agent's."""
    if plan.summary is None and not plan.groups and not plan.earlier and plan.own is None:
        return RenderedContext("", [], 0)
    told: list[tuple[str, int]] = []
    head = context_head(plan.project)
    tail = ["", FOOTER, FRAME_CLOSE]
    budget = _Budget(token_budget)
    budget.take(head + tail)
    own: list[str] = []
    named = 0
    if plan.own is not None:
        fields, lines = _state_fields(plan.own), [_line(line) for line in plan.own.lines]
        while lines and not budget.take(fields + lines + [""]):
            lines.pop()  # from the end: where it stands, then the fields
        while not lines and len(fields) > 1 and not budget.take(fields + [""]):
            fields.pop()
        if lines or len(fields) > 1:
            own = fields + lines + [""]
            if plan.own.summary is not None:
                told.append((SUMMARY, plan.own.summary.id))
            for line in plan.own.lines[: len(lines)]:
                named += len(line.ids)
                told += [(OBSERVATION, row_id) for row_id in line.ids]
    summary = _summary_lines(plan.summary, agent) if plan.summary is not None else []
    while summary and not budget.take(summary):
        summary = summary[:-2] + [""] if len(summary) > 2 else []  # drop the least important field
    if summary and plan.summary is not None:
        told.append((SUMMARY, plan.summary.id))
    earlier = ["## Earlier sessions", *(_earlier_line(row, agent) for row in plan.earlier)] if plan.earlier else []
    reserve = min(int(token_budget * EARLIER_SHARE), sum(estimate_tokens(line) + 1 for line in earlier))
    budget.left -= reserve

    body: list[str] = []
    if plan.groups:
        title = (f'## Relevant to "{one_line(plan.focus, 80)}"' if plan.focus
                 else "## Where the work stands" if plan.ranking == "files" else "## Recent work")
        if budget.take([title]):
            body.append(title)
            for group in plan.groups:
                header, first = _group_header(group, agent), _line(group.lines[0], group.origin)
                if not budget.take([header, first]):
                    break
                body += [header, first]
                named += len(group.lines[0].ids)
                told += [(OBSERVATION, row_id) for row_id in group.lines[0].ids]
                for line in group.lines[1:]:
                    text = _line(line, group.origin)  # written when it may fit: each line is neutralized (~7 µs)
                    if not budget.take([text]):
                        break
                    body.append(text)
                    named += len(line.ids)
                    told += [(OBSERVATION, row_id) for row_id in line.ids]
    budget.left += reserve
    kept_earlier = ["", *earlier[:1]] if earlier and budget.take(earlier[:1]) else []
    for earlier_line in earlier[1:] if kept_earlier else []:
        if not budget.take([earlier_line]):
            break
        kept_earlier.append(earlier_line)
    if len(kept_earlier) <= 2:  # a heading alone says nothing
        kept_earlier = []
    told += [(SUMMARY, summary_row.id) for summary_row in plan.earlier[: max(0, len(kept_earlier) - 2)]]
    return RenderedContext("\n".join(head + own + summary + body + kept_earlier + tail), told, named)
