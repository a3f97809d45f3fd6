"""The hook process: read Claude Code's JSON on stdin, tell the worker, exit 0. Standard library only.

One entry for every stage (the stage is the first argument, else the payload's
``hook_event_name``):

- SessionStart: make sure a worker runs (starting it detached if needed, waiting at
  most ``start_timeout_s``), then print the project's memory as ``additionalContext``
  and a one-line ``systemMessage``; the first time a repository that commits the share
  file asks to share its memory (the worker says when), the message says so to the user,
  and how to accept or refuse (it is never told to Claude: only the user consents).
- UserPromptSubmit: the prompt, without private spans; an entirely private prompt or a
  ``<task-notification>`` is not sent at all.
- PostToolUse / PostToolUseFailure: the tool use (failures marked), private spans
  removed, long strings cut to head + tail so the request stays under the body limit.
  When the worker's answer recalls past work on the file the tool touched, it is
  printed as ``additionalContext`` for Claude (UserPromptSubmit likewise: prompt
  recall).
- Stop: ``last_assistant_message`` from the payload (Claude Code >= 2.1.72), else the
  last turn read from the end of ``transcript_path``; a summary of the session so far.
- PreCompact: the same, read from the transcript (a Codex rollout for Codex, whose PreCompact
  carries no summary: :mod:`.codex_transcript`): the checkpoint of the session before the agent
  compacts it, which the SessionStart after compaction (``source=compact``) hands back
  first. It prints nothing (a PreCompact hook's text would become the compaction's instructions).
- SubagentStop: the subagent's final report, as an observation (for a background
  subagent it is otherwise only seen as a ``<task-notification>``).
- SessionEnd: completion. SubagentStart/PreToolUse: nothing to send (tool uses inside
  a subagent carry ``agent_id``/``agent_type`` on their own events).

Error handling:
    Fail open, always: whatever happens, the process exits 0, prints valid JSON or
    nothing, and writes what went wrong to ``<data dir>/hooks.log``. A hard timer ends
    the process if anything takes longer than its budget. What happens when the worker
    is busy, broken or down is the clients' one policy (:mod:`sessionmem.protocol.delivery`):
    a 503 is retried after its ``Retry-After`` within the hook's budget, then the event
    is spooled to disk like any 5xx or timeout, not lost.
"""

from __future__ import annotations

import os
import sys
import time

from sessionmem.protocol import fastjson
from sessionmem.protocol.agent_payloads import agent_output, contract_payloads, runs_another_agents_hook
from sessionmem.protocol.agents import CODEX, DEFAULT_AGENT, known_agent
from sessionmem.protocol.client import WorkerUnavailable, request
from sessionmem.protocol.client_settings import ClientConfig, data_dir_from
from sessionmem.protocol.datadir import private_umask, write_private
from sessionmem.protocol.delivery import Outcome, Patience, deliver
from sessionmem.protocol.limits import printable_line
from sessionmem.protocol.oskit import arm_exit_deadline
from sessionmem.protocol.privacy import strip_private
from sessionmem.protocol.project import project_of
from sessionmem.protocol.requests import (
    CHECKPOINT_STAGES,
    api_call,
    encoded_call,
    is_internal_prompt,
    text_field,
)
from sessionmem.protocol.routes import CONTEXT_COUNT_HEADER, NOTICE_HEADER, SHARE_REQUEST_HEADER

TYPE_CHECKING = False  # typing costs a hook ~4 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

LOG_LIMIT = 5 * 1024 * 1024


class _Log:
    """Appends to hooks.log only when there is something to say (most runs say nothing)."""

    def __init__(self, config: ClientConfig, stage: str) -> None:
        self._path = config.hook_log_path
        self._stage = stage

    def __call__(self, message: str) -> None:
        try:
            os.makedirs(os.path.dirname(self._path), mode=0o700, exist_ok=True)
            try:
                if os.stat(self._path).st_size > LOG_LIMIT:
                    os.replace(self._path, self._path + ".1")  # keep one older file
            except FileNotFoundError:
                pass
            line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} pid={os.getpid()} {self._stage}: {message}\n"
            write_private(self._path, line.encode("utf-8", "replace"), append=True)
        except OSError:
            pass


