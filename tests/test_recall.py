"""Memory that arrives on its own: file-aware recall, prompt recall, and the ranked SessionStart context."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from sessionmem.records import OBSERVATION
from sessionmem.testing.harness import InProcessWorker, open_worker, serve_in_thread

from .test_hooks import run_hook as run_hook_within_default_budgets

# A test of what is recalled gives recall the time a busy machine needs: within the default budget
# (prompt_recall_budget_s, 0.5 s) a slow one is handed nothing, as it should be, and the test would
# prove nothing of what is chosen.
PATIENT = {"prompt_recall_budget_s": 30}


def run_hook(stage: str, payload: Any, data: Path) -> Any:
    return run_hook_within_default_budgets(stage, payload, data, SESSIONMEM_HOOK_TIMEOUT="25")
from .test_search import store_session

SHOP = "/home/me/shop"


def tool_use(session: str, tool: str, tool_input: dict[str, Any], *, number: int = 0) -> dict[str, Any]:
    return {"session_id": session, "cwd": SHOP, "hook_event_name": "PostToolUse", "tool_name": tool,
            "tool_input": tool_input, "tool_response": {"type": "text", "file": {"content": "x = 1\n"}},
            "tool_use_id": f"{session}-{tool}-{number}"}


def printed_context(result: Any, stage: str) -> str:
    assert result.returncode == 0 and result.stderr == b"", result.stderr
    if not result.stdout:
        return ""
    output = json.loads(result.stdout)
    assert output["hookSpecificOutput"]["hookEventName"] == stage
    return output["hookSpecificOutput"]["additionalContext"]


@pytest.mark.slow
def test_a_hook_touching_a_file_hands_claude_its_past_once(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with serve_in_thread(data, embedder="none", batch_quiet_s=0.05, prompt_recall=False) as worker:
        for number, payload in enumerate([
            {"session_id": "before", "cwd": SHOP, "hook_event_name": "UserPromptSubmit",
             "prompt": "fix the session cookie that expires too early"},
            tool_use("before", "Edit", {"file_path": f"{SHOP}/src/auth.py", "old_string": "max_age=60",
                                        "new_string": "max_age=3600"}),
            tool_use("before", "Read", {"file_path": f"{SHOP}/src/util.py"}, number=1),
        ]):
            assert run_hook(payload["hook_event_name"], payload, data).returncode == 0, number
        worker.wait_idle()

        read = tool_use("now", "Read", {"file_path": f"{SHOP}/src/auth.py"})
        context = printed_context(run_hook("PostToolUse", read, data), "PostToolUse")
        assert context.startswith("<sessionmem-context>") and context.endswith("</sessionmem-context>")
        assert "Memory of /home/me/shop/src/auth.py" in context
        assert "bugfix: Edited src/auth.py" in context and "replaced `max_age=60` with `max_age=3600`" in context

        again = tool_use("now", "Read", {"file_path": f"{SHOP}/src/auth.py"}, number=1)
        assert printed_context(run_hook("PostToolUse", again, data), "PostToolUse") == ""  # told once
        bare = tool_use("now", "Read", {"file_path": f"{SHOP}/src/util.py"}, number=2)
        assert printed_context(run_hook("PostToolUse", bare, data), "PostToolUse") == ""  # a read says nothing
        own = tool_use("before", "Read", {"file_path": f"{SHOP}/src/auth.py"}, number=3)
        assert printed_context(run_hook("PostToolUse", own, data), "PostToolUse") == ""  # its own session
        failed = {**tool_use("other", "Read", {"file_path": f"{SHOP}/src/auth.py"}),
                  "hook_event_name": "PostToolUseFailure", "error": "EACCES"}
        assert printed_context(run_hook("PostToolUseFailure", failed, data), "PostToolUseFailure") == ""
        # a prompt gets nothing when prompt recall is off
        prompt = {"session_id": "later", "cwd": SHOP, "hook_event_name": "UserPromptSubmit",
                  "prompt": "users are logged out after a minute, the cookie again"}
        assert printed_context(run_hook("UserPromptSubmit", prompt, data), "UserPromptSubmit") == ""
        assert not (data / "hooks.log").exists()


@pytest.mark.slow
def test_prompt_recall_is_on_by_default(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with serve_in_thread(data, embedder="minilm", batch_quiet_s=0.05, **PATIENT) as worker:
        first = {"session_id": "before", "cwd": SHOP, "hook_event_name": "UserPromptSubmit",
                 "prompt": "fix the session cookie that expires too early"}
        run_hook("UserPromptSubmit", first, data)
        run_hook("PostToolUse", tool_use("before", "Edit", {"file_path": f"{SHOP}/src/auth.py",
                                                            "old_string": "max_age=60", "new_string": "max_age=3600"}),
                 data)
        run_hook("Stop", {"session_id": "before", "cwd": SHOP, "hook_event_name": "Stop",
                          "last_assistant_message": "The cookie now lasts an hour."}, data)
        worker.wait_idle()
        assert worker.wait_indexed()["index"]["vectors"] >= 3
        prompt = {"session_id": "later", "cwd": SHOP, "hook_event_name": "UserPromptSubmit",
                  "prompt": "the session cookie expires too early again, users are logged out"}
        context = printed_context(run_hook("UserPromptSubmit", prompt, data), "UserPromptSubmit")
        assert "Past work that may be relevant" in context and "cookie" in context
        # then the file recall does not repeat what the prompt recall told
        read = tool_use("later", "Read", {"file_path": f"{SHOP}/src/auth.py"})
        assert "max_age" not in printed_context(run_hook("PostToolUse", read, data), "PostToolUse")


async def test_file_recall_can_be_switched_off(tmp_path: Path) -> None:
    async with open_worker(tmp_path / "data", embedder="none", batch_quiet_s=0.05, file_recall=False) as worker:
        await store_session(worker, "before", SHOP, "fix the cookie", [
            ("Edit", {"file_path": f"{SHOP}/src/auth.py", "old_string": "a", "new_string": "b"})])
        reply = await worker.post("/api/sessions/observations", {
            "claudeSessionId": "now", "cwd": SHOP, "tool_name": "Read",
            "tool_input": {"file_path": f"{SHOP}/src/auth.py"}, "tool_response": "x"})
        assert reply["status"] == "accepted" and "additionalContext" not in reply


async def context(worker: InProcessWorker, query: str) -> tuple[str, dict[str, str]]:
    reply = await worker.request("GET", f"/api/context/inject?project=shop&{query}")
    assert reply.status == 200, reply.body
    return reply.body.decode(), reply.headers


async def test_session_start_ranks_memories_by_the_prompt_it_continues(tmp_path: Path) -> None:
    async with open_worker(tmp_path / "data", embedder="minilm", batch_quiet_s=0.05, **PATIENT) as worker:
        await store_session(worker, "cookies", SHOP, "fix the session cookie that expires too early", [
            ("Edit", {"file_path": f"{SHOP}/src/auth.py", "old_string": "max_age=60", "new_string": "max_age=3600"}),
        ], summary="The login cookie now lasts an hour.")
        for number in range(12):  # much newer, and about something else
            await store_session(worker, f"css-{number}", SHOP, f"restyle the footer links, part {number}", [
                ("Edit", {"file_path": f"{SHOP}/static/footer{number}.css", "old_string": "color: red",
                          "new_string": "color: navy"})])
        await store_session(worker, "now", SHOP, "the session cookie expires too early, users get logged out", [])
        await worker.services.index.caught_up()

        recent, headers = await context(worker, "source=startup")
        assert headers["x-sessionmem-ranking"] == "files" and "## Where the work stands" in recent
        focused, headers = await context(worker, "source=compact")
        assert headers["x-sessionmem-ranking"] == "meaning"
        assert '## Relevant to "the session cookie expires too early, users get logged out"' in focused
        relevant = focused.split("## Relevant to", 1)[1]
        # the old cookie fix, and not the newer footer work: it is below the relevance floor
        assert "Edited src/auth.py" in relevant and "footer" not in relevant
        assert int(headers["x-sessionmem-observations"]) >= 1
        small, _ = await context(worker, "source=compact&tokens=300")
        assert len(small) <= 300 * 4 and "Edited src/auth.py" in small
        words, headers = await context(worker, "q=cookie+max_age")
        assert headers["x-sessionmem-ranking"] == "meaning" and "Edited src/auth.py" in words
        # A newer prompt that says nothing ("continue") is not what the work is about.
        await store_session(worker, "go-on", SHOP, "continue", [])
        # Nor is a slash command, stored as its transcript tags by earlier backfills: "/exit".
        await store_session(worker, "bye", SHOP, "<command-name>/exit</command-name>\n"
                            "            <command-message>exit</command-message>\n"
                            "            <command-args></command-args>", [])
        await worker.services.index.caught_up()
        focused, _ = await context(worker, "source=compact")
        assert '## Relevant to "the session cookie expires too early, users get logged out"' in focused
        # A resumed (or compacted) session is focused on its own latest prompt, not on the project's
        # newest, another session's (as the real CLI's --resume asks).
        resumed, _ = await context(worker, "source=resume&session=cookies")
        assert '## Relevant to "fix the session cookie that expires too early"' in resumed
        unknown, _ = await context(worker, "source=resume&session=nobody")  # no prompt of its own
        assert '## Relevant to "the session cookie expires too early, users get logged out"' in unknown


async def test_a_small_projects_memories_are_ranked_by_meaning_among_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another project's observations fill the graph's nearest places: the small project's own are
    compared with the focus one by one, so its memory is still ranked by meaning."""
    monkeypatch.setattr("sessionmem.search.context.CANDIDATES", 3)
    async with open_worker(tmp_path / "data", embedder="minilm", batch_quiet_s=0.05, **PATIENT) as worker:
        for number in range(4):  # a larger project, all about logins
            await store_session(worker, f"blog-{number}", "/home/me/blog", f"session cookie expiry, part {number}", [
                ("Edit", {"file_path": f"/home/me/blog/src/session{number}.py", "old_string": "ttl=60",
                          "new_string": "ttl=3600"})])
        await store_session(worker, "cookies", SHOP, "fix the login cookie that expires too early", [
            ("Edit", {"file_path": f"{SHOP}/src/auth.py", "old_string": "max_age=60", "new_string": "max_age=3600"})])
        await store_session(worker, "now", SHOP, "the session cookie expires too early, users get logged out", [])
        await worker.services.index.caught_up()
        focused, headers = await context(worker, "source=compact")
    assert headers["x-sessionmem-ranking"] == "meaning"
    assert "Edited src/auth.py" in focused.split('## Relevant to "the session cookie expires too early, users get logged out"', 1)[1]


