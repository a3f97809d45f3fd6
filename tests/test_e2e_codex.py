"""End to end with the real Codex CLI (npm @openai/codex, pinned in e2e/), run headless against the scripted Responses API.

Each test gives Codex a temporary home (sessionmem.testing.codex_cli) whose model provider is the
scripted server (sessionmem.testing.responses_api) and records what its hooks receive. The tests
prove the harness (the scripted tool calls really run; hooks fire; untrusted hooks do not), keep
tests/fixtures/codex genuine for the pinned CLI, and hold each fact tests/fixtures/codex/README.md
states about Codex's hooks to the CLI itself.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sessionmem.testing.codex_cli import CODEX, CodexHome, mcp_server_table, recorded_payloads, recording_hooks
from sessionmem.testing.codex_recording import record
from sessionmem.testing.responses_api import (
    Item,
    ScriptedResponsesAPI,
    apply_patch,
    input_text,
    is_compaction,
    mcp_tool_call,
    message,
    shell_command,
    tool_outputs,
    tool_search,
    turn_prompt,
)

# One Codex CLI at a time (`make test` runs in parallel).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("codex")]

FIXTURES = Path(__file__).parent / "fixtures" / "codex"
ADD_NOTES = "*** Begin Patch\n*** Add File: NOTES.md\n+first note\n*** End Patch\n"
NOTES_SERVER = """\
from mcp.server.mcpserver import MCPServer

server = MCPServer("notes")


@server.tool()
def lookup(query: str) -> str:
    \"\"\"Look up a remembered note.\"\"\"
    return "remembered: " + query


server.run()
"""
EDIT_CALC = ("*** Begin Patch\n*** Update File: calc.py\n@@\n def add(a, b):\n-    return a + b\n"
             "+    return b + a\n*** End Patch\n")


def turn_of(*steps: Item, reply: str = "Done.") -> Callable[[dict[str, Any]], list[Item]]:
    """A model that makes ``steps`` one at a time in every turn, then replies; a compaction gets a summary."""
    def responder(body: dict[str, Any]) -> list[Item]:
        if is_compaction(body):
            return [message("Scripted summary of the session.")]
        done = len(tool_outputs(body))
        return [steps[done]] if done < len(steps) else [message(reply)]
    return responder


@pytest.fixture(scope="module", autouse=True)
def _codex_installed() -> None:
    assert CODEX.exists(), f"{CODEX} is missing: `make e2e/node_modules/.installed` installs the pinned Codex CLI"


@pytest.fixture
def api() -> Iterator[ScriptedResponsesAPI]:
    with ScriptedResponsesAPI() as server:
        yield server


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    return folder


@pytest.fixture
def hooks(tmp_path: Path) -> Path:
    return tmp_path / "hook-payloads"


@pytest.fixture
def codex(tmp_path: Path, api: ScriptedResponsesAPI, hooks: Path) -> CodexHome:
    return CodexHome.create(tmp_path / "home", api.url, hooks=recording_hooks(hooks))


def events(hooks: Path) -> list[str]:
    return [str(p["hook_event_name"]) for p in recorded_payloads(hooks)]


def developer_texts(body: dict[str, Any]) -> list[str]:
    """The texts of the request's developer messages: where Codex puts what hooks hand back."""
    return ["".join(part.get("text", "") for part in item.get("content", []))
            for item in body.get("input", []) if item.get("type") == "message" and item.get("role") == "developer"]


