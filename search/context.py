"""What the injected context holds: the latest summary, then what is relevant, collapsed and grouped.

:class:`ContextPlanner` chooses; :mod:`sessionmem.server.context_markdown` renders the choice
within the token budget.

- **What is relevant.** When a focus is known (a prompt: the project's latest that says
  what the work is about -- "continue" does not, see ``storage.search_terms.FOCUS_MIN_WORDS`` --
  when a session is cleared, compacted or resumed, or a text the caller gives),
  the project's observations are ranked by closeness to it: the prompt's own stored
  vector when it has one (no embedding at request time), else the text embedded (a few
  ms), else full-text search when vectors are off. A small recency bonus
  (:data:`RECENCY_WEIGHT`) orders memories about as relevant, newer first.
- **Where the work stands**, without a focus (a new session, before its first prompt), or when
  nothing cleared the floor (:func:`where_the_work_stands`): the last session's open failures,
  decisions and file-less outcomes, the files the recent sessions worked on most, the commands
  they ran again; with ``files`` 0 (``context_files``), the most recent instead.
- **Above the floor.** Ranked by meaning, a memory less similar to the focus than the
  relevance floor (``recall_min_similarity``, as prompt recall's) is not handed over; when
  none clears it, the plan is the most recent work.
- **No raw activity.** What the offline compressor made of a routine look (a search, a
  status or listing command such as ``git status``, ``ls`` or ``cat``: where Claude looked,
  not what it learned) is left out (:func:`is_routine`). A file read stays, after
  everything else: it names a file the work was about (measured: leaving reads out too
  cost a quarter of the files the next session needed and gained no precision,
  bench/README.md).
- **After a compaction** (``own``: SessionStart ``source=compact``), the session's own work so far
  comes first (:func:`session_state`): its request, its newest summary (the checkpoint its
  PreCompact stored), where it stands (its open failures, decisions, the files it worked on
  most) and the other files it changed; the related memories after it are other sessions', those
  that clear the relevance floor only (none rather than the project's recent work).
- **Not said twice.** What the session's CLAUDE.md files or auto memory already say (a command
  they give, a line they hold: :mod:`~sessionmem.search.already_said`) is left out, when the
  caller names the session's working directory (``cwd``).
- **Consolidated** (:mod:`~sessionmem.storage.consolidation_rules`). A memory merged into a newer
  near-duplicate, or a decision a later one superseded, is not in the plan; ranked against a
  focus, a memory used before moves up a little, one handed over and never used down.
- **Told once.** A memory the session was already told (:class:`~sessionmem.search.told.ToldLedger`:
  a resumed session, by its earlier context or recall) is not in the plan again.
- **Collapsed.** The same action on the same file (``Read src/app.py`` five times, or
  three edits of it) is one line with its ids and a count.
- **Grouped** by session, each under its first prompt, the sessions holding the best
  memories first; within a session, in the order things happened.
- **Earlier sessions** are one line each, from their summaries.
- **Never from the future.** The latest summary is the newest dated no later than the
  latest time an import stores (:func:`~sessionmem.storage.record_rules.latest_moment`: now,
  give or take a clock's skew): a row dated ahead (another machine's clock, or a row written
  to pin itself, in the year 2999) is left out of the context -- the last session, the
  earlier ones and the memories alike -- and reached through search. The other machines'
  rows are clamped to that time when pulled (``team/``); this holds on its own.
- **Other machines' memories** are in the plan unless ``other_machines`` is off
  (``context_other_machines``): then only this machine's own, unless the caller names an
  ``origin``.

Error handling:
    The vector side may be unavailable (loading, busy, off): the plan falls back to
    words, then to recency, and says which it used (``ranking``).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable

import msgspec
import trio

from sessionmem.compress.offline_text import relative
from sessionmem.embed.service import EmbedderService
from sessionmem.index.actor import VectorIndex
from sessionmem.protocol.agents import DEFAULT_AGENT
from sessionmem.records import (
    LOCAL_ORIGIN,
    OBSERVATION,
    PROMPT,
    ROUTINE_CONCEPT,
    SUMMARY,
    ContextRows,
    FileMemory,
    ObservationRow,
    RankedKey,
    SearchFilters,
    SessionHead,
    SessionSoFar,
    SummaryRow,
)
from sessionmem.search.already_said import AlreadySaid, Known
from sessionmem.search.told import Told, ToldLedger
from sessionmem.settings import Backend
from sessionmem.storage.base import Store
from sessionmem.storage.consolidation_rules import LINE_COUNTS, NOT_CONSOLIDATED, Consolidated, standing
from sessionmem.storage.record_rules import latest_moment

CANDIDATES = 200  # recent observations considered, and nearest vectors asked for
WORD_CANDIDATES = 50  # observations asked of full-text search when there are no vectors to ask
# How long a focus's vector is waited for (the embedder's urgent lane: a few ms once the model is in memory).
# A SessionStart soon after the worker started (a resume, a compaction) can find the model still loading or
# being built, seconds on a busy machine: past this the focus is ranked by its words, rather than the hook's
# deadline (hook_timeout_s, 2 s) passing with nothing handed over. The load goes on in its thread.
FOCUS_VECTOR_BUDGET_S = 0.75
# Relevance is in [0, 1] (cosine similarity, or bm25 relative to the best match);
# recency adds up to this much (the newest of the recent candidates most): among
# memories about as relevant, the newer first, but never a newer one that is unrelated.
RECENCY_WEIGHT = 0.1
# Rows read for each one the plan holds: raw activity (is_routine) is left out after the read.
READ_AHEAD = 3
EARLIER_SESSIONS = 5
# What the sessions came back to (most_worked_on): each session back counts this much less; for files, a change
# counts this many reads.
SESSION_DECAY = 0.5
CHANGED_WEIGHT = 2.0
COMMANDS = 3  # commands run in several recent sessions (commands_that_matter)
IN_FLIGHT = 3  # the last session's open failures, decisions and file-less outcomes, before the files (in_flight)
# A compacted session's own work (session_state): the files it worked on most, when context_files is 0 (recency),
# and how many of the files it changed are named.
OWN_FILES = 8
FILES_CHANGED = 12
# Summaries read to find them: one a turn, so a few turns of each session.
SUMMARIES_READ = (EARLIER_SESSIONS + 1) * 4
_DULL_FACT = re.compile(r"^(command: |exit status \d+$|command failed$|\S+ has \d+ lines$|\d+ lines read$|\d+ match)")


class ContextLine(msgspec.Struct, frozen=True):
    ids: list[int]  # oldest first
    type: str
    title: str
    detail: str  # the most telling fact, if any
    created_at: float  # of the newest
    origin: str = ""  # of the newest: "" this machine's own, else "user@machine"
    provenance: str = "tool"  # of the newest: where its text came from (a records.Provenance value)
    flagged: bool = False  # one of them holds (quoted) instruction-like text, or was made from some


class SessionGroup(msgspec.Struct, frozen=True):
    claude_session_id: str
    started_at: float
    request: str  # its first prompt
    lines: list[ContextLine]
    origin: str = ""  # the origin all its lines share ("" : this machine's, or not one for all)
    agent: str = DEFAULT_AGENT  # the agent whose session it is (protocol/agents.py)


class SessionState(msgspec.Struct, frozen=True):
    """A compacted session's own work so far (:func:`session_state`), handed back before anything else."""

    request: str  # its first prompt
    latest_request: str  # its newest prompt, when it is another
    summary: SummaryRow | None  # its newest: the checkpoint its PreCompact stored, or its last turn's
    files_changed: list[str]  # the others it changed, newest first, relative to its directory when under it
    lines: list[ContextLine]  # where it stands: open failures, decisions, the files it worked on most


