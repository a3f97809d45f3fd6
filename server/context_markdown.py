"""The markdown injected at SessionStart, from a :class:`~sessionmem.search.context.ContextPlan`.

Everything is wrapped in ``<sessionmem-context>`` -- the worker strips that tag from
whatever it ingests, so injected memory is never stored again as new memory.
Output stays within a token budget (estimated at four characters a token), filled in
this order: the latest session's summary, the chosen memories (best session first),
then one line for each earlier session; what does not fit is left out whole.

Memories another machine wrote say so: "from bob@laptop" on their session's heading
(or on their own line, when a session holds rows of several origins), on the last
session's heading and on an earlier session's line. This machine's own say nothing.

Stored text is untrusted: every field printed here is neutralized
(:func:`sessionmem.protocol.safe_text.neutral`).
"""

from __future__ import annotations

import time

from sessionmem.protocol.privacy import CONTEXT_TAG
from sessionmem.protocol.safe_text import one_line
from sessionmem.records import SummaryRow
from sessionmem.search.context import ContextLine, ContextPlan, SessionGroup

CHARS_PER_TOKEN = 4
EARLIER_SHARE = 0.2  # of the budget kept for earlier sessions' one-liners, when there are some
FOOTER = ("More: the sessionmem MCP tools (`search`, `timeline`, `get_observations`), or "
          '`sessionmem search "<words>"` and `sessionmem show <id>` in a shell.')


def estimate_tokens(text: str) -> int:
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def _when(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp))


def _ids(ids: list[int]) -> str:
    shown = ", ".join(f"#{i}" for i in ids[-3:])
    # "#54…#72" would read as a range; the ids between are elided, not all of 54 to 72.
    return (f"#{ids[0]}, …, " + shown if len(ids) > 3 else shown) + (f" (×{len(ids)})" if len(ids) > 1 else "")


def _from(origin: str) -> str:
    """The mark of a memory another machine wrote (``""`` for this machine's own)."""
    return f"from {one_line(origin, 80)}" if origin else ""


def _line(line: ContextLine, group_origin: str = "") -> str:
    detail = f" — {one_line(line.detail, 160)}" if line.detail else ""
    origin = f" ({_from(line.origin)})" if line.origin and line.origin != group_origin else ""
    return f"- {_ids(line.ids)} {line.type}: {one_line(line.title, 120)}{origin}{detail}"


def _group_header(group: SessionGroup) -> str:
    about = f" · {one_line(group.request, 100)}" if group.request else ""
    origin = f" · {_from(group.origin)}" if group.origin else ""
    return f"### {_when(group.started_at)}{about}{origin}"


def _summary_lines(summary: SummaryRow) -> list[str]:
    origin = f", {_from(summary.origin)}" if summary.origin else ""
    lines = [f"## Last session ({_when(summary.created_at)}{origin})"]
    for label, text in (("Request", summary.request), ("Completed", summary.completed),
                        ("Learned", summary.learned), ("Investigated", summary.investigated),
                        ("Next steps", summary.next_steps)):
        if text:
            lines.append(f"- **{label}:** {one_line(text, 400)}")
    return lines + [""]


def _earlier_line(summary: SummaryRow) -> str:
    outcome = summary.completed or summary.learned or summary.investigated
    origin = f" · {_from(summary.origin)}" if summary.origin else ""
    return (f"- {_when(summary.created_at)}{origin} · {one_line(summary.request or '(no request)', 100)}"
            + (f" → {one_line(outcome, 160)}" if outcome else ""))


class _Budget:
    def __init__(self, tokens: int) -> None:
        self.left = tokens

    def take(self, lines: list[str]) -> bool:
        cost = sum(estimate_tokens(line) + 1 for line in lines)
        if cost > self.left:
            return False
        self.left -= cost
        return True


def render_context(plan: ContextPlan, *, token_budget: int) -> tuple[str, int]:
    """The injected text (``""`` when there is no memory) and how many observations it names."""
    if plan.summary is None and not plan.groups and not plan.earlier:
        return "", 0
    head = [f"<{CONTEXT_TAG}>", f"# Memory of {one_line(plan.project, 200)}", ""]
    tail = ["", FOOTER, f"</{CONTEXT_TAG}>"]
    budget = _Budget(token_budget)
    budget.take(head + tail)
    summary = _summary_lines(plan.summary) if plan.summary is not None else []
    while summary and not budget.take(summary):
        summary = summary[:-2] + [""] if len(summary) > 2 else []  # drop the least important field
    earlier = ["## Earlier sessions", *map(_earlier_line, plan.earlier)] if plan.earlier else []
    reserve = min(int(token_budget * EARLIER_SHARE), sum(estimate_tokens(line) + 1 for line in earlier))
    budget.left -= reserve

    body: list[str] = []
    named = 0
    if plan.groups:
        title = (f'## Relevant to "{one_line(plan.focus, 80)}"' if plan.focus else "## Recent work")
        if budget.take([title]):
            body.append(title)
            for group in plan.groups:
                header = _group_header(group)
                lines = [_line(line, group.origin) for line in group.lines]
                if not budget.take([header] + lines[:1]):
                    break
                body += [header, lines[0]]
                named += len(group.lines[0].ids)
                for line, text in zip(group.lines[1:], lines[1:]):
                    if not budget.take([text]):
                        break
                    body.append(text)
                    named += len(line.ids)
    budget.left += reserve
    kept_earlier = ["", *earlier[:1]] if earlier and budget.take(earlier[:1]) else []
    for earlier_line in earlier[1:] if kept_earlier else []:
        if not budget.take([earlier_line]):
            break
        kept_earlier.append(earlier_line)
    if len(kept_earlier) <= 2:  # a heading alone says nothing
        kept_earlier = []
    return "\n".join(head + summary + body + kept_earlier + tail), named