def test_scripted_shell_commands_and_patches_really_run_in_the_project(
        api: ScriptedResponsesAPI, codex: CodexHome, project: Path) -> None:
    api.responder = turn_of(shell_command("echo from-the-shell > shell.txt && cat shell.txt"),
                            shell_command("ls missing-file"), apply_patch(ADD_NOTES), apply_patch(EDIT_CALC),
                            reply="Edited calc.py.")
    run = codex.exec("Fix calc", project=project).check()

    assert (project / "shell.txt").read_text() == "from-the-shell\n"
    assert (project / "NOTES.md").read_text() == "first note\n"
    assert (project / "calc.py").read_text() == "def add(a, b):\n    return b + a\n"
    assert run.last_message == "Edited calc.py." and run.session_id
    # What each tool gave back reached the model in the next request.
    outputs = [json.dumps(o) for o in tool_outputs(api.bodies()[-1])]
    assert len(outputs) == 4 and "from-the-shell" in outputs[0] and "missing-file" in outputs[1]
    exits = [e["item"]["exit_code"] for e in run.events
             if e.get("type") == "item.completed" and e["item"].get("type") == "command_execution"]
    assert exits[0] == 0 and exits[1] != 0
    [rollout] = codex.rollouts()
    assert run.session_id in rollout.name
    assert api.side_requests == []  # the models list and the rest: nothing but turns was asked


def test_hooks_fire_with_the_bypass_flag_with_claude_codes_field_names(
        api: ScriptedResponsesAPI, codex: CodexHome, project: Path, hooks: Path) -> None:
    api.responder = turn_of(shell_command("echo hi"), apply_patch(ADD_NOTES))
    run = codex.exec("Take a note", project=project, bypass_hook_trust=True).check()

    payloads = recorded_payloads(hooks)
    assert events(hooks) == ["SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "PreToolUse",
                             "PostToolUse", "Stop", "SessionEnd"]
    assert {p["session_id"] for p in payloads} == {run.session_id}
    assert {p["cwd"] for p in payloads} == {str(project)}
    start, prompt, _, shell, _, patch, stop, _ = payloads
    assert start["source"] == "startup" and prompt["prompt"] == "Take a note"
    assert shell["tool_name"] == "Bash" and shell["tool_input"] == {"command": "echo hi"}
    assert shell["tool_response"] == "hi\n"
    assert patch["tool_name"] == "apply_patch" and patch["tool_input"] == {"command": ADD_NOTES}
    assert stop["last_assistant_message"] == "Done."


def test_untrusted_hooks_do_not_run_and_nothing_says_so(
        api: ScriptedResponsesAPI, codex: CodexHome, project: Path, hooks: Path) -> None:
    api.responder = turn_of(shell_command("echo hi"))
    run = codex.exec("Say hi", project=project).check()

    assert recorded_payloads(hooks) == []
    assert run.last_message == "Done."
    notices = [e["item"]["message"] for e in run.events if e.get("item", {}).get("type") == "error"]
    assert notices == [f"clamping SessionEnd hook timeout to 3s in {codex.hooks_path}"]
    assert "trust" not in run.process.stderr.replace(str(codex.home), "HOME")
    assert {h["trustStatus"] for h in codex.list_hooks(project)} == {"untrusted"}


def test_hooks_trusted_through_the_app_server_run_until_they_change(
        api: ScriptedResponsesAPI, codex: CodexHome, project: Path, hooks: Path) -> None:
    listed = codex.list_hooks(project)
    assert {h["eventName"] for h in listed} >= {"sessionStart", "userPromptSubmit", "postToolUse", "stop",
                                                "sessionEnd", "preCompact", "postCompact"}
    assert all(h["currentHash"].startswith("sha256:") and h["sourcePath"] == str(codex.hooks_path) for h in listed)
    codex.trust_hooks(project, [h for h in listed if h["eventName"] in ("sessionStart", "stop")])

    assert {h["eventName"]: h["trustStatus"] for h in codex.list_hooks(project)}["stop"] == "trusted"
    config = codex.config_path.read_text()
    assert f'[hooks.state."{codex.hooks_path}:stop:0:0"]' in config and "trusted_hash = \"sha256:" in config
    codex.exec("Say hi", project=project).check()
    assert events(hooks) == ["SessionStart", "Stop"]

    # A changed definition (here its timeout) is "modified": not run until trusted again.
    document = json.loads(codex.hooks_path.read_text())
    document["hooks"]["Stop"][0]["hooks"][0]["timeout"] = 29
    codex.write_hooks(document)
    assert {h["eventName"]: h["trustStatus"] for h in codex.list_hooks(project)}["stop"] == "modified"
    for payload in hooks.glob("*-*.json"):
        payload.unlink()
    codex.exec("Say hi again", project=project).check()
    assert events(hooks) == ["SessionStart"]


