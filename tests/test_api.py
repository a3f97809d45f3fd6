"""The worker's HTTP API in-process: genuine Claude Code 2.1.328 payloads, bad input, the live stream,
processing status and back-pressure -- through the same ASGI app ``sessionmem serve`` runs."""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

import pytest
import trio

from sessionmem.protocol.limits import MAX_BODY_BYTES
from sessionmem.protocol.requests import api_call
from sessionmem.protocol.routes import INIT
from sessionmem.protocol.spool import write_spool_file
from sessionmem.testing.harness import InProcessWorker, open_worker

from .conftest import data_dir_contains

SESSION_1 = "19a4c37f-abc8-46fc-a5e3-44d2dabf04e3"
SESSION_2 = "f3b50f3d-97d6-4192-b09e-ae70194cc9ab"
OBS = "/api/sessions/observations"


async def replay(worker: InProcessWorker, payloads: list[dict[str, Any]]) -> list[tuple[str, int, Any]]:
    results = []
    for payload in payloads:
        call = api_call(payload)
        if call is None:
            continue
        method, path, body = call
        reply = await worker.request(method, path, body)
        results.append((payload["hook_event_name"], reply.status, reply.json() if body is not None else None))
    return results


def observation(session: str = "s-bad", **fields: object) -> dict[str, object]:
    return {"claudeSessionId": session, "cwd": "/work/proj", "tool_name": "Bash",
            "tool_input": {"command": "ls"}, "tool_response": {"stdout": "a\nb"}, "tool_use_id": "t1", **fields}


async def test_health_and_readiness(app: InProcessWorker) -> None:
    health = await app.get("/api/health")
    assert health["status"] == "ok" and health["compressor"] == "offline"
    assert set(health) == {"status", "pid", "version", "uptimeSeconds", "compressor", "dataDir", "team"}
    assert health["team"] is False  # no database_url: the viewer does not ask GET /api/team
    assert (await app.request("GET", "/api/readiness")).status == 200