RANKED = ("meaning", "words")  # the rankings against a focus


class ContextPlan(msgspec.Struct, frozen=True):
    project: str
    summary: SummaryRow | None  # the latest
    focus: str  # the text memories were ranked against ("" : not ranked against one)
    ranking: str  # meaning | words (RANKED), files (files_that_matter) | recency
    groups: list[SessionGroup]  # best first
    earlier: list[SummaryRow]  # summaries of earlier sessions, newest first
    own: SessionState | None = None  # after a compaction: the session's own work so far, handed back first

    @property
    def observations(self) -> int:
        return sum(len(line.ids) for group in self.groups for line in group.lines)


def left_untold(plan: ContextPlan, told: frozenset[Told]) -> ContextPlan:
    """``plan`` for a handover into a model request that already holds the session's first handover since
    its compaction (:attr:`~sessionmem.search.told.Handover.AGAIN`): without the session's own work (that
    one began with it) and without the summaries ``told``; its observations leave out what was told already."""
    summary = plan.summary if plan.summary is not None and (SUMMARY, plan.summary.id) not in told else None
    earlier = [row for row in plan.earlier if (SUMMARY, row.id) not in told]
    return msgspec.structs.replace(plan, summary=summary, earlier=earlier, own=None)


# What the offline compressor makes of a look (a read, a search, a routine command such
# as `git status` or `ls`) says where Claude looked, not what it learned.
_SEARCHES = ("Grep", "Glob", "LS")
_LOOKS = ("Read", *_SEARCHES)