def test_the_recorded_fixtures_are_what_the_pinned_codex_sends(tmp_path: Path) -> None:
    fresh = record(tmp_path / "recording")

    recorded = {path.stem: json.loads(path.read_text()) for path in (FIXTURES / "hooks").glob("*.json")}
    assert set(fresh.payloads) == set(recorded)
    for name, payload in fresh.payloads.items():
        assert list(payload) == list(recorded[name]), name
        assert payload.get("source") == recorded[name].get("source")
        assert payload.get("tool_input", {}).keys() == recorded[name].get("tool_input", {}).keys()
        assert payload["cwd"] == "/home/user/project", name  # the scrub left no path of this machine
    assert fresh.order == ["SessionStart", "UserPromptSubmit", *["PreToolUse", "PostToolUse"] * 4, "PreToolUse",
                           "Stop", "SessionEnd", "PreCompact", "PostCompact", "SessionStart", "SessionStart",
                           "UserPromptSubmit", "Stop", "SessionEnd"]

    def kinds(text: str) -> set[tuple[str, str]]:
        lines = [json.loads(line) for line in text.splitlines()]
        return {(line["type"], str(line["payload"].get("type"))) for line in lines}

    assert kinds(fresh.rollout) == kinds((FIXTURES / "rollout-sample.jsonl").read_text())
    assert str(tmp_path) not in fresh.rollout


