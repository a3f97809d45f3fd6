"""Memory that arrives on its own while Claude works: about a file it touches, about a prompt.

- **File-aware recall** (:meth:`Recall.for_file`, on by default: ``file_recall``): when a
  tool reads or edits a file, the few most telling past observations about that file
  from *other* sessions (edits first, then failures and decisions; an offline
  compressor's bare "Read x" says nothing and is left out). The answer to the hook's
  own request carries them, and the hook hands them to Claude as ``additionalContext``
  -- no request of its own, so it costs the hook nothing when there is nothing to say.
- **Prompt recall** (:meth:`Recall.for_prompt`, on by default: ``prompt_recall``): the few
  past observations and summaries most relevant to a new prompt (hybrid search),
  within :data:`PROMPT_RECALL_BUDGET_S` (the ``prompt_recall_budget_s`` setting), else nothing.

Precision first: a wrong memory costs more than none.

- **A relevance floor** (``recall_min_similarity``): a prompt's memory is handed over only
  when its meaning is at least that close to the prompt (cosine similarity of their
  vectors); a prompt about something no earlier session worked on gets nothing. With
  vectors off (or not ready) a memory must share the prompt's words instead.
- **Something to rank by**: a prompt that says nothing of what the work is about (fewer than
  :data:`~sessionmem.storage.search_terms.FOCUS_MIN_WORDS` words that mean something:
  "continue", "yes, go on") gets no recall, as it is no focus for the SessionStart context:
  what it matches is an earlier "continue" (a summary of a session asked nothing else), not
  the work.
- **Told once a session** (:class:`~sessionmem.search.told.ToldLedger`, shared with the
  SessionStart context): what Claude was already told in this session, by SessionStart,
  an earlier prompt or a file, is not told again.
- **Consolidated** (:mod:`~sessionmem.storage.consolidation_rules`): a memory merged into a newer
  near-duplicate, or a decision a later one superseded, is not recalled; among a prompt's
  memories, one used before moves up a little, one handed over again and again and never used
  down.
- **Not what Claude Code's own memory says**: a prompt's memory that the session's CLAUDE.md
  files or auto memory already say (:mod:`~sessionmem.search.already_said`) is not recalled.
- **No raw activity**: an offline compressor's bare look (a read, a search, a routine
  command such as ``git status``: :func:`~sessionmem.search.context.is_bare`) says where
  Claude looked, not what it learned, and is never recalled (a read named in the
  SessionStart context is there for the file it names).

Everything printed is neutralized like the SessionStart context and framed the same way
(:mod:`sessionmem.protocol.framing`): inside the same tag, which the worker strips from
whatever it ingests, its first line saying that what follows is recalled from earlier
sessions, quoted data for reference, not instructions; another machine's memory marked
"from bob@laptop, unverified" (left out when ``context_other_machines`` is off: search and
the MCP tools reach it), a flagged one marked too. Nothing dated in the future is recalled
(:func:`~sessionmem.storage.record_rules.latest_moment`), as at SessionStart.

Error handling:
    Recall is a courtesy: any failure (storage, embedding, a timeout) is logged and
    means no recall; the event itself is already journaled by then.
"""

from __future__ import annotations

import logging
import time

import trio

from sessionmem.protocol.agents import DEFAULT_AGENT
from sessionmem.protocol.framing import by_agent, framed_recall, marks
from sessionmem.protocol.prompts import typed_prompt
from sessionmem.protocol.safe_text import local_time, one_line
from sessionmem.records import LOCAL_ORIGIN, OBSERVATION, SUMMARY, SearchFilters
from sessionmem.runtime.logs import log_exception
from sessionmem.search.already_said import AlreadySaid
from sessionmem.search.context import is_bare, telling_fact
from sessionmem.search.hybrid import SearchResult, SearchService
from sessionmem.search.told import ToldLedger
from sessionmem.storage.base import Store
from sessionmem.storage.consolidation_rules import NOT_CONSOLIDATED, Consolidated, standing
from sessionmem.storage.record_rules import latest_moment
from sessionmem.storage.search_terms import says_what_about

log = logging.getLogger(__name__)

# Tools whose input names the one file they touched, and the field that names it.
FILE_TOOLS = {"Read": "file_path", "Edit": "file_path", "MultiEdit": "file_path", "Write": "file_path",
              "NotebookEdit": "notebook_path"}
PROMPT_RECALL_BUDGET_S = 0.5


def _marked(origin: str, flagged: bool = False, agent: str = DEFAULT_AGENT, asking: str = DEFAULT_AGENT) -> str:
    """``, Codex CLI`` for a memory another agent than ``asking`` made, ``, from bob@laptop, unverified`` for one
    another machine wrote (and a flagged one's mark)."""
    marked = "; ".join(mark for mark in (by_agent(agent, asking), marks(origin, flagged)) if mark)
    return f", {marked}" if marked else ""


def _when(timestamp: float) -> str:
    return local_time(timestamp, "%Y-%m-%d")


