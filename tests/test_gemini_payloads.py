"""The Gemini CLI's hook payloads in the one hook contract (:mod:`sessionmem.protocol.agent_payloads`), on payloads
the pinned Gemini CLI wrote (tests/fixtures/gemini/hooks, recorded as its README says)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionmem.protocol.agent_payloads import (
    GEMINI_STAGES,
    agent_output,
    contract_payloads,
    contract_stage,
    runs_another_agents_hook,
    user_prompt,
)
from sessionmem.protocol.agents import CLAUDE_CODE, CODEX, GEMINI_CLI
from sessionmem.protocol.requests import api_call

HOOKS = Path(__file__).parent / "fixtures" / "gemini" / "hooks"


def recorded(name: str) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((HOOKS / f"{name}.json").read_text())
    return payload


def contract(name: str) -> dict[str, Any]:
    payload = recorded(name)
    events = contract_payloads(GEMINI_CLI, payload["hook_event_name"], payload)
    assert len(events) == 1
    return events[0]


def test_each_gemini_event_sessionmem_listens_to_is_a_contract_stage() -> None:
    assert {event: contract_stage(GEMINI_CLI, event) for event in GEMINI_STAGES} == {
        "SessionStart": "SessionStart", "BeforeAgent": "UserPromptSubmit", "AfterTool": "PostToolUse",
        "AfterAgent": "Stop", "PreCompress": "PreCompact", "SessionEnd": "SessionEnd"}
    assert contract_stage(GEMINI_CLI, "BeforeTool") == "BeforeTool"  # nothing to store: api_call sends nothing
    assert api_call(contract("BeforeTool"), agent=GEMINI_CLI) is None


def test_a_shell_command_is_a_bash_tool_use_and_a_non_zero_exit_a_failure() -> None:
    event = contract("AfterTool-run_shell_command")
    assert event["hook_event_name"] == "PostToolUseFailure"
    assert event["tool_name"] == "Bash"
    assert event["tool_input"]["command"] == "python3 -c 'import calc; calc.divide(1, 0)'"
    assert event["error"].startswith("Exit code 1\nTraceback") and event["error"].endswith("ZeroDivisionError: b is 0")
    assert event["tool_response"].startswith("Output: Traceback")  # the text the model saw, unwrapped
    method, path, body = api_call(event, agent=GEMINI_CLI) or ("", "", None)
    assert body is not None and body["failed"] is True and body["agent"] == GEMINI_CLI


def test_file_writes_and_edits_are_writes_and_edits_of_the_absolute_path() -> None:
    write = contract("AfterTool-write_file")
    assert (write["hook_event_name"], write["tool_name"]) == ("PostToolUse", "Write")
    assert write["tool_input"] == {"file_path": "/home/user/project/NOTES.md", "content": "divide() rejects b == 0\n"}
    edit = contract("AfterTool-replace")
    assert (edit["hook_event_name"], edit["tool_name"]) == ("PostToolUse", "Edit")
    assert edit["tool_input"]["file_path"] == "/home/user/project/calc.py"
    assert edit["tool_input"]["old_string"] == "    return a / b"
    assert "raise ZeroDivisionError" in edit["tool_input"]["new_string"]
    read = contract("AfterTool-read_file")
    assert (read["tool_name"], read["tool_input"]) == ("Read", {"file_path": "/home/user/project/calc.py"})


def test_a_tool_that_reports_an_error_is_a_failure_with_its_message() -> None:
    event = contract("AfterTool-replace-failed")
    assert (event["hook_event_name"], event["tool_name"]) == ("PostToolUseFailure", "Edit")
    assert event["error"].startswith("Could not find an exact match for 'old_string'")


def test_the_prompt_is_what_the_user_typed_not_the_memory_handed_over_before_it() -> None:
    # Headless, the CLI puts the SessionStart hook's context before the prompt it hands BeforeAgent.
    assert recorded("BeforeAgent")["prompt"].startswith("<hook_context>")
    prompt = contract("BeforeAgent")
    assert prompt["hook_event_name"] == "UserPromptSubmit"
    assert prompt["prompt"] == "Fix the divide bug in calc.py"
    stop = contract("AfterAgent")
    assert stop["hook_event_name"] == "Stop"
    assert stop["last_user_message"] == "Fix the divide bug in calc.py"
    assert stop["last_assistant_message"] == "Done: divide() rejects zero."
    assert "transcript_path" not in stop  # the Gemini CLI's transcript is not Claude Code's: never read for a turn
    assert user_prompt("<hook_context>never closed") == ""
    assert user_prompt("plain <hook_context>x</hook_context>") == "plain <hook_context>x</hook_context>"


def test_session_start_end_and_compression_keep_their_fields() -> None:
    start = contract("SessionStart")
    assert (start["hook_event_name"], start["source"]) == ("SessionStart", "startup")
    end = contract("SessionEnd")
    assert (end["hook_event_name"], end["reason"]) == ("SessionEnd", "exit")
    compact = contract("PreCompress")
    assert compact["hook_event_name"] == "PreCompact" and "transcript_path" not in compact


def test_sessionmem_s_own_mcp_tools_carry_claude_code_s_name_and_others_pass_as_they_are() -> None:
    base = {"session_id": "s", "cwd": "/p", "tool_input": {"query": "divide"}, "tool_response": {"llmContent": "x"}}
    own = contract_payloads(GEMINI_CLI, "AfterTool", {**base, "tool_name": "mcp_sessionmem_search"})[0]
    assert own["tool_name"] == "mcp__sessionmem__search"
    other = contract_payloads(GEMINI_CLI, "AfterTool", {**base, "tool_name": "mcp_github_search"})[0]
    assert other["tool_name"] == "mcp_github_search" and other["tool_response"] == "x"


_VALUES = st.one_of(st.none(), st.integers(), st.text(max_size=40),
                    st.sampled_from(["run_shell_command", "write_file", "replace", "mcp_sessionmem_search",
                                     "<hook_context>a</hook_context>\n\nb", "Output: x\nExit Code: 2"]))
_OBJECTS = st.dictionaries(st.sampled_from(["llmContent", "error", "message", "file_path", "command", "type"]),
                           _VALUES, max_size=4)


# A busy two-core CI box draws slowly: the point is what the adapter does with each draw, not the draw's speed.
@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(["tool_name", "tool_input", "tool_response", "cwd", "prompt",
                                        "prompt_response"]),
                       st.one_of(_VALUES, _OBJECTS, st.lists(_VALUES, max_size=3)), max_size=6),
       st.sampled_from(sorted(GEMINI_STAGES)))
def test_whatever_a_gemini_payload_holds_the_adapter_returns_a_contract_payload(payload: dict[str, Any],
                                                                                event: str) -> None:
    events = contract_payloads(GEMINI_CLI, event, payload)
    assert len(events) == 1 and events[0]["hook_event_name"] in (*GEMINI_STAGES.values(), "PostToolUseFailure")
    api_call(events[0], agent=GEMINI_CLI, project="p")  # never raises


def test_the_output_is_in_the_fields_gemini_reads_under_its_event_names() -> None:
    assert agent_output(GEMINI_CLI, "SessionStart", "memory", "line") == {
        "hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "memory"},
        "systemMessage": "line"}
    assert agent_output(GEMINI_CLI, "UserPromptSubmit", "recall")["hookSpecificOutput"] == {  # type: ignore[index]
        "hookEventName": "BeforeAgent", "additionalContext": "recall"}
    assert agent_output(GEMINI_CLI, "PostToolUse", "file")["hookSpecificOutput"]["hookEventName"] == "AfterTool"  # type: ignore[index]
    assert agent_output(GEMINI_CLI, "Stop", "") is None


def test_a_hook_of_another_agent_that_the_gemini_cli_runs_sends_nothing() -> None:
    for name in ("AfterTool-write_file", "BeforeAgent", "SessionStart", "SessionEnd"):
        payload = recorded(name)
        assert runs_another_agents_hook(CLAUDE_CODE, payload), name
        assert runs_another_agents_hook(CODEX, payload), name
        assert not runs_another_agents_hook(GEMINI_CLI, payload), name
    claude_start = {"session_id": "s", "cwd": "/p", "hook_event_name": "SessionStart", "source": "startup",
                    "transcript_path": "/home/user/.claude/projects/p/s.jsonl"}
    assert not runs_another_agents_hook(CLAUDE_CODE, claude_start)
