"""The markdown injected at SessionStart: the latest summary plus a compact index.

Everything is wrapped in ``<sessionmem-context>`` -- the worker strips that tag from
whatever it ingests, so injected memory is never stored again as new memory.
Output stays within a token budget (estimated at four characters a token); the
newest observations are kept first.

Stored text is untrusted (it came from tool output, web pages, files): every field
printed here is neutralized (:func:`neutral`) -- our tags in any spelling are removed,
so nothing can close the wrapper early and speak outside it, and control and
bidirectional-override characters are dropped, so nothing hides or reorders what a
reader of the context sees.
"""

from __future__ import annotations

import re
import time

from sessionmem.protocol.privacy import CONTEXT_TAG, strip_private
from sessionmem.records import ObservationRow, SummaryRow

CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def _when(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp))


# C0 and C1 controls (whitespace aside), and the characters that reorder or hide text:
# bidirectional embeddings, overrides and isolates, marks, and zero-width joiners.
_INVISIBLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")


def neutral(text: str) -> str:
    """Stored text made safe to print inside the wrapper (see the module docstring)."""
    return strip_private(_INVISIBLE.sub("", str(text)))


def _one_line(text: str, limit: int) -> str:
    text = " ".join(neutral(text).split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render_context(
    project: str,
    observations: list[ObservationRow],
    summary: SummaryRow | None,
    *,
    token_budget: int,
    base_url: str,
) -> str:
    """Build the injected context; ``observations`` newest first."""
    if not observations and summary is None:
        return ""
    head = [f"<{CONTEXT_TAG}>", f"# Memory of {_one_line(project, 200)}", ""]
    if summary is not None:
        head.append(f"## Last session summary ({_when(summary.created_at)})")
        for label, key in (("Request", "request"), ("Completed", "completed"), ("Learned", "learned"),
                           ("Investigated", "investigated"), ("Next steps", "next_steps")):
            if getattr(summary, key):
                head.append(f"- **{label}:** {_one_line(getattr(summary, key), 400)}")
        head.append("")
    tail = ["", f"Details of an observation: `curl {base_url}/api/observations/<id>`", f"</{CONTEXT_TAG}>"]

    used = estimate_tokens("\n".join(head + tail))
    rows: list[str] = []
    if observations:
        header = ["## Recent observations (newest first)", "| id | time | type | title |", "|---|---|---|---|"]
        used += estimate_tokens("\n".join(header))
        for observation in observations:
            row = (f"| #{observation.id} | {_when(observation.created_at)} | {observation.type} | "
                   f"{_one_line(observation.title, 120)} |")
            cost = estimate_tokens(row) + 1
            if used + cost > token_budget:
                break
            rows.append(row)
            used += cost
        if rows:
            rows = header + rows
    if used > token_budget and not rows:
        # Even the summary alone is over budget: keep the frame, trim the summary lines.
        while len(head) > 3 and estimate_tokens("\n".join(head + tail)) > token_budget:
            head.pop(-2 if head[-1] == "" else -1)
    return "\n".join(head + rows + tail)
