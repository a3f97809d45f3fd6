"""Another agent's hook payloads in the one hook contract (:mod:`sessionmem.protocol.agent_payloads`)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sessionmem.protocol.agent_payloads import agent_output, contract_payloads, patch_edits, runs_another_agents_hook
from sessionmem.protocol.agents import CLAUDE_CODE, CODEX

PATCH = """*** Begin Patch
*** Add File: notes/todo.md
+# Todo
+- ship it
*** Update File: src/calc.py
@@ def divide(a, b):
-    return a / b
+    if b == 0:
+        raise ZeroDivisionError("b is zero")
+    return a / b
*** Update File: old_name.py
*** Move to: new_name.py
@@
 x = 1
-y = 2
+y = 3
*** Delete File: gone.txt
*** End Patch
"""


def test_each_file_a_patch_touches_becomes_a_write_or_an_edit_of_that_file() -> None:
    edits = patch_edits(PATCH, "/home/user/project")
    assert [(e["tool_name"], e["tool_input"]["file_path"], e["tool_input"]["patch_action"]) for e in edits] == [
        ("Write", "/home/user/project/notes/todo.md", "add"),
        ("Edit", "/home/user/project/src/calc.py", "update"),
        ("Edit", "/home/user/project/old_name.py", "update"),
        ("Edit", "/home/user/project/gone.txt", "delete"),
    ]
    assert edits[0]["tool_input"]["content"] == "# Todo\n- ship it\n"
    assert edits[1]["tool_input"]["old_string"] == "    return a / b"
    assert "raise ZeroDivisionError" in edits[1]["tool_input"]["new_string"]
    assert edits[2]["tool_input"]["moved_to"] == "/home/user/project/new_name.py"
    assert edits[2]["tool_input"]["old_string"] == "x = 1\ny = 2"


def test_a_codex_patch_is_one_contract_tool_use_a_file_and_anything_else_passes_as_it_is() -> None:
    payload = {"session_id": "s", "cwd": "/p", "tool_name": "apply_patch", "tool_use_id": "call_1",
               "tool_input": {"command": PATCH}, "tool_response": "Success"}
    events = contract_payloads(CODEX, "PostToolUse", payload)
    assert [e["tool_use_id"] for e in events] == ["call_1#0", "call_1#1", "call_1#2", "call_1#3"]
    assert {e["hook_event_name"] for e in events} == {"PostToolUse"}
    assert all(e["tool_response"] == "Success" for e in events)
    bash = {"session_id": "s", "cwd": "/p", "tool_name": "Bash", "tool_input": {"command": "ls"}}
    assert contract_payloads(CODEX, "PostToolUse", bash) == [{**bash, "hook_event_name": "PostToolUse"}]
    # Claude Code's own tool of that name (if one existed) is not Codex's patch.
    assert contract_payloads(CLAUDE_CODE, "PostToolUse", payload)[0]["tool_name"] == "apply_patch"


def test_a_patch_that_does_not_parse_is_kept_as_the_tool_use_it_was() -> None:
    payload = {"session_id": "s", "cwd": "/p", "tool_name": "apply_patch", "tool_input": {"command": "garbage"}}
    assert contract_payloads(CODEX, "PostToolUse", payload)[0]["tool_name"] == "apply_patch"


@given(st.one_of(st.text(), st.dictionaries(st.text(), st.one_of(st.text(), st.integers(), st.none(),
                                                                   st.lists(st.text())))))
def test_whatever_a_payload_holds_the_adapter_returns_contract_payloads(tool_input: object) -> None:
    events = contract_payloads(CODEX, "PostToolUse", {"tool_name": "apply_patch", "tool_input": tool_input,
                                                      "cwd": "/p"})
    assert events and all(e["hook_event_name"] == "PostToolUse" for e in events)


def test_the_output_carries_the_event_name_codex_checks() -> None:
    assert agent_output(CODEX, "SessionStart", "memory", "line") == {
        "hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "memory"},
        "systemMessage": "line"}
    assert agent_output(CODEX, "PostToolUse", "") is None


def test_a_claude_code_hook_that_codex_runs_is_known_for_codex_s() -> None:
    codex_turn = {"session_id": "s", "turn_id": "t1", "cwd": "/p", "model": "gpt", "tool_name": "Bash"}
    assert runs_another_agents_hook(CLAUDE_CODE, codex_turn)
    assert not runs_another_agents_hook(CODEX, codex_turn)
    assert not runs_another_agents_hook(CLAUDE_CODE, {"session_id": "s", "cwd": "/p", "tool_name": "Bash"})