async def test_genuine_payload_sequence(tmp_path: Path, payloads: list[dict[str, Any]]) -> None:
    async with open_worker(tmp_path / "data", batch_quiet_s=0.05) as worker:
        results = await replay(worker, payloads)
        assert all(status in (200, 202) for _, status, _ in results), results

        # Prompt numbers as the worker answered them: 1..n per session; the
        # <task-notification> prompt is skipped, not counted.
        inits = [answer for event, _, answer in results if event == "UserPromptSubmit"]
        assert [(a["promptNumber"], a["skipped"]) for a in inits] == [(1, False), (1, True), (2, False), (1, False)]
        assert "task-notification" in inits[1]["reason"]

        await worker.wait_idle()
        debug = await worker.debug()
        sessions = {s["claudeSessionId"]: s for s in (await worker.get("/api/sessions"))["sessions"]}
        assert set(sessions) == {SESSION_1, SESSION_2}
        assert sessions[SESSION_1]["promptCounter"] == 2
        assert sessions[SESSION_2]["promptCounter"] == 1
        assert {s["status"] for s in sessions.values()} == {"completed"}
        assert {s["project"] for s in sessions.values()} == {"calcproj"}

        everything = (await worker.get("/api/observations?project=calcproj&limit=100"))["observations"]
        # The background subagent's final report is kept as an observation of its own.
        (report,) = [o for o in everything if o["toolName"] == "SubagentStop"]
        assert report["title"] == ("The general-purpose agent reported: "
                                   "No other edge cases: add, sub and mul are total functions.")
        assert report["agentId"] == "a391bd5424096c38a"
        observations = [o for o in everything if o["toolName"] != "SubagentStop"]
        tool_uses = [p for p in payloads if p["hook_event_name"] in ("PostToolUse", "PostToolUseFailure")]
        assert len(observations) == len(tool_uses) == 8
        assert sorted(o["toolUseId"] for o in observations) == sorted(p["tool_use_id"] for p in tool_uses)
        assert all(o["claudeSessionId"] == SESSION_1 for o in observations)
        by_tool_use = {o["toolUseId"]: o for o in observations}
        assert by_tool_use["toolu_c04"]["failed"] is True and by_tool_use["toolu_c04"]["type"] == "failure"
        assert by_tool_use["toolu_s01"]["agentId"] == "a391bd5424096c38a"
        assert by_tool_use["toolu_s01"]["agentType"] == "general-purpose"
        assert by_tool_use["toolu_c03"]["filesModified"] == ["/home/dev/calcproj/calc.py"]
        assert by_tool_use["toolu_c03"]["type"] == "bugfix"  # the prompt asks to fix a bug
        assert by_tool_use["toolu_c06"]["promptNumber"] == 2  # written after the second prompt

        summaries = (await worker.get("/api/summaries?limit=100"))["summaries"]
        stops = collections.Counter(p["session_id"] for p in payloads if p["hook_event_name"] == "Stop")
        assert collections.Counter(s["claudeSessionId"] for s in summaries) == stops
        assert stops == {SESSION_1: 3, SESSION_2: 1}

        # /debug shows these actors with correct counts.
        actors = {a["claudeSessionId"]: a for a in debug["actors"]}
        assert actors[SESSION_1]["processedByKind"] == {"init": 3, "observation": 9, "summarize": 3, "complete": 2}
        assert actors[SESSION_2]["processedByKind"] == {"init": 1, "summarize": 1, "complete": 1}
        assert actors[SESSION_1]["processed"] == 17 and actors[SESSION_1]["restarts"] == 0
        assert debug["journal"] == {"pending": 0, "parked": 0, "done": debug["journal"]["done"], "parkedSessions": []}
        assert debug["supervisor"]["crashes"] == 0
        assert debug["compressor"]["toolUses"] == 9

        # The injected context for the next session carries this memory.
        reply = await worker.request("GET", "/api/context/inject?project=calcproj")
        context = reply.body.decode()
        # Where the work stands, of the nine (a routine look, `grep` of a file, never handed over): the open
        # failure, and the two files worked on, each as its newest change (calc.py's reads fold into its edit).
        assert reply.status == 200 and reply.headers["x-sessionmem-observations"] == "3"
        assert context.startswith("<sessionmem-context>") and context.rstrip().endswith("</sessionmem-context>")
        assert "Edited calc.py" in context
    # The private password is nowhere in the data dir (database, WAL)...
    assert data_dir_contains(tmp_path / "data", b"hunter2") == []
    # ...while the rest of that same prompt was stored.
    assert data_dir_contains(tmp_path / "data", b"Fix the divide-by-zero bug")


async def test_replayed_payloads_do_not_duplicate(app: InProcessWorker, payloads: list[dict[str, Any]]) -> None:
    tool_uses = [p for p in payloads if p["hook_event_name"] in ("PostToolUse", "PostToolUseFailure")]
    await replay(app, tool_uses)
    await replay(app, tool_uses)  # a hook retried every event
    await app.wait_idle()
    assert len((await app.get("/api/observations?limit=100"))["observations"]) == len(tool_uses)


async def test_idempotency_keys_answer_duplicates(app: InProcessWorker) -> None:
    first = await app.post(OBS, observation(tool_use_id="k1", idempotencyKey="key-1"))
    again = await app.post(OBS, observation(tool_use_id="k1", idempotencyKey="key-1"))
    assert first["status"] == "accepted" and again["status"] == "duplicate"
    assert again["eventId"] == first["eventId"]
    prompt = {"claudeSessionId": "s-bad", "prompt": "hello", "idempotencyKey": "key-2"}
    assert (await app.post("/api/sessions/init", prompt))["duplicate"] is False
    assert (await app.post("/api/sessions/init", prompt))["duplicate"] is True
    # A key that names another event (another kind, another session) is refused, not a duplicate:
    # answering it as one would hand out that event's ids, and storing nothing would lose this one.
    for path, body in (("/api/sessions/init", {**prompt, "idempotencyKey": "key-1"}),
                       (OBS, observation(tool_use_id="k2", idempotencyKey="key-2")),
                       (OBS, {**observation(tool_use_id="k3", idempotencyKey="key-1"), "claudeSessionId": "s-other"})):
        refused = await app.request("POST", path, body)
        assert refused.status == 400 and refused.json()["path"] == "$.idempotencyKey", refused.body
        assert "was used for another event" in refused.json()["error"]
    await app.wait_idle()
    assert len((await app.get("/api/observations"))["observations"]) == 1


