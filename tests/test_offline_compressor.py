"""The offline compressor turns genuine tool payloads into specific, useful observations and summaries.

``fixtures/hooks-vsla-build-turn.jsonl``: the hook payloads ``sessionmem.replay.convert`` makes of
public transcripts of Durban-Designer/vsla (MIT; the corpus described in
``fixtures/transcripts/README.md``): the first turn of session 0a725fb5 (a LaTeX paper that fails to
build, edits, then builds), four routine git commands of session 6dc88126 and a command the user
refused in session dc7e9081.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from sessionmem.compress.base import CompressorStatistics, SessionContext
from sessionmem.compress.offline import OfflineCompressor, build_offline_observation, build_offline_summary
from sessionmem.events import ObservationEvent, SummarizeEvent
from sessionmem.records import ROUTINE_CONCEPT, CompressedObservation, ObservationRow, SummaryInputs
from sessionmem.search.context import group

from .conftest import FIXTURES

CONTEXT = SessionContext("s", "calcproj", "/home/dev/calcproj", "Fix the divide-by-zero bug in calc.py")


def event_from(payload: dict[str, Any]) -> ObservationEvent:
    failed = payload["hook_event_name"] == "PostToolUseFailure"
    return ObservationEvent(claude_session_id=payload["session_id"], project="calcproj", tool_name=payload["tool_name"],
                            tool_use_id=payload["tool_use_id"], tool_input=payload["tool_input"],
                            tool_response=payload.get("tool_response"), cwd=payload["cwd"],
                            agent_type=payload.get("agent_type", ""), failed=failed, error=payload.get("error", ""))


def by_id(payloads: list[dict[str, Any]]) -> dict[str, ObservationEvent]:
    return {p["tool_use_id"]: event_from(p) for p in payloads
            if p["hook_event_name"] in ("PostToolUse", "PostToolUseFailure")}


def test_observations_from_genuine_payloads(payloads: list[dict[str, Any]]) -> None:
    events = by_id(payloads)
    read = build_offline_observation(CONTEXT, events["toolu_c01"])
    assert (read.type, read.title, read.files_read) == ("discovery", "Read calc.py", ("/home/dev/calcproj/calc.py",))
    assert "calc.py has 5 lines" in read.facts

    edit = build_offline_observation(CONTEXT, events["toolu_c03"])
    assert edit.type == "bugfix" and edit.title == "Edited calc.py (-1 +3 lines)"
    assert edit.files_modified == ("/home/dev/calcproj/calc.py",)
    # The edit kept `return a / b` below two new lines: what is new, not "replaced x with x".
    assert "added `if b == 0:`" in edit.facts

    grep = build_offline_observation(CONTEXT, events["toolu_c02"])  # a look at a file: routine
    assert grep.title == "Looked around the files" and "command: grep -n 'def ' calc.py" in grep.facts
    assert grep.concepts == (ROUTINE_CONCEPT,)

    failure = build_offline_observation(CONTEXT, events["toolu_c04"])
    assert failure.type == "failure" and failure.title.startswith("Failed: Ran `python3 -c")
    assert "exit status 1" in failure.facts
    assert any(f.startswith("error: ZeroDivisionError") for f in failure.facts)

    write = build_offline_observation(SessionContext("s", "calcproj", "/home/dev/calcproj", "Now add a test file"),
                                      events["toolu_c06"])
    assert write.type == "feature" and write.title == "Wrote test_calc.py (5 lines)"
    assert "defines test_divide_by_zero" in write.facts

    sub = build_offline_observation(CONTEXT, events["toolu_s01"])
    assert "done by the general-purpose subagent" in sub.facts
    unnamed = msgspec.structs.replace(events["toolu_s01"], agent_id="sidechain", agent_type="")  # a 1.0 sidechain
    assert "done by a subagent" in build_offline_observation(CONTEXT, unnamed).facts


def test_a_delegation_names_its_agent_with_the_right_article() -> None:
    def delegated(agent: str) -> str:
        event = ObservationEvent(claude_session_id="s", project="calcproj", tool_name="Task", tool_use_id="t",
                                 tool_input={"subagent_type": agent, "description": "find the parser"})
        return build_offline_observation(CONTEXT, event).title

    assert delegated("Explore") == "Delegated to an Explore agent: find the parser"
    assert delegated("general-purpose") == "Delegated to a general-purpose agent: find the parser"


@pytest.mark.parametrize(("old", "new", "fact"), [
    ("numpy>=1.21\nscipy", "numpy>=1.21\nscipy\ntorch", "added `torch`"),  # not "replaced `numpy>=1.21` with itself"
    ("a = 1\nb = 2\nc = 3", "a = 1\nb = 20\nc = 3", "replaced `b = 2` with `b = 20`"),
    ("a = 1\nb = 2\nc = 3", "a = 1\nc = 3", "removed `b = 2`"),
    ("    x = 1", "x = 1", "changed whitespace only"),
    ("", "first line\nsecond", "added `first line`"),
    # Stored backticks cannot end the span: the fence is longer than any run inside, padded at an edge.
    ("x = `a`", "x = ``b``", "replaced `` x = `a` `` with ``` x = ``b`` ```"),
])
def test_an_edit_is_told_by_its_first_changed_line(old: str, new: str, fact: str) -> None:
    event = ObservationEvent(claude_session_id="s", project="calcproj", tool_name="Edit", tool_use_id="t",
                             tool_input={"file_path": "/home/dev/calcproj/x.py", "old_string": old, "new_string": new},
                             tool_response={}, cwd="/home/dev/calcproj")
    assert build_offline_observation(CONTEXT, event).facts == (fact,)


def test_a_command_with_backticks_stays_inside_its_code_span() -> None:
    def title(command: str) -> str:
        event = ObservationEvent(claude_session_id="s", project="calcproj", tool_name="Bash", tool_use_id="t",
                                 tool_input={"command": command}, tool_response={"stdout": ""})
        return build_offline_observation(CONTEXT, event).title

    assert title("./deploy.sh `whoami` ok") == "Ran ``./deploy.sh `whoami` ok``"
    assert title("`git status` and `echo done|wc -c`") == "Ran `` `git status` and `echo done|wc -c` ``"
    assert title("./deploy.sh") == "Ran `./deploy.sh`"
    assert title("make test") == "Tests passed: `make test`"


def test_deterministic(payloads: list[dict[str, Any]]) -> None:
    events = list(by_id(payloads).values())
    assert [build_offline_observation(CONTEXT, e) for e in events] == [build_offline_observation(CONTEXT, e) for e in events]


async def test_summary_from_observations(payloads: list[dict[str, Any]]) -> None:
    compressor = OfflineCompressor()
    events = list(by_id(payloads).values())[:4]
    observations = await compressor.compress(CONTEXT, events)
    rows = [ObservationRow(id=n, claude_session_id="s", project="calcproj", prompt_number=1, tool_name=e.tool_name,
                           tool_use_id=e.tool_use_id, agent_id=None, agent_type=None, failed=e.failed, type=o.type,
                           title=o.title, subtitle=o.subtitle, facts=list(o.facts), narrative=o.narrative,
                           concepts=list(o.concepts), files_read=list(o.files_read),
                           files_modified=list(o.files_modified), compressed=True, compressor="offline", model=None,
                           input_tokens=0, output_tokens=0, created_at=0.0)
            for n, (e, o) in enumerate(zip(events, observations))]
    summary = build_offline_summary(
        CONTEXT, SummarizeEvent("s", "calcproj", last_assistant_message="Fixed divide(). Next, add a test.",
                                prompt_number=1),
        SummaryInputs(prompts=["Fix the divide-by-zero bug in calc.py"], observations=rows))
    assert summary.request == "Fix the divide-by-zero bug in calc.py"
    assert "Read calc.py" in summary.investigated
    assert summary.completed == "Changed calc.py; Fixed divide(). Next, add a test."
    assert summary.learned == ""  # a failed command is not a lesson
    assert summary.next_steps == "Next, add a test."
    assert compressor.statistics() == CompressorStatistics(backend="offline", tool_uses=4, summaries=0)

    # A later turn without tool use (`/exit`, a question answered from memory) is summarized as
    # itself: its own prompt, no work of the turn before, even when the transcript's last user
    # line is Claude Code's own.
    second = build_offline_summary(
        CONTEXT, SummarizeEvent("s", "calcproj", last_user_message="[Request interrupted by user]", prompt_number=2),
        SummaryInputs(prompts=["Fix the divide-by-zero bug in calc.py", "Thanks, that is all"], observations=rows))
    assert second.request == "Thanks, that is all"
    assert second.investigated == "" and second.completed == ""
    assert second.notes == "0 tool uses (0 failed) in prompt 2 of 2."


def test_the_output_of_a_background_task_says_what_it_ran_and_how_it_ended() -> None:
    # As Claude Code 2.1 records a TaskOutput (toolUseResult of a corpus transcript).
    response = {"retrieval_status": "success", "task": {
        "task_id": "bdea11d", "task_type": "local_bash", "status": "failed",
        "description": "Connect to zima via hostname",
        "output": "ssh: connect to host zima.example port 22: Connection timed out\r\n", "exitCode": 255}}
    event = ObservationEvent(claude_session_id="s", project="calcproj", tool_name="TaskOutput", tool_use_id="t",
                             tool_input={"task_id": "bdea11d", "block": True, "timeout": 15000},
                             tool_response=response)
    observation = build_offline_observation(CONTEXT, event)
    assert (observation.type, observation.title) == ("failure", "Background task failed: Connect to zima via hostname")
    assert observation.facts == ("output: ssh: connect to host zima.example port 22: Connection timed out",
                                 "task failed, exit status 255")


def bash(command: str, output: str = "", *, failed: bool = False, error: str = "") -> ObservationEvent:
    return ObservationEvent(claude_session_id="s", project="calcproj", tool_name="Bash", tool_use_id=command,
                            tool_input={"command": command}, tool_response={"stdout": output, "stderr": ""},
                            cwd="/home/dev/calcproj", failed=failed, error=error, prompt_number=1)


def rows_of(events: list[ObservationEvent], observations: list[CompressedObservation]) -> list[ObservationRow]:
    return [ObservationRow(id=n, claude_session_id="s", project="calcproj", prompt_number=e.prompt_number or 1,
                           tool_name=e.tool_name, tool_use_id=e.tool_use_id, agent_id=None, agent_type=None,
                           failed=e.failed, type=o.type, title=o.title, subtitle=o.subtitle, facts=list(o.facts),
                           narrative=o.narrative, concepts=list(o.concepts), files_read=list(o.files_read),
                           files_modified=list(o.files_modified), compressed=True, compressor="offline", model=None,
                           input_tokens=0, output_tokens=0, created_at=0.0)
            for n, (e, o) in enumerate(zip(events, observations), start=1)]


def summary_of(events: list[ObservationEvent], message: str = "", prompt: str = "Fix the divide-by-zero bug"):
    context = SessionContext("s", "calcproj", "/home/dev/calcproj", prompt)
    rows = rows_of(events, [build_offline_observation(context, e) for e in events])
    return build_offline_summary(context, SummarizeEvent("s", "calcproj", last_assistant_message=message,
                                                         prompt_number=1), SummaryInputs([prompt], rows))


@pytest.mark.parametrize(("command", "title"), [
    ("git status", "Checked the git state"),
    ("cd /home/dev/calcproj && git log --oneline -3", "Checked the git state"),
    ("git diff HEAD~1 -- calc.py | head -40", "Checked the git state"),
    ("gh auth status", "Checked the git state"),
    ("ls -la", "Looked around the files"),
    ("pwd", "Looked around the files"),
    ('find . -name "*.py" 2>/dev/null | head -5', "Looked around the files"),
    ("which gitleaks", "Checked the environment"),
    ("nvcc --version", "Checked the environment"),
    ("mise run fmt", "Formatted the code"),
    ("ruff format .", "Formatted the code"),
])
def test_routine_commands_are_titled_by_their_sort(command: str, title: str) -> None:
    observation = build_offline_observation(CONTEXT, bash(command, "whatever it printed"))
    assert (observation.type, observation.title, observation.concepts) == ("discovery", title, (ROUTINE_CONCEPT,))
    assert not any(fact.startswith("output:") for fact in observation.facts)  # no activity log
    assert f"command: {command}" in observation.facts  # still found by a search for it


@pytest.mark.parametrize("command", [
    "cd build && make -j4", 'git config user.email "dev@example.com"', "echo 'export X=1' >> ~/.bashrc",
    "rm -rf .idea", "git push --force origin main", "cat > notes.md <<EOF\nhello\nEOF", "python3 -c 'print(1)'",
])
def test_a_command_that_changes_something_is_not_routine(command: str) -> None:
    assert ROUTINE_CONCEPT not in build_offline_observation(CONTEXT, bash(command)).concepts


def test_a_failed_routine_command_is_not_a_failure() -> None:
    observation = build_offline_observation(CONTEXT, bash("which wifiman-desktop", failed=True, error="Error"))
    assert (observation.type, observation.title) == ("discovery", "Checked the environment")
    assert summary_of([bash("which wifiman-desktop", failed=True, error="Error")]).learned == ""


PYTEST_FAILED = """============================= test session starts ==============================
collected 3 items