def context(event: str, text: str) -> str:
    return json.dumps({"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}})


def test_session_start_prompt_and_tool_context_reach_the_model_as_developer_messages(
        api: ScriptedResponsesAPI, codex: CodexHome, project: Path, hooks: Path) -> None:
    api.responder = turn_of(shell_command("echo hi"))
    (hooks / "SessionStart.reply").write_text(context("SessionStart", "from SessionStart"))
    (hooks / "UserPromptSubmit.reply").write_text("plain text from UserPromptSubmit")
    (hooks / "PostToolUse.reply").write_text(context("PostToolUse", "from PostToolUse"))
    (hooks / "Stop.reply").write_text(json.dumps({"systemMessage": "a systemMessage from Stop"}))
    (hooks / "PreToolUse.reply").write_text(json.dumps({"systemMessage": "a systemMessage", "unknownField": 1}))
    codex.exec("Say hi", project=project, bypass_hook_trust=True).check()

    first, second = api.bodies()
    assert developer_texts(first)[-2:] == ["from SessionStart", "plain text from UserPromptSubmit"]
    assert "from PostToolUse" not in input_text(first) and "from PostToolUse" in developer_texts(second)
    assert all("systemMessage" not in input_text(body) for body in (first, second))
    assert events(hooks)[-2:] == ["Stop", "SessionEnd"]  # odd fields or a systemMessage break nothing


def test_additional_context_above_10000_bytes_is_cut_and_saved_whole_in_tmpdir(
        api: ScriptedResponsesAPI, codex: CodexHome, project: Path, hooks: Path) -> None:
    whole = "a" * 9_990 + "WHOLE-TAIL"  # 10,000 bytes: 2,500 tokens at Codex's 4 bytes a token
    cut = "CUT-HEAD" + "b" * 9_990 + "CUT-TAIL"  # 10,006 bytes
    (hooks / "SessionStart.reply").write_text(context("SessionStart", whole))
    (hooks / "UserPromptSubmit.reply").write_text(context("UserPromptSubmit", cut))
    codex.exec("Say hi", project=project, bypass_hook_trust=True).check()

    texts = developer_texts(api.bodies()[0])
    assert whole in texts
    [truncated] = [text for text in texts if "CUT-HEAD" in text]
    assert truncated.startswith("Warning: truncated output (original token count: 2502)")
    assert "CUT-TAIL" in truncated and cut not in truncated and len(truncated) < 10_400
    [saved] = (codex.home / "tmp" / "hook_outputs").glob("*/*.txt")
    assert f"Full hook output saved to: {saved}" in truncated and saved.read_text() == cut


def test_failing_hooks_are_passed_over_but_exit_2_blocks_a_prompt(
        api: ScriptedResponsesAPI, codex: CodexHome, project: Path, hooks: Path) -> None:
    api.responder = turn_of(shell_command("echo hi"))
    for event in ("SessionStart", "PreToolUse", "Stop"):
        (hooks / f"{event}.exit").write_text("1")
    (hooks / "PostToolUse.reply").write_text("not json {")
    run = codex.exec("Say hi", project=project, bypass_hook_trust=True).check()
    assert run.last_message == "Done." and len(api.requests) == 2
    assert "not json" not in input_text(api.bodies()[1])  # a PostToolUse's stray stdout is dropped

    (hooks / "UserPromptSubmit.exit").write_text("2")
    blocked = codex.exec("Never asked", project=project, bypass_hook_trust=True).check()
    assert len(api.requests) == 2  # the prompt never reached the model, and the run still exits 0
    assert blocked.last_message is None and events(hooks)[-2:] == ["UserPromptSubmit", "SessionEnd"]


def test_exit_2_from_post_tool_use_replaces_the_tool_output_the_model_sees(
        api: ScriptedResponsesAPI, codex: CodexHome, project: Path, hooks: Path) -> None:
    api.responder = turn_of(shell_command("echo the-real-output"))
    (hooks / "PostToolUse.exit").write_text("2")
    codex.exec("Say hi", project=project, bypass_hook_trust=True).check()

    [output] = tool_outputs(api.bodies()[1])
    assert "scripted failure of the PostToolUse hook" in output["output"]
    assert "the-real-output" not in output["output"]


def test_hook_timeout_is_in_seconds_and_a_late_hook_is_passed_over(
        api: ScriptedResponsesAPI, tmp_path: Path, project: Path, hooks: Path) -> None:
    document = recording_hooks(hooks)
    document["hooks"]["SessionStart"][0]["hooks"][0]["timeout"] = 5  # 5 s: a 0.3 s hook finishes
    document["hooks"]["UserPromptSubmit"][0]["hooks"][0]["timeout"] = 1  # 1 s: a 5 s hook is stopped
    codex = CodexHome.create(tmp_path / "home", api.url, hooks=document)
    (hooks / "SessionStart.sleep").write_text("0.3")
    (hooks / "SessionStart.reply").write_text(context("SessionStart", "in time"))
    (hooks / "UserPromptSubmit.sleep").write_text("5")
    (hooks / "UserPromptSubmit.reply").write_text(context("UserPromptSubmit", "too late"))
    run = codex.exec("Say hi", project=project, bypass_hook_trust=True).check()

    assert "in time" in developer_texts(api.bodies()[0])
    assert "too late" not in input_text(api.bodies()[0]) and run.last_message == "Done."
    assert "UserPromptSubmit" not in events(hooks)  # stopped before it saved its payload


def test_session_end_is_waited_for_up_to_3_seconds(
        api: ScriptedResponsesAPI, codex: CodexHome, project: Path, hooks: Path) -> None:
    (hooks / "SessionEnd.sleep").write_text("1")
    run = codex.exec("Say hi", project=project, bypass_hook_trust=True).check()
    assert events(hooks)[-1] == "SessionEnd"  # saved before codex exited
    assert "clamping SessionEnd hook timeout to 3s" in json.dumps(run.events)

    (hooks / "SessionEnd.sleep").write_text("4.5")
    started = time.monotonic()
    codex.exec("Say hi", project=project, bypass_hook_trust=True).check()
    time.sleep(max(0.0, started + 6.0 - time.monotonic()))  # past the 4.5 s it would have taken
    assert events(hooks).count("SessionEnd") == 1  # the second one was stopped at 3 s


def test_compaction_fires_its_hooks_and_session_start_context_reaches_the_compacted_request(
        api: ScriptedResponsesAPI, codex: CodexHome, project: Path, hooks: Path) -> None:
    api.responder = turn_of(shell_command("echo before-compaction"))
    first = codex.exec("Start", project=project, bypass_hook_trust=True).check()
    for source in ("resume", "compact"):
        (hooks / f"SessionStart.{source}.reply").write_text(
            context("SessionStart", f"memory for the new context ({source})"))
    (hooks / "PreCompact.reply").write_text(context("PreCompact", "from PreCompact"))
    (hooks / "PostCompact.reply").write_text(context("PostCompact", "from PostCompact"))
    api.responder = turn_of()
    codex.resume("Go on", project=project, session_id=first.session_id, bypass_hook_trust=True,
                 auto_compact_token_limit=1000).check()

    payloads = recorded_payloads(hooks)
    resumed = [(p["hook_event_name"], p.get("source") or p.get("trigger")) for p in payloads[6:]]
    assert resumed == [("PreCompact", "auto"), ("PostCompact", "auto"), ("SessionStart", "resume"),
                       ("SessionStart", "compact"), ("UserPromptSubmit", None), ("Stop", None), ("SessionEnd", None)]
    # No SessionStart names a turn; the compaction's hooks name the turn they come before.
    assert all("turn_id" not in p for p in payloads if p["hook_event_name"] == "SessionStart")
    assert payloads[6]["turn_id"] == payloads[7]["turn_id"] == payloads[10]["turn_id"]
    bodies = api.bodies()
    assert [is_compaction(body) for body in bodies] == [False, False, True, False]
    compacted = bodies[-1]
    assert turn_prompt(compacted) == "Go on" and "before-compaction" not in input_text(compacted)
    assert "Scripted summary of the session." in input_text(compacted)
    # Both SessionStarts' texts, in the order they fired, in the same (compacted) request.
    assert [text for text in developer_texts(compacted) if "memory for the new context" in text] == [
        "memory for the new context (resume)", "memory for the new context (compact)"]
    assert "from PreCompact" not in input_text(compacted) and "from PostCompact" not in input_text(compacted)


def test_the_two_session_starts_after_a_resumed_sessions_compaction_run_one_after_the_other(
        api: ScriptedResponsesAPI, codex: CodexHome, project: Path, hooks: Path) -> None:
    first = codex.exec("Start", project=project, bypass_hook_trust=True).check()
    (hooks / "SessionStart.sleep").write_text("1")  # the payload is saved after it
    codex.resume("Go on", project=project, session_id=first.session_id, bypass_hook_trust=True,
                 auto_compact_token_limit=1000).check()
    saved = sorted(int(path.name.split("-", 1)[0]) for path in hooks.glob("*-SessionStart.json"))[-2:]
    assert saved[1] - saved[0] >= 1_000_000_000  # the second began once the first had ended


def test_a_plain_resume_keeps_the_earlier_runs_context_and_adds_its_own(
        api: ScriptedResponsesAPI, codex: CodexHome, project: Path, hooks: Path) -> None:
    (hooks / "SessionStart.startup.reply").write_text(context("SessionStart", "memory at startup"))
    (hooks / "SessionStart.resume.reply").write_text(context("SessionStart", "memory at resume"))
    first = codex.exec("Start", project=project, bypass_hook_trust=True).check()
    codex.resume("Go on", project=project, session_id=first.session_id, bypass_hook_trust=True).check()
    resumed = [(p["hook_event_name"], p.get("source")) for p in recorded_payloads(hooks)[4:]]
    assert resumed == [("SessionStart", "resume"), ("UserPromptSubmit", None), ("Stop", None), ("SessionEnd", None)]
    bodies = api.bodies()
    assert len(bodies) == 2 and turn_prompt(bodies[1]) == "Go on"
    texts = developer_texts(bodies[1])
    assert texts.index("memory at startup") < texts.index("memory at resume")  # the earlier run's is still there


def test_a_compaction_within_a_turn_fires_session_start_compact_and_drops_the_earlier_context(
        api: ScriptedResponsesAPI, codex: CodexHome, project: Path, hooks: Path) -> None:
    (hooks / "SessionStart.startup.reply").write_text(context("SessionStart", "memory at startup"))
    (hooks / "SessionStart.compact.reply").write_text(context("SessionStart", "memory after compaction"))

    def responder(body: dict[str, Any]) -> list[Item]:
        if is_compaction(body):
            return [message("Scripted summary of the session.")]
        if "Scripted summary of the session." in input_text(body):
            return [message("Done.")]  # the compacted input no longer holds the tool outputs
        return [shell_command("echo one")] if not tool_outputs(body) else [shell_command("echo two")]

    api.responder = responder
    codex.exec("Start", project=project, bypass_hook_trust=True, auto_compact_token_limit=1000).check()
    payloads = recorded_payloads(hooks)
    events_ = [(p["hook_event_name"], p.get("source") or p.get("trigger")) for p in payloads]
    assert events_ == [("SessionStart", "startup"), ("UserPromptSubmit", None), ("PreToolUse", None),
                       ("PostToolUse", None), ("PreCompact", "auto"), ("PostCompact", "auto"),
                       ("SessionStart", "compact"), ("Stop", None), ("SessionEnd", None)]
    assert payloads[1]["turn_id"] == payloads[4]["turn_id"]  # one turn
    bodies = api.bodies()
    assert [is_compaction(body) for body in bodies] == [False, True, False]
    texts = developer_texts(bodies[2])
    assert "memory after compaction" in texts and "memory at startup" not in texts


def test_an_mcp_server_in_config_toml_is_found_called_and_seen_by_the_hooks(
        api: ScriptedResponsesAPI, tmp_path: Path, project: Path, hooks: Path) -> None:
    server = tmp_path / "notes_server.py"
    server.write_text(NOTES_SERVER)
    codex = CodexHome.create(tmp_path / "home", api.url, hooks=recording_hooks(hooks),
                             extra_config=mcp_server_table("notes", sys.executable, str(server), required=True))
    api.responder = turn_of(tool_search("Look up a remembered note"), mcp_tool_call("notes", "lookup", {"query": "x"}))
    run = codex.exec("Look it up", project=project, bypass_hook_trust=True).check()

    first, found, called = api.bodies()
    assert "mcp__notes" not in json.dumps(first["tools"])  # deferred: found by a search, not offered
    [search] = tool_outputs(found)
    assert [(n["name"], [t["name"] for t in n["tools"]]) for n in search["tools"]] == [("mcp__notes", ["lookup"])]
    assert "remembered: x" in tool_outputs(called)[-1]["output"]
    assert [e["item"]["server"] for e in run.events if e.get("item", {}).get("type") == "mcp_tool_call"] == ["notes"] * 2
    post = next(p for p in recorded_payloads(hooks) if p["hook_event_name"] == "PostToolUse")
    assert post["tool_name"] == "mcp__notes__lookup" and post["tool_input"] == {"query": "x"}
    assert post["tool_response"]["content"] == [{"type": "text", "text": "remembered: x"}]
    assert post["tool_response"]["isError"] is False


def test_claude_code_matchers_edit_and_write_match_apply_patch(
        api: ScriptedResponsesAPI, tmp_path: Path, project: Path) -> None:
    matchers = {"bash": "Bash", "edit-write": "Edit|Write", "write": "Write", "apply-patch": "apply_patch", "any": "*"}
    groups = []
    for folder, matcher in matchers.items():
        [[handler]] = [group["hooks"] for group in recording_hooks(tmp_path / folder)["hooks"]["PostToolUse"]]
        groups.append({"matcher": matcher, "hooks": [handler]})
    codex = CodexHome.create(tmp_path / "home", api.url, hooks={"hooks": {"PostToolUse": groups}})
    api.responder = turn_of(shell_command("echo hi"), apply_patch(ADD_NOTES))
    codex.exec("Take a note", project=project, bypass_hook_trust=True).check()

    seen = {folder: [p["tool_name"] for p in recorded_payloads(tmp_path / folder)] for folder in matchers}
    assert seen == {"bash": ["Bash"], "edit-write": ["apply_patch"], "write": ["apply_patch"],
                    "apply-patch": ["apply_patch"], "any": ["Bash", "apply_patch"]}


def test_project_hooks_load_only_in_a_trusted_project_and_need_their_own_trust(
        api: ScriptedResponsesAPI, tmp_path: Path, project: Path, hooks: Path) -> None:
    codex = CodexHome.create(tmp_path / "home", api.url)
    (project / ".codex").mkdir()
    (project / ".codex" / "hooks.json").write_text(json.dumps(recording_hooks(hooks, events=("SessionStart",))))
    assert codex.list_hooks(project) == []
    codex.exec("Say hi", project=project, bypass_hook_trust=True).check()
    assert events(hooks) == []

    codex.trust_project(project)
    [hook] = codex.list_hooks(project)
    assert (hook["source"], hook["trustStatus"]) == ("project", "untrusted")
    assert hook["key"] == f"{project / '.codex' / 'hooks.json'}:session_start:0:0"
    codex.exec("Say hi", project=project).check()
    assert events(hooks) == []
    codex.trust_hooks(project)
    codex.exec("Say hi", project=project).check()
    assert events(hooks) == ["SessionStart"]


@pytest.mark.parametrize("required", [False, True])
def test_codex_waits_only_for_a_required_mcp_server(
        api: ScriptedResponsesAPI, tmp_path: Path, project: Path, required: bool) -> None:
    broken = tmp_path / "broken_server.py"
    broken.write_text("raise SystemExit(1)\n")
    codex = CodexHome.create(tmp_path / "home", api.url,
                             extra_config=mcp_server_table("notes", sys.executable, str(broken), required=required))
    api.responder = turn_of(mcp_tool_call("notes", "lookup", {"query": "x"}))
    run = codex.exec("Look it up", project=project)

    if required:  # the run waits for the server, and fails without asking the model anything
        assert run.returncode != 0 and api.requests == []
    else:  # the run goes on without it: the call finds no such tool
        run.check()
        assert "unsupported call" in tool_outputs(api.bodies()[-1])[0]["output"]


def test_a_system_message_is_a_warning_of_the_hook_run_for_app_server_clients_and_exec_prints_none(
        api: ScriptedResponsesAPI, codex: CodexHome, project: Path, hooks: Path) -> None:
    (hooks / "SessionStart.reply").write_text(json.dumps({
        "systemMessage": "sessionmem: 3 memories loaded",
        "hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "the memory"}}))
    run = codex.exec("Say hi", project=project, bypass_hook_trust=True).check()
    assert "3 memories loaded" not in run.process.stdout + run.process.stderr
    assert "the memory" in developer_texts(api.bodies()[0])

    codex.trust_hooks(project, [h for h in codex.list_hooks(project) if h["eventName"] == "sessionStart"])
    with codex.app_server(project) as server:  # what the TUI and the IDE extensions are told
        thread = server.request("thread/start", {"cwd": str(project)})["thread"]
        server.request("turn/start", {"threadId": thread["id"], "input": [{"type": "text", "text": "Say hi"}]})
        server.wait_for("turn/completed")
    [run_summary] = [n["params"]["run"] for n in server.notifications
                     if n["method"] == "hook/completed" and n["params"]["run"]["eventName"] == "sessionStart"]
    assert run_summary["status"] == "completed"
    assert run_summary["entries"] == [{"kind": "warning", "text": "sessionmem: 3 memories loaded"},
                                      {"kind": "context", "text": "the memory"}]


def test_a_hook_without_a_timeout_gets_600_seconds_and_session_end_1(
        api: ScriptedResponsesAPI, tmp_path: Path, project: Path) -> None:
    plain = [{"hooks": [{"type": "command", "command": "true"}]}]
    codex = CodexHome.create(tmp_path / "home", api.url,
                             hooks={"hooks": {event: plain for event in ("SessionStart", "PostToolUse", "SessionEnd")}})
    timeouts = {h["eventName"]: h["timeoutSec"] for h in codex.list_hooks(project)}
    assert timeouts == {"sessionStart": 600, "postToolUse": 600, "sessionEnd": 1}