def is_bare(row: ObservationRow) -> bool:
    """A look: a read, a search or a routine command, as the offline compressor describes it."""
    return row.compressor == Backend.OFFLINE and row.type == "discovery" and (
        row.tool_name in _LOOKS or ROUTINE_CONCEPT in row.concepts)


def is_routine(row: ObservationRow) -> bool:
    """Raw activity, never handed over: a search, or a routine command (``compress/commands.py``)."""
    return row.compressor == Backend.OFFLINE and row.type == "discovery" and (
        row.tool_name in _SEARCHES or ROUTINE_CONCEPT in row.concepts)


def collapse_key(row: ObservationRow) -> tuple[str, str]:
    return row.type if row.type != "failure" else f"failure-{row.id}", LINE_COUNTS.sub("", row.title)


def telling_fact(row: ObservationRow | FileMemory) -> str:
    """The fact of an observation most worth a line: not the command echoed, not a line count."""
    for fact in row.facts:
        if not _DULL_FACT.match(fact):
            return fact
    return row.subtitle if row.type != "discovery" else ""


class ContextPlanner:
    def __init__(self, store: Store, index: VectorIndex, embedder: EmbedderService, *,
                 observations: int = 50, files: int = 0, other_machines: bool = True, min_similarity: float = 0.0,
                 told: ToldLedger | None = None, already_said: AlreadySaid | None = None,
                 consolidated: Consolidated | None = None) -> None:
        self._store = store
        self._index = index
        self._embedder = embedder
        self._observations = observations
        self._files = files
        self._other_machines = other_machines
        self._min_similarity = min_similarity
        self.told = told if told is not None else ToldLedger()
        self._already_said = already_said if already_said is not None else AlreadySaid()
        self._consolidated = consolidated if consolidated is not None else NOT_CONSOLIDATED

    async def plan(self, project: str, *, focus: str = "", focus_latest_prompt: bool = False,
                   session: str = "", origin: str | None = None, own: bool = False, cwd: str = "") -> ContextPlan:
        """The plan for ``project``; ``focus`` ranks by relevance to that text, ``focus_latest_prompt``
        (without a ``focus``) by relevance to the newest prompt of ``session`` (resumed, cleared,
        compacted) or else of the project, through its stored vector. ``origin``: memories of that
        origin only (``SearchFilters.origin``); each row carries its own, read with it. Without one,
        this machine's own only when other machines' are kept out (``other_machines``). ``own``
        (``session`` was compacted): its own work so far first (:func:`session_state`), and the
        memories and summaries after it of other sessions only. ``cwd``: the session's working directory,
        whose CLAUDE.md files and auto memory say what is left out (:class:`AlreadySaid`).

        Three hops off the Trio thread, each 0.1-0.2 ms on a busy machine: a read of where to
        start, the index (or the embedder), a read of the chosen rows; with a ``cwd``, the read of its
        memory files runs beside them, on a thread of its own.
        """
        if origin is None and not self._other_machines:
            origin = LOCAL_ORIGIN
        not_after = latest_moment(time.time())
        said: list[Known] = []
        async with trio.open_nursery() as nursery:
            if cwd:  # read on a thread of its own, beside the store's reads
                nursery.start_soon(self._read_already_said, cwd, said)
            start = await self._store.context_start(project, summaries=SUMMARIES_READ, recent=CANDIDATES,
                                                    latest_prompt=focus_latest_prompt and not focus, session=session,
                                                    origin=origin, own=own)
            focus_prompt_id = None
            if start.latest_prompt is not None:
                focus_prompt_id, focus = start.latest_prompt
            recent = start.recent
            filters = SearchFilters(project=project, kinds=(OBSERVATION,), origin=origin)
            candidates: list[RankedKey] = []
            ranking = "recency"
            told = {row_id for kind, row_id in self.told.told(session) if kind == OBSERVATION} if session else set()
            state = None
            if start.own is not None:  # its own work is in its own section, not among the memories
                state = session_state(start.own, files=self._files or OWN_FILES)
                told |= {row.id for row in start.own.observations}
            # Merged into another, or superseded: not handed over, yet read among the recent work (a command
            # run in two sessions was run again, though one run is merged into the other).
            hidden = self._consolidated.is_hidden
            recent = [row_id for row_id in recent if row_id not in told]
            if focus and recent:
                # Fewer than CANDIDATES: these are all the project's observations, compared one by one.
                among = [(OBSERVATION, row_id) for row_id in recent] if len(recent) < CANDIDATES else None
                candidates, ranking = await self._relevant(focus, focus_prompt_id, filters, among)
                candidates = [key for key in candidates if key.row_id not in told and not hidden(key.row_id)]
            floor = self._min_similarity if ranking == "meaning" else None  # similarities: the floor holds
            chosen, of_project, relevant = await self._choose(candidates, recent, filters, floor)
            if not of_project and ranking == "meaning":  # nothing near was of this project: its words, then
                candidates, ranking = await self._store.search_text(focus, filters, WORD_CANDIDATES), "words"
                candidates = [key for key in candidates if key.row_id not in told and not hidden(key.row_id)]
                chosen, _, relevant = await self._choose(candidates, recent, filters, None)
            if not relevant:
                ranking = "recency"
        rows = [row for row in chosen.observations if row.created_at <= not_after and not is_routine(row)
                and not (own and row.claude_session_id == session)]
        if own and ranking == "recency":  # after its own work, only memories related to it: none cleared the floor
            rows = []
        if ranking == "recency" and self._files:  # nothing to rank by: where the work stands
            rows, ranking = where_the_work_stands(rows, files=self._files), "files"
        rows = [row for row in rows if not hidden(row.id)]
        rows = rows[: self._observations]
        if said and said[0].text:  # asked of what would be handed over only: ~3 µs a row
            rows = [row for row in rows if not said[0].says(row)]
        rows = [row for row in rows if not is_bare(row)] + [row for row in rows if is_bare(row)]  # telling first
        sessions = {row.claude_session_id: row for row in chosen.sessions}
        summaries = [row for row in start.summaries if not (own and row.claude_session_id == session)]
        latest, earlier = earlier_sessions(summaries, not_after=not_after)
        return ContextPlan(project, latest, focus if ranking in RANKED else "", ranking, group(rows, sessions),
                           earlier, state)

    async def _read_already_said(self, cwd: str, into: list[Known]) -> None:
        into.append(await self._already_said.known(cwd))

    async def _relevant(self, focus: str, prompt_id: int | None, filters: SearchFilters,
                        among: list[tuple[str, int]] | None) -> tuple[list[RankedKey], str]:
        """Observations ranked by relevance to ``focus``, best first, and how (``meaning``, ``words``).

        ``among``: every observation of a small project, each compared with the focus (in a
        large store the nearest in the graph may all be other projects'). Otherwise those
        found by meaning are of any project yet (:meth:`_choose` keeps the project's).
        """
        if self._index.enabled:
            index = self._index
            nearest = None
            # Observations only: a prompt asked many times (or its summaries) can fill the
            # nearest places by itself.
            if prompt_id is not None:
                nearest = await index.nearest_to(PROMPT, prompt_id, CANDIDATES, of_kind=OBSERVATION, among=among)
            if nearest is None:
                vectors = None
                with trio.move_on_after(FOCUS_VECTOR_BUDGET_S):
                    vectors = await self._embedder.embed([focus], urgent=True)
                if vectors is not None:
                    nearest = (await index.nearest_among(vectors[0], among, CANDIDATES) if among is not None
                               else await index.nearest(vectors[0], CANDIDATES, of_kind=OBSERVATION))
            found = [RankedKey(kind, row_id, 1.0 - distance) for kind, row_id, distance in nearest or ()]
            if found:
                return found, "meaning"
        return await self._store.search_text(focus, filters, WORD_CANDIDATES), "words"

    async def _choose(self, candidates: list[RankedKey], recent: list[int], filters: SearchFilters,
                      floor: float | None) -> tuple[ContextRows, bool, bool]:
        """The best observations and their sessions, in one read; whether some candidates were of the project,
        and whether relevance chose (some cleared ``floor``, if given), else recency did."""
        of_project = relevant_found = False
        use = self._consolidated.use
        standings = {key.row_id: standing(use(key.row_id)) for key in candidates}  # on the Trio thread

        def choose(kept: set[int]) -> list[int]:  # on the reader's thread
            nonlocal of_project, relevant_found
            relevant = [key for key in candidates if key.row_id in kept]
            of_project = bool(relevant)
            if floor is not None:
                relevant = [key for key in relevant if key.score >= floor]
            relevant_found = bool(relevant)
            # Relevance chose: what it found alone, best first; else the most recent.
            found = {key.row_id for key in relevant}
            best = [row_id for row_id in ranked(relevant, recent, standings) if row_id in found]
            return (best if relevant else recent)[: self._observations * READ_AHEAD]

        chosen = await self._store.context_rows([(key.kind, key.row_id) for key in candidates], filters, choose)
        return chosen, of_project, relevant_found