test_calc.py .F.                                                         [100%]

=================================== FAILURES ===================================
______________________________ test_divide_by_zero _____________________________
>       assert divide(1, 0) is None
E       ZeroDivisionError: division by zero
=========================== short test summary info ============================
FAILED test_calc.py::test_divide_by_zero - ZeroDivisionError: division by zero
========================= 1 failed, 2 passed in 0.03s =========================="""
PYTEST_PASSED = "test_calc.py ...                                                         [100%]\n3 passed in 0.01s"


def edit(path: str, old: str, new: str) -> ObservationEvent:
    return ObservationEvent(claude_session_id="s", project="calcproj", tool_name="Edit", tool_use_id=path + new,
                            tool_input={"file_path": path, "old_string": old, "new_string": new}, tool_response={},
                            cwd="/home/dev/calcproj", prompt_number=1)


def test_failing_then_passing_tests_are_kept_as_such() -> None:
    failing = build_offline_observation(CONTEXT, bash("pytest -q", PYTEST_FAILED, failed=True,
                                                      error="Exit code 1\n" + PYTEST_FAILED))
    assert (failing.type, failing.title) == ("failure", "Tests failed: `pytest -q`")
    assert "failing: test_calc.py::test_divide_by_zero - ZeroDivisionError: division by zero" in failing.facts
    assert "result: 1 failed, 2 passed in 0.03s" in failing.facts
    assert "ZeroDivisionError" in failing.narrative  # what a search for the error finds
    # Through a pipe the exit status is tail's: the output says the run failed.
    piped = build_offline_observation(CONTEXT, bash("pytest -q | tail -20", PYTEST_FAILED))
    assert piped.title == "Tests failed: `pytest -q | tail -20`"

    turn = [bash("git status", "clean"),
            bash("pytest -q", PYTEST_FAILED, failed=True, error="Exit code 1\n" + PYTEST_FAILED),
            edit("/home/dev/calcproj/calc.py", "    return a / b", "    if b == 0:\n        return None\n    return a / b"),
            bash("pytest -q", PYTEST_PASSED)]
    summary = summary_of(turn, "Fixed divide(): it returns None for a zero divisor, because callers check for None.")
    assert summary.request == "Fix the divide-by-zero bug"
    assert summary.completed.startswith("Changed calc.py; tests pass: `pytest -q`; Fixed divide()")
    assert summary.learned == ("tests failed (failing: test_calc.py::test_divide_by_zero - ZeroDivisionError: "
                               "division by zero), then passed after editing calc.py")
    assert summary.next_steps == ""  # nothing left failing, nothing said to remain
    assert summary.notes == "4 tool uses (1 failed, 1 routine) in prompt 1 of 1."

    # Still failing at the end of the turn: that is the next step, not a lesson.
    stuck = summary_of(turn[:3])
    assert stuck.learned == "" and stuck.next_steps.startswith("Tests still fail: failing: test_calc.py::test_divide")


def test_a_refused_command_is_the_users_decision() -> None:
    refused = bash("git reset --hard origin/main~15", failed=True, error=(
        "Error: The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it was a "
        "file edit, the new_string was NOT written to the file). STOP what you are doing and wait for the user "
        "to tell you how to proceed."))
    observation = build_offline_observation(CONTEXT, refused)
    assert (observation.type, observation.title) == ("decision",
                                                      "The user declined to run `git reset --hard origin/main~15`")
    assert summary_of([refused]).learned == "The user declined to run `git reset --hard origin/main~15`"


def test_a_failed_command_is_never_learned_and_next_steps_need_evidence() -> None:
    turn = [bash("gh api user/emails", failed=True, error='Error: {"message":"Not Found","status":"404"}'),
            bash("npm publish", failed=True, error="Exit code 1\nnpm ERR! code E403\nnpm ERR! 403 Forbidden")]
    summary = summary_of(turn, "I'll create a todo list to track the release.")
    assert summary.learned == "" and summary.next_steps == ""
    assert build_offline_observation(CONTEXT, turn[1]).facts[-1] == "error: npm ERR! 403 Forbidden"

    said = summary_of([], "Done.\n\n## Next steps:\n- Add a test for negative divisors\n- Update the README")
    assert said.next_steps == "Add a test for negative divisors"
    assert summary_of([], "The parser is not yet implemented for floats.").next_steps == (
        "The parser is not yet implemented for floats.")


def test_a_real_build_turn_reads_as_what_it_was_about() -> None:
    """A corpus turn of 48 tool uses: routine looks folded, repeated reads one line, the build story kept."""
    with open(FIXTURES / "hooks-vsla-build-turn.jsonl", encoding="utf-8") as f:
        payloads = [msgspec.json.decode(line) for line in f]
    prompt = next(p["prompt"] for p in payloads if p["hook_event_name"] == "UserPromptSubmit")
    stop = next(p for p in payloads if p["hook_event_name"] == "Stop")
    context = SessionContext("s", "papers", payloads[0]["cwd"], prompt)
    events = [msgspec.structs.replace(event_from(p), prompt_number=1) for p in payloads
              if p["hook_event_name"] in ("PostToolUse", "PostToolUseFailure") and p["tool_name"] != "TodoWrite"]
    rows = rows_of(events, [build_offline_observation(context, e) for e in events])

    titles = [row.title for row in rows]
    assert not any(title.startswith("Ran `git") or title.startswith("Ran `ls") for title in titles)
    assert titles.count("Checked the git state") == 4 and titles.count("Looked around the files") == 5
    assert "Build failed: `cd /home/kenth56/vsla/docs/papers/src && pdflatex vsla_paper.tex`" in titles
    first_failure = next(row for row in rows if row.title.startswith("Build failed"))
    assert "error: ! LaTeX Error: Missing \\begin{document}." in first_failure.facts  # the error, not the banner

    # In the injected context: one line per routine sort, per file read, per build command.
    lines = group(rows, {})[0].lines
    assert len(lines) < len(rows) * 0.6
    assert [line.ids for line in lines if line.title == "Read src/sections/stacking.tex"] == [[14, 17, 18, 22, 25, 27, 28]]
    assert sum(line.title == "Looked around the files" for line in lines) == 1

    summary = build_offline_summary(context, SummarizeEvent(
        "s", "papers", last_assistant_message=stop["last_assistant_message"], prompt_number=1),
        SummaryInputs([prompt], rows))
    assert summary.request == "verify the current paper is compiling post re architecture and looks ok"
    assert summary.completed.startswith("Changed src/preamble.tex, src/sections/stacking.tex, src/sections/vsla_ops.tex;")
    assert "Paper compiled successfully!" in summary.completed  # the assistant's last message
    assert summary.learned.startswith("build failed (error: ! LaTeX Error: Missing \\begin{document}.), then succeeded"
                                      " after editing src/preamble.tex, src/sections/stacking.tex")
    assert "The user declined to run `git reset --hard origin/main~15`" in summary.learned
    assert "Failed:" not in summary.learned and "Check the failure" not in summary.next_steps


@pytest.mark.parametrize("output", ["PASS\nPASS\nmalloc(): invalid size (unsorted)",
                                    "running 3 tests\nSegmentation fault (core dumped)",
                                    "thread 'main' panicked at src/lib.rs:10:5:\nindex out of bounds"])
def test_a_test_run_that_crashed_failed_whatever_its_exit_status(output: str) -> None:
    # Piped through grep, the run exits 0: the output shows the crash (vsla's test binary aborting).
    crashed = build_offline_observation(CONTEXT, bash("./tests/vsla_tests | grep -E '(PASS|FAIL)'", output))
    assert crashed.type == "failure" and crashed.title.startswith("Tests failed: ")
    ran = build_offline_observation(CONTEXT, bash("./build/demo 2>&1 | tail -3", output))
    assert ran.type == "failure" and ran.title.startswith("Failed: Ran ")
    passed = build_offline_observation(CONTEXT, bash("./tests/vsla_tests", "PASS\nPASS\nfree memory: 10 MB"))
    assert passed.title.startswith("Tests passed: ")


@pytest.mark.parametrize(("response", "fact"), [
    ({"mode": "content", "numFiles": 0, "filenames": [], "content": "1:a\n2:b\n3:c", "numLines": 3}, "3 matches"),
    ({"mode": "files_with_matches", "numFiles": 2, "filenames": ["a.py", "b.py"]}, "2 matches"),
    ({"mode": "count", "numFiles": 1, "filenames": [], "content": "a.py:4", "numMatches": 4}, "4 matches"),
    ({"mode": "content", "numFiles": 0, "filenames": [], "content": "", "numLines": 0}, "0 matches"),
])
def test_a_search_counts_what_its_mode_found(response: dict[str, Any], fact: str) -> None:
    # Claude Code's content-mode Grep reports numFiles 0 beside the lines it matched.
    event = ObservationEvent(claude_session_id="s", project="calcproj", tool_name="Grep", tool_use_id="g",
                             tool_input={"pattern": "divide", "path": "/home/dev/calcproj"}, tool_response=response,
                             cwd="/home/dev/calcproj", prompt_number=1)
    assert fact in build_offline_observation(CONTEXT, event).facts
