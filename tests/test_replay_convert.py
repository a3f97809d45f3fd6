"""Transcript -> hook events, one fixture per format found in the corpus."""

from __future__ import annotations

import collections
import json
from pathlib import Path

from sessionmem.replay.convert import ConversionStats, ReplaySession, convert, transcript_files

TRANSCRIPTS = Path(__file__).parent / "fixtures" / "transcripts"


def converted(name: str) -> tuple[list[ReplaySession], ConversionStats]:
    stats = ConversionStats()
    return convert(transcript_files(TRANSCRIPTS / name), stats), stats


def stages(session: ReplaySession) -> collections.Counter[str]:
    return collections.Counter(e.stage for e in session.events)


def check_shape(session: ReplaySession) -> None:
    """Every session starts, ends, and pairs prompts with stops; payloads look like Claude Code's."""
    assert session.events[0].stage == "SessionStart" and session.events[-1].stage == "SessionEnd"
    counts = stages(session)
    assert counts["UserPromptSubmit"] == counts["Stop"]
    keys = [e.key for e in session.events]
    assert len(keys) == len(set(keys))  # idempotency keys are unique
    for event in session.events:
        assert event.payload["hook_event_name"] == event.stage and event.payload["session_id"] == session.session_id
        if event.stage in ("PostToolUse", "PostToolUseFailure"):
            assert event.payload["tool_name"] and event.payload["tool_use_id"].startswith("toolu")
    times = [e.at for e in session.events]
    assert times == sorted(times)


def test_v1_inline_sidechains() -> None:
    (session,), stats = converted("v1.0-inline-sidechain")
    check_shape(session)
    assert (stats.prompts, stats.tool_uses, stats.failed_tool_uses) == (1, 21, 3)
    subagent = [e for e in session.events if e.payload.get("agent_id") == "sidechain"]
    assert len(subagent) == stats.subagent_tool_uses == 8
    assert not any("agent_type" in e.payload for e in subagent)  # 1.0 does not say which agent: none invented
    failure = next(e for e in session.events if e.stage == "PostToolUseFailure")
    assert failure.payload["error"] and "tool_response" not in failure.payload


def test_v2_agent_files_beside_the_session() -> None:
    (session,), stats = converted("v2.0-agent-files")
    check_shape(session)
    assert stats.files == 2 and stats.prompts == 6 and stats.tool_uses == 10
    prompts = [e.payload["prompt"] for e in session.events if e.stage == "UserPromptSubmit"]
    assert not prompts[0].startswith("<")
    # Its compaction summary (isCompactSummary) is Claude Code's own text: no hook would have sent it.
    assert not any(prompt.startswith("This session is being continued") for prompt in prompts)
    # The compaction itself is what the hooks saw live: PreCompact, then the SessionStart after it.
    order = [e.stage for e in session.events]
    at = order.index("PreCompact")
    assert stats.compactions == 1 and order[at + 1] == "SessionStart"
    assert session.events[at].payload["trigger"] == "manual" and session.events[at + 1].payload["source"] == "compact"


def test_v21_subagents_directory() -> None:
    (session,), stats = converted("v2.1-subagents")
    check_shape(session)
    assert session.session_id == "258c7280-ae70-4798-800f-63464d01a85d"
    assert stats.files == 2 and stats.subagent_tool_uses == 2 and stats.unpaired_tool_uses == 1
    agents = {e.payload.get("agent_id") for e in session.events if e.payload.get("agent_id")}
    assert agents == {"a881341"}
    read = next(e for e in session.events if e.stage == "PostToolUse" and e.payload["tool_name"] == "Read")
    assert isinstance(read.payload["tool_response"], dict)  # toolUseResult, not the flattened text


def test_chat_json_array() -> None:
    (session,), stats = converted("chat-json")
    check_shape(session)
    assert (stats.prompts, stats.tool_uses, stats.failed_tool_uses) == (2, 30, 6)
    assert stats.lines == 0 and stats.broken_files == 0


def test_broken_lines_are_counted_not_fatal() -> None:
    (session,), stats = converted("broken-lines-2.0.jsonl")
    check_shape(session)
    assert stats.broken_lines == 7 and stats.lines == 83


def test_overlapping_snapshots_are_deduplicated(tmp_path: Path) -> None:
    source = TRANSCRIPTS / "chat-json" / "logs__chat@028050dd.json"
    for n in range(2):
        (tmp_path / f"logs__chat@{n}.json").write_bytes(source.read_bytes())
    (tmp_path / "broken.json").write_text("[{not json")
    stats = ConversionStats()
    (session,) = convert(transcript_files(tmp_path), stats)
    assert stats.tool_uses == 30 and stats.duplicate_entries == stats.entries
    assert stats.broken_files == 0  # broken.json is not a transcript name and was never read
    (tmp_path / "logs__chat@broken.json").write_text("[{not json")
    stats = ConversionStats()
    convert(transcript_files(tmp_path), stats)
    assert stats.broken_files == 1


def test_task_notifications_are_not_prompts() -> None:
    sessions, stats = converted("session-2.1.328.jsonl")
    prompts = [e.payload["prompt"] for s in sessions for e in s.events if e.stage == "UserPromptSubmit"]
    assert prompts == ["Fix the divide-by-zero bug in calc.py <private>my staging password is hunter2</private>",
                       "Now add a test file"]


def test_slash_commands_are_prompts_as_typed(tmp_path: Path) -> None:
    """A slash command's tags become the command line the user typed (not five words of tag names)."""
    def user(n: int, content: str) -> str:
        return json.dumps({"type": "user", "isSidechain": False, "message": {"role": "user", "content": content},
                           "uuid": f"u{n}", "timestamp": f"2026-11-21T18:3{n}:00.000Z", "cwd": "/home/dev/p",
                           "sessionId": "s-commands", "version": "2.1.39"})

    (tmp_path / "s-commands.jsonl").write_text("\n".join([
        user(0, "Speed up the parser"),
        user(1, "<command-message>review is running…</command-message>\n<command-name>/review</command-name>\n"
                "<command-args>the parser change</command-args>"),
        user(2, "[Request interrupted by user]"),
        user(3, "[Request interrupted by user for tool use]"),
        user(4, "<command-name>/exit</command-name>\n            <command-message>exit</command-message>\n"
                "            <command-args></command-args>"),
    ]) + "\n")
    sessions = convert(transcript_files(tmp_path), ConversionStats())
    prompts = [e.payload["prompt"] for s in sessions for e in s.events if e.stage == "UserPromptSubmit"]
    # /exit is Claude Code's own (no hook fires for it live); /review sends the model a prompt.
    assert prompts == ["Speed up the parser", "/review the parser change"]