def session_state(so_far: SessionSoFar, *, files: int) -> SessionState:
    """What a compacted session is handed back of its own work: its request (and its newest, if another),
    its newest summary, where it stands (:func:`where_the_work_stands` of its own observations: its open
    failures, decisions and file-less outcomes, the ``files`` files it worked on most), and the other files
    it changed."""
    rows = [row for row in so_far.observations if not is_routine(row)]
    chosen = where_the_work_stands(rows, files=files)
    named = {path for row in chosen for path in row.files_modified}
    changed = dict.fromkeys(relative(path, so_far.cwd) for row in rows for path in row.files_modified
                            if path not in named)
    latest = so_far.latest_request if so_far.latest_request != so_far.request else ""
    return SessionState(so_far.request, latest, so_far.summary, list(changed)[:FILES_CHANGED],
                        group(chosen, {})[0].lines if chosen else [])


def where_the_work_stands(rows: list[ObservationRow], *, files: int) -> list[ObservationRow]:
    """What a new session is handed before it has said what it is about (``rows``: the recent observations,
    newest first): the last session's open failures and its decisions (:func:`in_flight`), then the files
    that matter (:func:`files_that_matter`) and the commands the recent sessions ran again and again
    (:func:`commands_that_matter`)."""
    chosen = [*in_flight(rows), *files_that_matter(rows, files=files), *commands_that_matter(rows)]
    return list({row.id: row for row in chosen}.values())