MALFORMED = [
    (b"{not json", "$", "malformed JSON"),
    (b"", "$", "empty"),
    (b"[1, 2]", "$", "Expected `object`"),
    (b'{"claudeSessionId": 7, "tool_name": "Bash"}', "$.claudeSessionId", "Expected `str`, got `int`"),
    (b'{"tool_name": "Bash"}', "$", "missing required field `claudeSessionId`"),
    (b'{"claudeSessionId": "", "tool_name": "Bash"}', "$.claudeSessionId", "length >= 1"),
    (b'{"claudeSessionId": "s", "tool_name": "Bash", "failed": "yes"}', "$.failed", "Expected `bool`"),
    (b'{"claudeSessionId": "s", "tool_name": "Bash", "tool_use_id": "' + b"t" * 300_000 + b'"}', "$.tool_use_id",
     "length <= 512"),
]


async def test_malformed_bodies_are_400_with_path_and_lose_nothing_else(app: InProcessWorker) -> None:
    assert (await app.request("POST", OBS, observation(tool_use_id="before"))).status == 202
    for raw, path, message in MALFORMED:
        reply = await app.request("POST", OBS, raw=raw)
        assert reply.status == 400, raw
        assert reply.json()["path"] == path and message in reply.json()["error"], (raw, reply.json())
    for raw in (b"{", b'{"claudeSessionId": 1}', b"\xff\xfe", b"null"):
        assert (await app.request("POST", OBS, raw=raw)).status == 400
    wrong_method = await app.request("GET", OBS)
    assert wrong_method.status == 405 and wrong_method.headers["allow"] == "POST"
    huge = b'{"claudeSessionId": "s-bad", "tool_name": "Bash", "tool_response": "' + b"x" * (6 * 1024 * 1024) + b'"}'
    reply = await app.request("POST", OBS, raw=huge)
    assert reply.status == 413 and "limit" in reply.json()["error"]
    assert (await app.request("POST", OBS, observation(tool_use_id="after"))).status == 202

    await app.wait_idle()
    ids = {o["toolUseId"] for o in (await app.get("/api/observations"))["observations"]}
    assert ids == {"before", "after"}
    assert (await app.request("GET", "/api/health")).status == 200
    assert (await app.debug())["journal"]["pending"] == 0


async def test_large_tool_response_is_stored_head_and_tail(app: InProcessWorker) -> None:
    text = "HEAD-" + "m" * 400_000 + "-TAIL"
    assert (await app.request("POST", OBS, observation(tool_response={"stdout": text}))).status == 202
    await app.wait_idle()
    (row,) = (await app.get("/api/observations"))["observations"]
    detail = await app.get(f"/api/observations/{row['id']}")
    stored = detail["toolResponse"]["stdout"]
    assert stored.startswith("HEAD-") and stored.endswith("-TAIL") and "characters elided" in stored
    assert len(stored) < 70_000
    assert detail["toolInput"] == {"command": "ls"} and detail["eventId"] > 0


async def test_unknown_ids_and_bad_queries(app: InProcessWorker) -> None:
    assert (await app.request("GET", "/api/observations/999999")).status == 404
    reply = await app.request("POST", "/sessions/424242/init", {"project": "p", "userPrompt": "hi"})
    assert reply.status == 404 and "424242" in reply.json()["error"]
    reply = await app.request("GET", "/api/observations?limit=abc")
    assert reply.status == 400 and reply.json()["path"] == "?limit"
    reply = await app.request("GET", "/api/context/inject")
    assert reply.status == 400 and reply.json()["path"] == "?project"