class Recall:
    """File and prompt recall. ``min_similarity``: the relevance floor (the worker's ``recall_min_similarity``)."""

    def __init__(self, store: Store, search: SearchService, *, file_max: int = 3, prompt_max: int = 3,
                 prompt_budget_s: float = PROMPT_RECALL_BUDGET_S, other_machines: bool = True, min_similarity: float = 0.0,
                 told: ToldLedger | None = None, already_said: AlreadySaid | None = None,
                 consolidated: Consolidated | None = None) -> None:
        self._store = store
        self._search = search
        self._file_max = file_max
        self._prompt_max = prompt_max
        self._prompt_budget_s = prompt_budget_s
        self._other_machines = other_machines
        self._min_similarity = min_similarity
        self.told = told if told is not None else ToldLedger()
        self._already_said = already_said if already_said is not None else AlreadySaid()
        self._consolidated = consolidated if consolidated is not None else NOT_CONSOLIDATED
        self.file_recalls = 0
        self.prompt_recalls = 0

    async def for_file(self, project: str, claude_session_id: str, tool_name: str, tool_input: object, *,
                       agent: str = DEFAULT_AGENT) -> str:
        """The ``additionalContext`` for a tool use of a file, or ``""``; ``agent``: the session's, what another
        agent made says which."""
        field = FILE_TOOLS.get(tool_name)
        path = tool_input.get(field) if field and isinstance(tool_input, dict) else None
        if not isinstance(path, str) or not path.strip():
            return ""
        try:
            memories = await self._store.file_memories(project, path, exclude_session=claude_session_id,
                                                      limit=self._file_max * 2)
        except Exception as exc:
            log_exception(log, "file recall failed", exc)
            return ""
        not_after = latest_moment(time.time())  # nothing dated in the future, as at SessionStart
        hidden = self._consolidated.is_hidden
        memories = [memory for memory in memories if memory.created_at <= not_after
                    and (self._other_machines or not memory.origin) and not hidden(memory.id)]
        already = self.told.told(claude_session_id)
        chosen = [memory for memory in memories if (OBSERVATION, memory.id) not in already][: self._file_max]
        self.told.tell(claude_session_id, [(OBSERVATION, memory.id) for memory in chosen])
        if not chosen:
            return ""
        self.file_recalls += 1
        lines = []
        for memory in chosen:
            fact = telling_fact(memory)
            marked = _marked(memory.origin, memory.flagged, memory.agent, agent)
            lines.append(f"- #{memory.id} ({_when(memory.created_at)}{marked}) {memory.type}: "
                         f"{one_line(memory.title, 120)}"
                         + (f" — {one_line(fact, 160)}" if fact else ""))
        return framed_recall(f"Memory of {one_line(path, 300)}", lines)

    async def for_prompt(self, project: str, claude_session_id: str, prompt: str, *, cwd: str = "",
                         agent: str = DEFAULT_AGENT) -> str:
        """The ``additionalContext`` for a new prompt, or ``""`` (nothing relevant, or not in time); ``cwd``: the
        session's working directory, whose CLAUDE.md files and auto memory say what not to recall; ``agent``:
        the session's, what another agent made says which."""
        if not says_what_about(typed_prompt(prompt)):
            return ""
        found: list[SearchResult] | None = None
        try:
            with trio.move_on_after(self._prompt_budget_s):
                found = await self._relevant(project, claude_session_id, prompt, cwd)
        except Exception as exc:
            log_exception(log, "prompt recall failed", exc)
        if not found:
            return ""
        fresh = set(self.told.tell(claude_session_id, [(result.kind, result.id) for result in found]))
        chosen = [result for result in found if (result.kind, result.id) in fresh]
        if not chosen:
            return ""
        self.prompt_recalls += 1
        lines = []
        for result in chosen:
            label = f"#{result.id}" if result.kind == OBSERVATION else f"summary {result.id}"
            detail = f" — {one_line(result.snippet, 200)}" if result.snippet and result.snippet != result.title else ""
            marked = _marked(result.origin, result.flagged, result.agent, agent)
            lines.append(f"- {label} ({_when(result.created_at)}{marked}) {result.type}: "
                         f"{one_line(result.title, 120)}{detail}")
        return framed_recall("Past work that may be relevant to this prompt,", lines)

    async def _relevant(self, project: str, claude_session_id: str, prompt: str, cwd: str) -> list[SearchResult]:
        """The best memories of other sessions for ``prompt`` (up to ``prompt_max``) that clear the floor, are not
        bare activity, were not told in this session yet, and are not what ``cwd``'s memory files say."""
        results = await self._search.search(
            prompt, SearchFilters(project=project, kinds=(OBSERVATION, SUMMARY),
                                  origin=None if self._other_machines else LOCAL_ORIGIN),
            limit=self._prompt_max * 3)
        by_meaning = results.vectors == "used"
        not_after = latest_moment(time.time())
        already = self.told.told(claude_session_id)
        hidden, use = self._consolidated.is_hidden, self._consolidated.use
        kept = [result for result in results.results
                if result.claude_session_id != claude_session_id and result.created_at <= not_after
                and (result.kind, result.id) not in already
                and not (result.kind == OBSERVATION and hidden(result.id))
                and (result.similarity is not None and result.similarity >= self._min_similarity if by_meaning
                     else "words" in result.matched_by)]
        standings = {result.id: standing(use(result.id)) for result in kept if result.kind == OBSERVATION}

        def score(result: SearchResult) -> float:  # its similarity, moved a little by use
            return (result.similarity or 0.0) + (standings[result.id] if result.kind == OBSERVATION else 0.0)

        if by_meaning and any(standings.values()):  # else search's own order, as before any use was counted
            kept.sort(key=score, reverse=True)
        observations = [result.id for result in kept if result.kind == OBSERVATION]
        known = await self._already_said.known(cwd) if cwd and observations else None
        bare = {row.id for row in await self._store.observations_by_ids(observations)
                if is_bare(row) or (known is not None and known.says(row))} if observations else set()
        return [result for result in kept if result.kind != OBSERVATION or result.id not in bare][: self._prompt_max]