def commands_that_matter(rows: list[ObservationRow], *, commands: int = COMMANDS) -> list[ObservationRow]:
    """Of the shell commands in ``rows`` (newest first; routine looks are not among them), the ``commands``
    run in the most sessions (:func:`most_worked_on`), and in more than one: each as its newest run that
    did not fail."""
    def ran(row: ObservationRow) -> list[tuple[str, float, bool]]:
        command = attempt_key(row)[1] if row.tool_name == "Bash" and not row.failed else ""
        return [(command, 1.0, True)] if command.startswith("command: ") else []

    return most_worked_on(rows, ran, commands, sessions_at_least=2)


def in_flight(rows: list[ObservationRow]) -> list[ObservationRow]:
    """Of the newest session in ``rows`` (newest first), up to :data:`IN_FLIGHT` of, newest first: its failures
    that no later use of the same tool on the same thing succeeded (:func:`attempt_key`), its decisions, and
    what it did that names no file (a change made by a command, say: the files it worked on are the files
    that matter's)."""
    if not rows:
        return []
    newest = rows[0].claude_session_id
    succeeded: set[tuple[str, str]] = set()
    found: list[ObservationRow] = []
    for row in rows:
        if row.claude_session_id != newest:
            continue
        if not row.failed and row.type != "failure":
            succeeded.add(attempt_key(row))
            if row.type == "decision" or (row.type != "discovery" and not row.files_read and not row.files_modified):
                found.append(row)
        elif attempt_key(row) not in succeeded:
            found.append(row)
    return found[:IN_FLIGHT]


