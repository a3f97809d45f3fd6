"""The adapter on what sessionmem's OpenCode plugin sends: OpenCode's tools (as its ``tool.execute.after`` hands
them over, verified with the pinned OpenCode in tests/test_e2e_opencode.py) in the contract's names and fields."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sessionmem.protocol.agent_payloads import agent_output, contract_payloads, contract_stage, runs_another_agents_hook
from sessionmem.protocol.agents import OPENCODE

CWD = "/home/dev/calcproj"
PATCH = """*** Begin Patch
*** Add File: NOTES.md
+divide() rejects zero
*** Update File: calc.py
@@
 def divide(a, b):
-    return a / b
+    return a / b if b else 0
*** End Patch"""


def tool_use(tool: str, args: dict[str, Any], output: str = "", **extra: Any) -> dict[str, Any]:
    """A PostToolUse as the plugin sends it."""
    return {"session_id": "ses_1", "cwd": CWD, "tool_name": tool, "tool_input": args, "tool_response": output,
            "tool_use_id": "call_1", "hook_event_name": "PostToolUse", **extra}


def test_opencode_s_file_tools_become_claude_code_s_with_absolute_paths() -> None:
    [edit] = contract_payloads(OPENCODE, "PostToolUse", tool_use(
        "edit", {"filePath": "calc.py", "oldString": "a / b", "newString": "a / b if b else 0", "replaceAll": False},
        "Edit applied successfully."))
    assert edit["tool_name"] == "Edit" and edit["hook_event_name"] == "PostToolUse"
    assert edit["tool_input"] == {"file_path": f"{CWD}/calc.py", "old_string": "a / b",
                                  "new_string": "a / b if b else 0", "replace_all": False}
    assert edit["tool_response"] == "Edit applied successfully."
    [write] = contract_payloads(OPENCODE, "PostToolUse", tool_use("write", {"filePath": "/abs/NOTES.md",
                                                                           "content": "x\n"}))
    assert write["tool_name"] == "Write" and write["tool_input"] == {"file_path": "/abs/NOTES.md", "content": "x\n"}
    [read] = contract_payloads(OPENCODE, "PostToolUse", tool_use("read", {"filePath": "calc.py", "offset": 10}))
    assert read["tool_name"] == "Read" and read["tool_input"] == {"file_path": f"{CWD}/calc.py", "offset": 10}


def test_a_command_is_bash_and_a_non_zero_exit_a_failure() -> None:
    [ok] = contract_payloads(OPENCODE, "PostToolUse", tool_use("bash", {"command": "ls", "description": "list"},
                                                               "calc.py\n", exit_code=0))
    assert ok["tool_name"] == "Bash" and ok["hook_event_name"] == "PostToolUse"
    assert ok["tool_input"] == {"command": "ls", "description": "list"} and "exit_code" not in ok
    [failed] = contract_payloads(OPENCODE, "PostToolUse", tool_use("bash", {"command": "false"}, "boom\n",
                                                                   exit_code=1))
    assert failed["hook_event_name"] == "PostToolUseFailure" and failed["error"] == "Exit code 1\nboom\n"


def test_a_tool_that_threw_is_a_failure_with_its_error() -> None:
    [failed] = contract_payloads(OPENCODE, "PostToolUse", tool_use("read", {"filePath": "gone.txt"},
                                                                   error="File not found: gone.txt"))
    assert failed["hook_event_name"] == "PostToolUseFailure" and failed["error"] == "File not found: gone.txt"
    assert failed["tool_name"] == "Read" and failed["tool_input"] == {"file_path": f"{CWD}/gone.txt"}


def test_a_patch_is_one_write_or_edit_per_file() -> None:
    events = contract_payloads(OPENCODE, "PostToolUse", tool_use("apply_patch", {"patchText": PATCH}, "Success"))
    assert [(e["tool_name"], e["tool_input"]["file_path"]) for e in events] == [
        ("Write", f"{CWD}/NOTES.md"), ("Edit", f"{CWD}/calc.py")]
    assert events[1]["tool_input"]["new_string"] == "def divide(a, b):\n    return a / b if b else 0"
    assert [e["tool_use_id"] for e in events] == ["call_1#0", "call_1#1"]  # each stored once


def test_other_tools_keep_their_names_and_sessionmem_s_own_get_claude_code_s() -> None:
    [grep] = contract_payloads(OPENCODE, "PostToolUse", tool_use("grep", {"pattern": "divide"}))
    assert grep["tool_name"] == "grep" and grep["tool_input"] == {"pattern": "divide"}
    [search] = contract_payloads(OPENCODE, "PostToolUse", tool_use("sessionmem_search", {"query": "divide"}))
    assert search["tool_name"] == "mcp__sessionmem__search"  # the name whose use the worker does not record


def test_a_payload_that_is_not_what_the_plugin_sends_is_kept_as_it_is() -> None:
    [odd] = contract_payloads(OPENCODE, "PostToolUse", tool_use("edit", "not an object"))  # type: ignore[arg-type]
    assert odd["tool_name"] == "edit" and odd["tool_input"] == "not an object"
    [bad_exit] = contract_payloads(OPENCODE, "PostToolUse", tool_use("bash", {"command": "x"}, exit_code="1"))
    assert bad_exit["hook_event_name"] == "PostToolUse"


def test_the_plugin_s_other_stages_are_the_contract_s_and_its_output_claude_code_s() -> None:
    assert contract_stage(OPENCODE, "Stop") == "Stop"
    prompt = {"session_id": "ses_1", "cwd": CWD, "prompt": "Fix it", "hook_event_name": "UserPromptSubmit"}
    assert contract_payloads(OPENCODE, "UserPromptSubmit", prompt) == [prompt]
    assert not runs_another_agents_hook(OPENCODE, prompt)
    assert agent_output(OPENCODE, "SessionStart", "<memory>", "loaded") == {
        "hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "<memory>"},
        "systemMessage": "loaded"}


FIXTURES = Path(__file__).resolve().parent / "fixtures" / "opencode" / "hooks"


def recorded(name: str) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return payload


def test_the_recorded_session_s_tool_uses_in_the_contract() -> None:
    calc = "/home/user/calcproj/calc.py"
    events = [event for name in ("PostToolUse-read-failed", "PostToolUse-read", "PostToolUse-edit",
                                 "PostToolUse-bash", "PostToolUse-write")
              for event in contract_payloads(OPENCODE, "PostToolUse", recorded(name))]
    assert [(e["hook_event_name"], e["tool_name"]) for e in events] == [
        ("PostToolUseFailure", "Read"), ("PostToolUse", "Read"), ("PostToolUse", "Edit"),
        ("PostToolUseFailure", "Bash"), ("PostToolUse", "Write")]
    assert events[0]["error"] == "File not found: /home/user/calcproj/README.md"
    assert events[2]["tool_input"] == {"file_path": calc, "old_string": "    return a / b",
                                       "new_string": "    if b == 0:\n        raise ZeroDivisionError('b is 0')\n"
                                                     "    return a / b"}
    assert events[3]["error"].startswith("Exit code 1\nTraceback")
    assert events[4]["tool_input"]["file_path"] == "/home/user/calcproj/NOTES.md"  # relative, made absolute
    for name in ("SessionStart", "UserPromptSubmit", "Stop"):
        assert contract_payloads(OPENCODE, name, recorded(name)) == [recorded(name)]