async def test_internal_faults_are_500s_logged_with_the_session_and_counted(
        app: InProcessWorker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A fault inside the worker answers 500 JSON and its log line names the session the request named:
    an ingest body's ``claudeSessionId`` (the fast path), a route's session, a ``session`` argument."""
    async def fails(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a fault")

    monkeypatch.setattr(app.services.ingestor, "by_path", fails)
    monkeypatch.setattr(app.services.store, "session_info", fails)
    monkeypatch.setattr(app.services.context, "plan", fails)
    replies = [await app.request("POST", OBS, observation(session="s-body")),
               await app.request("POST", "/api/sessions/s-route/replay", {}),
               await app.request("GET", "/api/context/inject?project=p&source=resume&session=s-query")]
    assert [(r.status, r.json()["error"]) for r in replies] == [(500, "internal error: RuntimeError")] * 3
    faults = [r.getMessage() for r in caplog.records if r.getMessage().startswith("internal error")]
    assert [line.splitlines()[0] for line in faults] == [
        "internal error on POST /api/sessions/observations (session 's-body')",
        "internal error on POST /api/sessions/s-route/replay (session 's-route')",
        "internal error on GET /api/context/inject (session 's-query')"]
    assert "RuntimeError: a fault" in faults[0]  # with its traceback
    assert (await app.debug())["worker"]["errors"] == 3


async def test_legacy_init_by_database_id(app: InProcessWorker) -> None:
    first = await app.post("/api/sessions/init", {"claudeSessionId": "legacy", "cwd": "/w/leg", "prompt": "one"})
    reply = await app.request("POST", f"/sessions/{first['sessionDbId']}/init", {"userPrompt": "two"})
    assert reply.status == 200 and reply.json()["promptNumber"] == 2
    (session,) = (await app.get("/api/sessions"))["sessions"]
    assert session["promptCounter"] == 2 and session["project"] == "leg"


async def test_observation_for_unknown_session_is_kept(app: InProcessWorker) -> None:
    # The worker may start mid-session (hooks fail open): the event creates its session.
    reply = await app.request("POST", OBS, observation(session="never-initialized"))
    assert reply.status == 202 and reply.json()["promptNumber"] == 0
    await app.wait_idle()
    sessions = (await app.get("/api/sessions"))["sessions"]
    assert [s["claudeSessionId"] for s in sessions] == ["never-initialized"]
    assert sessions[0]["observations"] == 1


async def test_skip_list_and_private_content(tmp_path: Path) -> None:
    async with open_worker(tmp_path / "data", batch_quiet_s=0.05) as app:
        reply = await app.request("POST", OBS, observation(tool_name="TodoWrite"))
        assert reply.status == 200 and reply.json()["status"] == "skipped"

        body = await app.post("/api/sessions/init", {"claudeSessionId": "s-priv", "cwd": "/w/p",
                                                     "prompt": "<private>only secret</private>"})
        assert body["skipped"] is True and body["promptNumber"] == 0 and "private" in body["reason"]
        await app.post("/api/sessions/init", {"claudeSessionId": "s-priv", "cwd": "/w/p",
                                              "prompt": "visible <private>zebra-42</private>"})
        await app.post(OBS, observation(session="s-priv", tool_input={"command": "echo <private>zebra-42</private>"},
                                        tool_response={"stdout": "<private>zebra-42"}))
        await app.post("/api/sessions/summarize", {"claudeSessionId": "s-priv",
                                                   "last_assistant_message": "done <private>zebra-42</private>"})
        await app.wait_idle()
    assert data_dir_contains(tmp_path / "data", b"zebra-42") == []
    assert data_dir_contains(tmp_path / "data", b"visible")


async def test_stream_sends_live_events(app: InProcessWorker) -> None:
    received = b""
    async with app.stream() as chunks:
        received += await chunks.receive()
        assert received == b": connected\n\n"
        await app.post("/api/sessions/init", {"claudeSessionId": "live", "cwd": "/work/ops", "prompt": "watch this"})
        await app.post(OBS, {"claudeSessionId": "live", "cwd": "/work/ops", "tool_name": "Read",
                             "tool_use_id": "t1", "tool_input": {"file_path": "/work/ops/t1.py"},
                             "tool_response": "x = 1\n"})
        with trio.fail_after(10):
            while b"event: observation" not in received:
                received += await chunks.receive()
    text = received.decode()
    assert "event: prompt" in text and '"prompt":"watch this"' in text and '"claudeSessionId":"live"' in text
    assert "event: observation" in text and '"title":"Read t1.py"' in text and '"toolName":"Read"' in text


async def test_processing_status(app: InProcessWorker) -> None:
    await app.post(OBS, observation(session="proc"))
    await app.wait_idle()
    reply = await app.request("POST", "/api/processing", {"claudeSessionId": "proc"})
    assert reply.status == 200
    assert reply.json() == {"isProcessing": False, "queueDepth": 0, "pendingEvents": 0, "parkedEvents": 0,
                            "spooled": False}
    assert (await app.get("/api/processing"))["isProcessing"] is False


async def test_a_spooled_request_is_work_in_hand_until_the_spool_import_takes_it(app: InProcessWorker) -> None:
    """A hook whose POST timed out spooled its event: the worker is not done until its next spool round."""
    write_spool_file(str(app.services.settings.data_dir), INIT, json.dumps(
        {"claudeSessionId": "late", "cwd": "/w/late", "prompt": "go", "idempotencyKey": "late-1"}).encode())
    status = await app.get("/api/processing")
    assert status["isProcessing"] is True and status["spooled"] is True
    session = (await app.request("POST", "/api/processing", {"claudeSessionId": "late"})).json()
    assert session["isProcessing"] is False and session["spooled"] is False  # the spool is the worker's, not a session's
    assert await app.services.spool.import_round() == 1
    await app.wait_idle()
    status = await app.get("/api/processing")
    assert status["isProcessing"] is False and status["spooled"] is False


async def test_debug_document_shape(app: InProcessWorker) -> None:
    """The /debug JSON docs/http-api.md documents: these sections, camelCase, from typed records."""
    await app.post(OBS, observation())
    await app.post(OBS, observation(tool_name="Read", tool_use_id="t2", tool_input={"file_path": "/work/proj/a.py"}))
    await app.wait_idle()
    debug = await app.get("/debug")
    assert set(debug) == {"worker", "sessions", "supervisor", "actors", "journal", "store", "compressor", "stream",
                          "spool", "access", "connections", "index", "embedder", "retention", "consolidation", "gc",
                          "loop"}
    (actor,) = debug["actors"]
    assert actor["state"] in ("idle", "stopped") and actor["mailboxCapacity"] == 256
    assert set(debug["store"]) == {"path", "writer", "checkpointer", "gatheredReads", "fileRecallCache"}
    assert debug["store"]["writer"]["batches"] >= 2
    assert debug["store"]["gatheredReads"]["reads"] == 1  # file recall of the Read; none for Bash
    assert debug["store"]["fileRecallCache"]["misses"] == 1 and debug["store"]["fileRecallCache"]["hits"] == 0
    assert debug["supervisor"]["maxRestarts"] == 5 and debug["sessions"]["delivered"] == 2
    assert all("_" not in key for section in debug.values() if isinstance(section, dict) for key in section)


# Nesting deeper than any CPython decodes (msgspec stops at the interpreter's recursion limit: about 1,000
# levels on 3.11, 10,000 on 3.13); shallower but deep values are decoded and kept as their JSON text.
TOO_DEEP = 100_000

HOSTILE = [
    (b'{"claudeSessionId": "s", "tool_name": "Read", "tool_response": "\xff\xfe"}', "not valid UTF-8"),
    (b'{"claudeSessionId": "s", "tool_name": "Read", "tool_input": ' + b'[' * TOO_DEEP + b']' * TOO_DEEP + b'}',
     "nested too deeply"),
    (b'{"claudeSessionId": "s", "tool_name": "Read", "tool_use_id": 1' + b'0' * 5000 + b'}', "out of range"),
    (b'{"claudeSessionId": "s\x00", "tool_name": "Read"}', "malformed JSON"),  # a raw control character
    (b'{"claudeSessionId": "s\\u0000", "tool_name": "Read\\u0000"}', ""),  # an escaped NUL is a character
]


async def test_hostile_bodies_are_400_and_write_little_to_the_log(app: InProcessWorker,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    for raw, message in HOSTILE:
        reply = await app.request("POST", OBS, raw=raw)
        if message:
            assert reply.status == 400 and message in reply.json()["error"], (raw[:80], reply.status, reply.body)
        else:
            assert reply.status == 202  # a NUL is just a character: stored as such, never a crash
    assert (await app.request("GET", "/api/observations/" + "9" * 40)).status == 404  # no overflow
    assert (await app.request("POST", "/sessions/" + "9" * 40 + "/init", {"userPrompt": "x"})).status == 404
    # Deep, but within what msgspec decodes: kept whole, as text beyond 64 levels, and readable back.
    deep = {"claudeSessionId": "deep", "tool_name": "Read", "tool_use_id": "d1", "tool_input": {}}
    value: object = "bottom"
    for _ in range(500):
        value = {"a": value}
    deep["tool_input"] = value
    assert (await app.request("POST", OBS, deep)).status == 202
    await app.wait_idle()
    (row,) = [o for o in (await app.get("/api/observations?limit=100"))["observations"] if o["toolUseId"] == "d1"]
    detail = await app.get(f"/api/observations/{row['id']}")
    assert isinstance(detail["toolInput"], str) and "bottom" in detail["toolInput"]
    debug = await app.debug()
    assert debug["worker"]["errors"] == 0 and debug["supervisor"]["crashes"] == 0
    assert sum(len(r.getMessage()) for r in caplog.records) < 20_000


async def test_bad_spool_files_are_set_aside_and_the_rest_imported(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    spool = tmp_path / "data" / "spool"
    spool.mkdir(parents=True)
    files = {
        "00000000000000000001-1.json": b'/api/sessions/observations\n{"claudeSessionId": "s", "tool_name": "R", '
                                       b'"tool_response": "\xff\xfe"}',
        "00000000000000000002-1.json": b'/api/sessions/observations\n{"claudeSessionId": "s", "tool_name": "R", '
                                       b'"tool_input": ' + b"[" * TOO_DEEP + b"]" * TOO_DEEP + b"}",
        "00000000000000000003-1.json": b"/api/sessions/init\n" + b"\x00" * 100,
        "00000000000000000004-1.json": b"\xff\xfe/not/a/path\n{}",
        # Past the body limit: HTTP would have answered 413.
        "00000000000000000005-1.json": b'/api/sessions/init\n{"claudeSessionId": "s", "prompt": "'
                                       + b"x" * (MAX_BODY_BYTES + 1) + b'"}',
        "00000000000000000006-1.json": b'/api/sessions/init\n{"claudeSessionId": "s", "prompt": "kept",'
                                       b' "idempotencyKey": "k5"}',
        # Far past it: read no further than a body's worth, and set aside alike.
        "00000000000000000007-1.json": b'/api/sessions/init\n{"claudeSessionId": "s", "prompt": "'
                                       + b"x" * (3 * MAX_BODY_BYTES) + b'"}',
    }
    for name, raw in files.items():
        (spool / name).write_bytes(raw)
    async with open_worker(tmp_path / "data") as worker:
        sessions = (await worker.get("/api/sessions"))["sessions"]
        assert [s["firstPrompt"] for s in sessions] == ["kept"]
        spool_stats = (await worker.debug())["spool"]
    rejected = sorted(p.name for p in (spool / "rejected").iterdir() if not p.name.endswith(".reason"))
    assert rejected == sorted([*list(files)[:5], list(files)[6]]) and list(spool.glob("*.json")) == []
    assert spool_stats["rejected"] == 6 and spool_stats["imported"] == 1 and spool_stats["failedRounds"] == 0
    reasons = [(spool / "rejected" / f"{name}.reason").read_text() for name in rejected]
    assert "not valid UTF-8" in reasons[0] and "nested too deeply" in reasons[1]
    assert "larger than the body limit" in reasons[4] and "larger than the body limit" in reasons[5]
    assert not any(r.exc_info for r in caplog.records) and sum(len(r.getMessage()) for r in caplog.records) < 5000