def attempt_key(row: ObservationRow) -> tuple[str, str]:
    """What a failed tool use and a later success have in common: the tool and its command, else its title
    without the failure's mark (the offline compressor's ``Failed: …``)."""
    command = next((fact for fact in row.facts if fact.startswith("command: ")), "")
    return row.tool_name, command or row.title.removeprefix("Failed: ")


def files_that_matter(rows: list[ObservationRow], *, files: int) -> list[ObservationRow]:
    """For the ``files`` files the recent sessions worked on most (:func:`most_worked_on`, a change counting
    :data:`CHANGED_WEIGHT` times a read), the newest observation of each, best file first: its newest
    change, else its newest read. Observations that name no file are not in it."""
    def touched(row: ObservationRow) -> list[tuple[str, float, bool]]:
        return [*((path, CHANGED_WEIGHT, True) for path in row.files_modified),
                *((path, 1.0, False) for path in row.files_read)]

    return most_worked_on(rows, touched, files)


def most_worked_on(rows: list[ObservationRow], keys: Callable[[ObservationRow], list[tuple[str, float, bool]]],
                   limit: int, *, sessions_at_least: int = 1) -> list[ObservationRow]:
    """The ``limit`` keys (files, commands) the sessions of ``rows`` (newest first) came back to most, each as
    one observation, best first; ``keys``: a row's keys, each with its weight and whether the row is the
    key's preferred line (a change of a file, not a read of it).

    A key scores its weight once for each session that has it, a session counting :data:`SESSION_DECAY`
    times the one after it: the last session's first, then those several sessions came back to. Its line
    is its newest preferred row, else its newest row. A key of fewer than ``sessions_at_least`` sessions
    is left out.
    """
    sessions: dict[str, int] = {}  # in order, newest first
    scores: dict[str, float] = {}
    seen_in: dict[str, set[str]] = {}
    line: dict[str, ObservationRow] = {}
    preferred_line: set[str] = set()  # keys whose line is a preferred row: no older row replaces it
    for row in rows:
        decay = SESSION_DECAY ** sessions.setdefault(row.claude_session_id, len(sessions))
        for key, weight, preferred in keys(row):
            if row.claude_session_id not in seen_in.setdefault(key, set()):
                seen_in[key].add(row.claude_session_id)
                scores[key] = scores.get(key, 0.0) + weight * decay
            if key not in preferred_line and (preferred or key not in line):
                line[key] = row
                if preferred:
                    preferred_line.add(key)
    best = sorted((key for key in scores if len(seen_in[key]) >= sessions_at_least),
                  key=lambda key: scores[key], reverse=True)[:limit]
    return list({row.id: row for row in (line[key] for key in best)}.values())