async def test_session_start_falls_back_to_words_when_nothing_near_is_of_the_project(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The nearest vector is another project's observation: the project's own words rank its memories."""
    monkeypatch.setattr("sessionmem.search.context.CANDIDATES", 1)
    async with open_worker(tmp_path / "data", embedder="minilm", batch_quiet_s=0.05, **PATIENT) as worker:
        await store_session(worker, "shop-old", SHOP, "the banner overlaps the footer", [
            ("Edit", {"file_path": f"{SHOP}/static/banner.css", "old_string": "z-index: 1",
                      "new_string": "z-index: 10"})])
        await store_session(worker, "shop-new", SHOP, "rename the helpers", [
            ("Bash", {"command": "git mv util.py helpers.py", "description": "rename util"})])
        await store_session(worker, "blog", "/home/me/blog", "users get logged out after a minute", [
            ("Edit", {"file_path": "/home/me/blog/src/session.py", "old_string": "ttl=60", "new_string": "ttl=3600"})])
        await worker.services.index.caught_up()
        blog = (await worker.get("/api/observations?project=blog"))["observations"][0]["id"]
        [document] = await worker.services.store.documents([(OBSERVATION, blog)])
        # Asked with the blog observation's own text: it is the nearest vector, of another project.
        focused, headers = await context(worker, "q=" + quote(document.text))
    assert headers["x-sessionmem-ranking"] == "words"  # not recency: "Edited" is in the shop's edit too
    relevant = focused.split("## Relevant to", 1)[1].split("\n", 1)[1]  # after the heading (the focus)
    assert "banner.css" in relevant and "session.py" not in relevant


async def test_session_start_ranks_by_words_with_vectors_off(tmp_path: Path) -> None:
    async with open_worker(tmp_path / "data", embedder="none", batch_quiet_s=0.05) as worker:
        await store_session(worker, "old", SHOP, "the cookie banner overlaps the footer", [
            ("Edit", {"file_path": f"{SHOP}/static/banner.css", "old_string": "a", "new_string": "b"})])
        for number in range(3):
            await store_session(worker, f"new-{number}", SHOP, f"rename module {number}", [
                ("Edit", {"file_path": f"{SHOP}/src/mod{number}.py", "old_string": "a", "new_string": "b"})])
        await store_session(worker, "now", SHOP, "the banner is wrong again", [])
        focused, headers = await context(worker, "source=compact")
        recent, recent_headers = await context(worker, "source=startup")
    assert headers["x-sessionmem-ranking"] == "words" and recent_headers["x-sessionmem-ranking"] == "files"
    relevant = focused.split("## Relevant to", 1)[1]
    # the older one about the banner, and not the newer work that shares no word with the focus
    assert "banner.css" in relevant and "mod2.py" not in relevant


def _store_cookie_fix(data: Path, session: str = "before") -> None:
    """A session that fixed the login cookie, through the real hooks."""
    for payload in [
        {"session_id": session, "cwd": SHOP, "hook_event_name": "UserPromptSubmit",
         "prompt": "fix the session cookie that expires too early"},
        tool_use(session, "Edit", {"file_path": f"{SHOP}/src/auth.py", "old_string": "max_age=60",
                                   "new_string": "max_age=3600"}),
        {"session_id": session, "cwd": SHOP, "hook_event_name": "Stop",
         "last_assistant_message": "The session cookie now lasts an hour instead of a minute."},
    ]:
        assert run_hook(payload["hook_event_name"], payload, data).returncode == 0


def _prompt(session: str, text: str) -> dict[str, Any]:
    return {"session_id": session, "cwd": SHOP, "hook_event_name": "UserPromptSubmit", "prompt": text}


def _told(context: str) -> set[str]:
    """The memories a handover names: ``#12`` (an observation) and ``summary 3``."""
    return set(re.findall(r"#\d+\b", context)) | set(re.findall(r"summary \d+\b", context))


@pytest.mark.slow
def test_an_unrelated_prompt_gets_no_recall_and_a_related_one_does(tmp_path: Path) -> None:
    """The relevance floor: a prompt about something no earlier session worked on is handed nothing."""
    data = tmp_path / "data"
    with serve_in_thread(data, embedder="minilm", batch_quiet_s=0.05, **PATIENT) as worker:  # prompt recall: the default
        _store_cookie_fix(data)
        worker.wait_idle()
        assert worker.wait_indexed()["index"]["vectors"] >= 3
        unrelated = _prompt("later", "write a short poem about autumn leaves falling in the park")
        assert printed_context(run_hook("UserPromptSubmit", unrelated, data), "UserPromptSubmit") == ""
        related = _prompt("later", "the session cookie expires too early again, users are logged out")
        context = printed_context(run_hook("UserPromptSubmit", related, data), "UserPromptSubmit")
        assert "Past work that may be relevant" in context and "cookie" in context


@pytest.mark.slow
def test_a_prompt_that_says_nothing_of_the_work_gets_no_recall(tmp_path: Path) -> None:
    """"continue" says nothing to rank memories by: it gets no recall, though the summary of an earlier session
    asked only that clears the relevance floor against it; said with what to continue, it gets the work."""
    data = tmp_path / "data"
    with serve_in_thread(data, embedder="minilm", batch_quiet_s=0.05, **PATIENT) as worker:
        _store_cookie_fix(data)
        for payload in [_prompt("went-on", "continue"),
                        {"session_id": "went-on", "cwd": SHOP, "hook_event_name": "Stop", "last_assistant_message": ""}]:
            assert run_hook(payload["hook_event_name"], payload, data).returncode == 0
        worker.wait_idle()
        worker.wait_indexed()
        went_on = next(summary["id"] for summary in worker.get("/api/summaries?project=shop")["summaries"]
                       if summary["claudeSessionId"] == "went-on")
        found = worker.get("/api/search?q=continue&project=shop&kind=summary")["results"]
        assert any(result["id"] == went_on and (result["similarity"] or 0.0) >= 0.5 for result in found)
        assert printed_context(run_hook("UserPromptSubmit", _prompt("later", "continue"), data),
                               "UserPromptSubmit") == ""
        said = _prompt("later", "continue with the session cookie, it still expires too early")
        assert "cookie" in printed_context(run_hook("UserPromptSubmit", said, data), "UserPromptSubmit")


@pytest.mark.slow
def test_each_memory_is_told_once_a_session(tmp_path: Path) -> None:
    """What SessionStart named is not recalled again by the prompt or the file in the same session; what a
    prompt recalled is not recalled again by a file; after a compaction the context may name it again."""
    data = tmp_path / "data"
    with serve_in_thread(data, embedder="minilm", batch_quiet_s=0.05, **PATIENT) as worker:
        _store_cookie_fix(data)
        worker.wait_idle()
        worker.wait_indexed()
        start = {"session_id": "now", "cwd": SHOP, "hook_event_name": "SessionStart", "source": "startup"}
        handed = printed_context(run_hook("SessionStart", start, data), "SessionStart")
        assert "Edited src/auth.py" in handed and "cookie now lasts an hour" in handed
        told = _told(handed)
        related = "the session cookie expires too early again, users are logged out"
        # Elsewhere the same prompt and file recall them: they are relevant, only already told here.
        fresh = printed_context(run_hook("UserPromptSubmit", _prompt("fresh", related), data), "UserPromptSubmit")
        assert _told(fresh) & told
        recalled = printed_context(run_hook("UserPromptSubmit", _prompt("now", related), data), "UserPromptSubmit")
        assert not _told(recalled) & told
        read = tool_use("now", "Read", {"file_path": f"{SHOP}/src/auth.py"})
        assert printed_context(run_hook("PostToolUse", read, data), "PostToolUse") == ""
        # In the other session, the file recall does not repeat what its prompt recall told.
        fresh_read = tool_use("fresh", "Read", {"file_path": f"{SHOP}/src/auth.py"})
        assert not _told(printed_context(run_hook("PostToolUse", fresh_read, data), "PostToolUse")) & _told(fresh)
        # Compacted, the session's context is gone: the handover after it may name them again.
        compacted = printed_context(run_hook("SessionStart", {**start, "source": "compact"}, data), "SessionStart")
        assert "Edited src/auth.py" in compacted


@pytest.mark.slow
def test_routine_activity_is_not_handed_over(tmp_path: Path) -> None:
    """Routine looks (`git status`, `ls`) are neither in SessionStart's recent work nor recalled; a bare read is
    not recalled either, and in the context it comes after what was done."""
    data = tmp_path / "data"
    with serve_in_thread(data, embedder="minilm", batch_quiet_s=0.05, **PATIENT) as worker:
        run_hook("UserPromptSubmit", _prompt("before", "check the git status and fix the cookie expiry"), data)
        for number, (tool, tool_input) in enumerate([
                ("Bash", {"command": "git status", "description": "git state"}),
                ("Bash", {"command": "ls -la src", "description": "list the files"}),
                ("Read", {"file_path": f"{SHOP}/src/util.py"}),
                ("Edit", {"file_path": f"{SHOP}/src/auth.py", "old_string": "max_age=60",
                          "new_string": "max_age=3600"})]):
            assert run_hook("PostToolUse", tool_use("before", tool, tool_input, number=number), data).returncode == 0
        worker.wait_idle()
        worker.wait_indexed()
        start = {"session_id": "now", "cwd": SHOP, "hook_event_name": "SessionStart", "source": "startup"}
        handed = printed_context(run_hook("SessionStart", start, data), "SessionStart")
        assert "Edited src/auth.py" in handed
        for routine in ("Checked the git state", "Looked around the files"):
            assert routine not in handed
        assert "Read src/util.py" in handed  # a read stays: it names a file the work was about
        asked = printed_context(run_hook("UserPromptSubmit", _prompt("other", "what is the git status of the repo, "
                                                                     "which files are in src"), data),
                                "UserPromptSubmit")
        for routine in ("Checked the git state", "Looked around the files", "Read src/util.py"):
            assert routine not in asked


# Claude Code writes a hook's output over this many characters to a file and shows the model a preview.
CLAUDE_CODE_HOOK_OUTPUT_LIMIT = 10_000


@pytest.mark.slow
def test_every_hooks_output_stays_under_claude_codes_limit(tmp_path: Path) -> None:
    """A large budget and many long memories: SessionStart's context and each recall still print less than
    Claude Code's 10,000 characters."""
    data = tmp_path / "data"
    long_text = "the session cookie expiry " * 40
    with serve_in_thread(data, embedder="none", batch_quiet_s=0.05, context_token_budget=50_000,
                         prompt_recall_max=60, file_recall_max=60) as worker:
        for number in range(60):
            session = f"old-{number}"
            run_hook("UserPromptSubmit", _prompt(session, f"{long_text} part {number}"), data)
            edit = tool_use(session, "Edit", {"file_path": f"{SHOP}/src/auth.py", "old_string": long_text,
                                              "new_string": f"{long_text} {number}"}, number=number)
            run_hook("PostToolUse", edit, data)
            run_hook("Stop", {"session_id": session, "cwd": SHOP, "hook_event_name": "Stop",
                              "last_assistant_message": f"{long_text} fixed, part {number}"}, data)
        worker.wait_idle()
        outputs = [
            run_hook("SessionStart", {"session_id": "a", "cwd": SHOP, "hook_event_name": "SessionStart",
                                      "source": "startup"}, data),
            run_hook("UserPromptSubmit", _prompt("b", "the session cookie expiry again"), data),
            run_hook("PostToolUse", tool_use("c", "Read", {"file_path": f"{SHOP}/src/auth.py"}), data),
        ]
    for stage, result, least in zip(("SessionStart", "UserPromptSubmit", "PostToolUse"), outputs, (5, 5, 1)):
        assert printed_context(result, stage).count("\n- ") >= least, stage  # much is handed over
        assert len(result.stdout.decode()) < CLAUDE_CODE_HOOK_OUTPUT_LIMIT, stage
