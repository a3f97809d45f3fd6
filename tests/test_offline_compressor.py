"""The offline compressor turns genuine tool payloads into specific, useful observations."""

from __future__ import annotations

from typing import Any

from sessionmem.compress.base import CompressorStatistics, SessionContext
from sessionmem.compress.offline import OfflineCompressor, build_offline_observation, build_offline_summary
from sessionmem.events import ObservationEvent, SummarizeEvent
from sessionmem.records import ObservationRow, SummaryInputs

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
    assert any("replaced `return a / b` with `if b == 0:`" in fact for fact in edit.facts)

    grep = build_offline_observation(CONTEXT, events["toolu_c02"])
    assert grep.title == "Ran `grep -n 'def ' calc.py`" and "exit status 0" in grep.facts

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


def test_deterministic(payloads: list[dict[str, Any]]) -> None:
    events = list(by_id(payloads).values())
    assert [build_offline_observation(CONTEXT, e) for e in events] == [build_offline_observation(CONTEXT, e) for e in events]


async def test_summary_from_observations(payloads: list[dict[str, Any]]) -> None:
    compressor = OfflineCompressor()
    events = list(by_id(payloads).values())[:4]
    observations = await compressor.compress(CONTEXT, events)
    rows = [ObservationRow(n, "s", "calcproj", 1, e.tool_name, e.tool_use_id, None, None, e.failed, o.type, o.title,
                           o.subtitle, list(o.facts), o.narrative, list(o.concepts), list(o.files_read),
                           list(o.files_modified), True, "offline", None, 0, 0, 0.0)
            for n, (e, o) in enumerate(zip(events, observations))]
    summary = build_offline_summary(
        CONTEXT, SummarizeEvent("s", "calcproj", last_assistant_message="Fixed divide(). Next, add a test.",
                                prompt_number=1),
        SummaryInputs(prompts=["Fix the divide-by-zero bug in calc.py"], observations=rows))
    assert summary.request == "Fix the divide-by-zero bug in calc.py"
    assert "Read calc.py" in summary.investigated
    assert summary.completed.startswith("Modified calc.py")
    assert "Failed: Ran `python3" in summary.learned
    assert summary.next_steps == "Next, add a test."
    assert compressor.statistics() == CompressorStatistics("offline", tool_uses=4, summaries=0)