def earlier_sessions(summaries: list[SummaryRow], *,
                     not_after: float = math.inf) -> tuple[SummaryRow | None, list[SummaryRow]]:
    """The newest summary (of ``summaries``, newest first), and the newest of each other session after
    it (up to :data:`EARLIER_SESSIONS`); none dated after ``not_after``.

    A summary is written per turn: the turns of the latest session are not earlier sessions. One
    dated in the future wins neither place: it is not of a session before this one.
    """
    summaries = [summary for summary in summaries if summary.created_at <= not_after]
    if not summaries:
        return None, []
    seen = {summaries[0].claude_session_id}
    earlier: list[SummaryRow] = []
    for summary in summaries[1:]:
        if summary.claude_session_id not in seen and len(earlier) < EARLIER_SESSIONS:
            seen.add(summary.claude_session_id)
            earlier.append(summary)
    return summaries[0], earlier


def ranked(relevant: list[RankedKey], recent: list[int], standings: dict[int, float] | None = None) -> list[int]:
    """Observation ids, best first: relevance (normalized to [0, 1]) plus a small recency bonus, plus or minus
    what use says of each (``standings``: :func:`~sessionmem.storage.consolidation_rules.standing`)."""
    top = max((key.score for key in relevant), default=0.0)
    relevance = {key.row_id: key.score / top for key in relevant} if top > 0 else {}
    recency = {row_id: 1.0 - rank / len(recent) for rank, row_id in enumerate(recent)}
    standings = standings or {}
    scores = {row_id: relevance.get(row_id, 0.0) + RECENCY_WEIGHT * recency.get(row_id, 0.0)
              + standings.get(row_id, 0.0) for row_id in relevance.keys() | recency.keys()}
    return sorted(scores, key=lambda row_id: scores[row_id], reverse=True)


def group(rows: list[ObservationRow], sessions: dict[str, SessionHead]) -> list[SessionGroup]:
    """``rows`` (best first) grouped by session (best first), collapsed, each group in time order."""
    order: dict[str, list[ObservationRow]] = {}
    for row in rows:
        order.setdefault(row.claude_session_id, []).append(row)
    groups = []
    for claude_session_id, members in order.items():
        lines: dict[tuple[str, str], list[ObservationRow]] = {}
        for row in sorted(members, key=lambda member: member.id):
            lines.setdefault(collapse_key(row), []).append(row)
        session = sessions.get(claude_session_id)
        origins = {row.origin for row in members}
        groups.append(SessionGroup(
            claude_session_id, session.created_at if session else members[0].created_at,
            (session.first_prompt or "") if session else "",
            [ContextLine([row.id for row in same], same[-1].type, title, next(
                (fact for fact in map(telling_fact, reversed(same)) if fact), ""), same[-1].created_at,
                same[-1].origin, same[-1].provenance, any(row.flagged for row in same))
             for (_, title), same in lines.items()],
            origins.pop() if len(origins) == 1 else "", members[0].agent))
    return groups