def _send(config: ClientConfig, method: str, path: str, encoded: bytes | None, log: _Log) -> Outcome:
    outcome = deliver(config, method, path, encoded, patience=Patience.hook(config))
    if outcome.status == "spooled":
        log(f"{method} {path}: event spooled ({outcome.detail})")
    elif not outcome.delivered:
        log(f"{method} {path}: event {outcome.status} ({outcome.detail})")
    return outcome


# Stages whose answer may carry recalled memory (file recall, prompt recall) for Claude.
RECALL_STAGES = ("PostToolUse", "UserPromptSubmit")


def recalled(stage: str, outcome: Outcome, agent: str = DEFAULT_AGENT) -> dict[str, Any] | None:
    """The hook output handing the worker's recalled memory to the agent's model, if its answer has any."""
    reply = outcome.reply
    if not outcome.delivered or reply is None or b'"additionalContext"' not in reply.body:
        return None  # the usual case, decided without parsing
    try:
        context = reply.json().get("additionalContext")
    except (ValueError, AttributeError):
        return None
    if not isinstance(context, str) or not context:
        return None
    return agent_output(agent, stage, context)


def session_start(payload: dict[str, Any], project: str, config: ClientConfig, log: _Log,
                  agent: str = DEFAULT_AGENT) -> dict[str, Any] | None:
    # Imported here: the other stages must not pay for subprocess.
    from sessionmem.protocol.launch import ensure_worker

    port = ensure_worker(config, log)
    if port is None:
        return None
    call = api_call({**payload, "hook_event_name": "SessionStart"}, project=project, agent=agent)
    assert call is not None
    _, path, _ = call
    try:
        reply = request(config.host, port, "GET", path, timeout=config.hook_timeout_s, token=config.token())
    except WorkerUnavailable as exc:
        log(f"no context: {exc}")
        return None
    if reply.status != 200:
        log(f"no context: {reply.status}")
        return None
    context = reply.body.decode("utf-8", "replace")
    name = printable_line(project)  # Claude Code shows it in a terminal: no escape sequence, one line
    lines = []
    database = reply.headers.get(SHARE_REQUEST_HEADER, "")
    if database:  # shown whatever system_message says: the user's consent is asked for once
        import urllib.parse

        host = printable_line(urllib.parse.unquote(database))
        lines.append(f"sessionmem: this repository ({name}) asks to share its memory with the team database "
                     f"{host}. Nothing of it is shared unless you accept: run {command(config, 'share allow')} "
                     f"in it to share, {command(config, 'share deny')} to refuse (asked once)")
    if config.system_message:
        count = int(reply.headers.get(CONTEXT_COUNT_HEADER, "0") or 0)
        # The pages need a login (a bare link answers 401): the command that gives one.
        opener = command(config, "open")
        lines.append(f"sessionmem: {count} memories of {name} loaded · {opener} to browse them"
                     if count else f"sessionmem: no memories of {name} yet · {opener} shows what it records")
    notice = reply.headers.get(NOTICE_HEADER)
    if notice:  # said once by the worker (auto moved memory onto a paid model): shown even without the line above
        import urllib.parse

        lines.append(printable_line(urllib.parse.unquote(notice)))
    return agent_output(agent, "SessionStart", context if context.strip() else "", "\n".join(lines))


def command(config: ClientConfig, verb: str) -> str:
    """``sessionmem VERB`` in backquotes, as this install has it (a plugin's environment is not on
    PATH), with this data dir when it is not the default."""
    installed = os.path.join(os.path.dirname(sys.executable), "sessionmem")
    line = f"{installed if os.path.exists(installed) else 'sessionmem'} {verb}"
    if config.data_dir != data_dir_from({}):  # not the default: the command must be told
        line += f" --data-dir {config.data_dir}"
    return f"`{line}`"


def handle(stage: str, payload: dict[str, Any], config: ClientConfig, log: _Log,
           agent: str = DEFAULT_AGENT) -> dict[str, Any] | None:
    """Do one stage's work for ``agent``'s hook; returns what to print on stdout, if anything."""
    project = project_of(text_field(payload, "cwd"))
    events = contract_payloads(agent, stage, payload)  # usually one; one a file for a patch
    stage = text_field(events[0], "hook_event_name")
    if stage == "SessionStart":
        return session_start(events[0], project, config, log, agent)
    output = None
    for event in events:
        output = _handle_event(stage, event, project, config, log, agent) or output
    return output


def _handle_event(stage: str, payload: dict[str, Any], project: str, config: ClientConfig, log: _Log,
                  agent: str) -> dict[str, Any] | None:
    """One contract event sent to the worker; returns the memory its answer recalls, as the agent reads it."""
    if stage == "UserPromptSubmit":
        prompt = text_field(payload, "prompt")
        visible = strip_private(prompt)
        if is_internal_prompt(prompt) or not visible:
            return None  # internal protocol, or nothing left to remember
        payload = {**payload, "prompt": visible}
    elif stage in CHECKPOINT_STAGES:
        payload = dict(payload)
        if not text_field(payload, "last_assistant_message") and text_field(payload, "transcript_path"):
            from sessionmem.hooks.codex_transcript import last_codex_turn
            from sessionmem.hooks.transcript import last_turn

            # Codex's PreCompact carries no summary: the turn is in its rollout, a format of its own.
            read_turn = last_codex_turn if agent == CODEX else last_turn
            try:
                user, assistant, broken = read_turn(text_field(payload, "transcript_path"))
            except OSError as exc:
                log(f"transcript unreadable: {exc}")
            else:
                if broken:
                    log(f"skipped {broken} broken transcript line(s)")
                payload["last_user_message"], payload["last_assistant_message"] = user, assistant
    # A key of its own per event: if it reaches a slow worker *and* is spooled, the
    # worker stores it once.
    call = encoded_call({**payload, "hook_event_name": stage}, project=project,
                        key=f"hook-{os.urandom(12).hex()}", cap=config.tool_response_cap, agent=agent)
    if call is None:
        return None
    outcome = _send(config, *call, log)
    return recalled(stage, outcome, agent) if stage in RECALL_STAGES else None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv if argv is None else argv
    stage = argv[1] if len(argv) > 1 else ""
    agent = argv[2] if len(argv) > 2 else DEFAULT_AGENT  # the agent whose hook this is (install writes it)
    private_umask()  # the spool, the log and the worker this hook may start: its owner's only
    config = ClientConfig()
    log = _Log(config, stage or "hook")
    budget = config.hook_timeout_s + 1.0
    if stage == "SessionStart" or not stage:
        budget += config.start_timeout_s
    arm_exit_deadline(budget)  # whatever still runs then is abandoned: exit 0, silently
    try:
        for problem in config.problems:
            log(problem)
        if not known_agent(agent):
            log(f"unknown agent {agent!r}: nothing sent (re-run `sessionmem install --agent NAME`)")
            return 0
        raw = sys.stdin.buffer.read()
        if not raw.strip():
            log("empty stdin")
            return 0
        try:
            payload = fastjson.loads(raw)
        except ValueError as exc:
            log(f"stdin is not JSON: {exc}")
            return 0
        if not isinstance(payload, dict):
            log("stdin is not a JSON object")
            return 0
        stage = stage or text_field(payload, "hook_event_name")
        if runs_another_agents_hook(agent, payload):  # that agent's own hooks capture it, once
            log(f"run by another agent than {agent} (its own sessionmem hooks record it): nothing sent")
            return 0
        output = handle(stage, payload, config, log, agent)
        if output is not None:
            sys.stdout.write(fastjson.dumps(output))
            sys.stdout.flush()
    except Exception as exc:  # fail open: Claude Code must never see a hook error
        log(f"unexpected {type(exc).__name__}: {exc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
