"""Property-based fuzzing: whatever arrives, never a 5xx, never a crashed actor, never a hang.

Every API route over real HTTP (the worker served from a thread, the whole stack:
access guard, ingest fast path, Quart), with random and adversarial JSON, wrong
types, deep nesting, huge strings, invalid UTF-8, NUL bytes, thousands of tags and
unterminated ones; and the hook's own parsing and request building, in-process and
as real hook processes.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from werkzeug.exceptions import HTTPException

from sessionmem.protocol import fastjson, privacy
from sessionmem.protocol.project import project_of
from sessionmem.protocol.requests import encoded_call, text_field
from sessionmem.server.app import create_quart_app
from sessionmem.testing.harness import ThreadedWorker, open_worker, serve_in_thread

from .test_hooks import run_hook

TAGS = ["<private>", "</private>", "<PRIVATE >", "<private a=b>", "</private >", "<sessionmem-context>",
        "</sessionmem-context>", "<Sessionmem-Context x>", "<privateer>", "<", ">", "</", "< private>",
        "< / private>", "[private]", "[/private]", "[", "]", "private"]

small_text = st.one_of(
    st.text(max_size=200),
    st.sampled_from(TAGS + ["\x00", "\u202e", "sk-ant-" + "a" * 40, "AKIAIOSFODNN7EXAMPLE",
                            "password=hunter2", "-----BEGIN RSA PRIVATE KEY-----\nabc"]),
    st.lists(st.one_of(st.sampled_from(TAGS), st.text(max_size=20)), max_size=50).map("".join),
)
adversarial_text = st.one_of(
    small_text,
    st.builds(lambda tag, n: tag * n, st.sampled_from(TAGS), st.integers(0, 3000)),  # thousands of tags
    st.builds(lambda n: "x" * n, st.integers(60_000, 300_000)),  # huge
)
scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**80), max_value=2**80),
                    st.floats(allow_nan=False, allow_infinity=False), small_text)
# Nested values of small leaves, and at most one huge or tag-stuffed string at the top.
nested = st.recursive(scalars, lambda children: st.one_of(
    st.lists(children, max_size=6), st.dictionaries(small_text, children, max_size=6)), max_leaves=40)
json_values = st.one_of(nested, adversarial_text)

FIELDS = ["claudeSessionId", "cwd", "project", "idempotencyKey", "prompt", "tool_name", "tool_input", "tool_response",
          "tool_use_id", "agent_id", "agent_type", "hook_event_name", "error", "failed", "last_user_message",
          "last_assistant_message", "reason", "userPrompt", "promptNumber", "ids"]
bodies = st.one_of(
    st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=8).map(lambda d: json.dumps(d).encode()),
    st.fixed_dictionaries({"claudeSessionId": st.text(min_size=1, max_size=40), "tool_name": st.text(min_size=1,
                           max_size=40)}, optional={k: json_values for k in FIELDS if k not in ("claudeSessionId", "tool_name")}).map(lambda d: json.dumps(d).encode()),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=3000),
    st.integers(1, 20_000).map(lambda n: b'{"claudeSessionId": "s", "tool_name": "t", "tool_input": '
                               + b"[" * n + b"]" * n + b"}"),
    st.binary(min_size=1, max_size=200).map(lambda b: b'{"claudeSessionId": "' + b.replace(b'"', b"") + b'", '
                                            b'"tool_name": "t"}'),
)
POSTS = ["/api/sessions/init", "/api/sessions/observations", "/api/sessions/summarize", "/api/sessions/complete",
         "/api/processing", "/sessions/1/init", "/sessions/99999999999999999999999/init", "/api/sessions/x/replay",
         "/api/auth/login-code", "/api/observations/batch", "/api/maintenance/prune", "/api/import", "/api/team/push"]
GETS = ["/api/observations", "/api/sessions", "/api/summaries", "/api/context/inject", "/api/observations/1",
        "/api/processing", "/debug", "/api/health", "/api/readiness", "/login", "/no/such", "/api/projects",
        "/stream", "/", "/assets/viewer.js", "/assets/..%2Fpages%2Fviewer.html", "/static/x", "/debug.json",
        "/debug/stream", "/debug/actors/x", "/api/search", "/api/timeline", "/api/storage", "/api/export",
        "/api/team"]
QUERY_KEYS = ["project", "limit", "offset", "tokens", "code", "next", "q", "mode", "source", "anchor", "before",
              "after", "since", "until", "type", "kind", "file", "concept", "session", "origin"]


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedWorker]:
    with serve_in_thread(tmp_path_factory.mktemp("fuzz") / "data", batch_quiet_s=0.05, fault_injection=False) as worker:
        yield worker


def send(worker: ThreadedWorker, method: str, path: str, body: bytes | None) -> int:
    """The status of one request; the server may answer (413) and close before the body is all sent."""
    head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{worker.port}\r\nAuthorization: Bearer {worker.token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body or b'')}\r\nConnection: close\r\n\r\n")
    with socket.create_connection(("127.0.0.1", worker.port), timeout=30) as sock:
        try:
            sock.sendall(head.encode("latin-1") + (body or b""))
        except (BrokenPipeError, ConnectionResetError):
            pass
        reply = b""
        while b"\r\n" not in reply:
            chunk = sock.recv(4096)
            if not chunk:
                break
            reply += chunk
    return int(reply.split(b" ", 2)[1])


FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                         HealthCheck.data_too_large])


async def test_the_fuzzed_paths_reach_every_route(tmp_path: Path) -> None:
    """A route added later must be added above, or this fails."""
    async with open_worker(tmp_path / "data") as worker:
        rules = create_quart_app(worker.services).url_map
    matcher = rules.bind("127.0.0.1")
    reached = set()
    for method, paths in (("POST", POSTS), ("GET", GETS)):
        for path in paths:
            try:
                reached.add((method, matcher.match(path, method=method, return_rule=True)[0].rule))
            except HTTPException:
                pass  # a path no rule takes (404), or one that answers 405: fuzzed all the same
    served = {(method, rule.rule) for rule in rules.iter_rules() for method in (rule.methods or set())
              if method in ("GET", "POST")}
    assert served - reached == set()


@FUZZ
@given(path=st.sampled_from(POSTS), body=bodies)
def test_posts_never_answer_5xx(fuzzed: ThreadedWorker, path: str, body: bytes) -> None:
    status = send(fuzzed, "POST", path, body)
    assert status < 500 or (status == 503 and path.startswith("/api/sessions/")), (path, status, body[:200])


HOSTILE = {
    "deep in a field": b'{"claudeSessionId": "s", "tool_name": "t", "tool_input": ' + b"[" * 5000 + b"]" * 5000 + b"}",
    "deep at the top": b"[" * 5000 + b"]" * 5000,
    "deeper than any Python decodes": b'{"claudeSessionId": "s", "tool_input": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "deep objects": b'{"a":' * 3000 + b"1" + b"}" * 3000,
    "invalid UTF-8 in a string": b'{"claudeSessionId": "s\xff\xfe", "tool_name": "t", "records": ["\xc3"]}',
    "huge integer": b'{"claudeSessionId": "s", "promptNumber": 1' + b"0" * 400 + b', "ids": [1' + b"0" * 400 + b"]}",
}


@pytest.mark.parametrize("path", POSTS)
@pytest.mark.parametrize("body", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_bodies_never_answer_5xx(fuzzed: ThreadedWorker, path: str, body: bytes) -> None:
    """The bodies that once made a 500 somewhere, sent to every route: the random search above may not draw them."""
    status = send(fuzzed, "POST", path, body)
    assert status < 500 or (status == 503 and path.startswith("/api/sessions/")), (path, status)


@FUZZ
@given(path=st.sampled_from(GETS), query=st.dictionaries(st.sampled_from(QUERY_KEYS), adversarial_text, max_size=4))
def test_gets_never_answer_5xx(fuzzed: ThreadedWorker, path: str, query: dict[str, str]) -> None:
    target = path + ("?" + "&".join(f"{k}={quote(v[:5000], safe='')}" for k, v in query.items()) if query else "")
    status = send(fuzzed, "GET", target, None)
    assert status < 500, (target[:300], status)


def test_after_the_fuzzing_the_worker_is_healthy(fuzzed: ThreadedWorker) -> None:
    fuzzed.wait_idle(timeout=120)
    debug = fuzzed.get("/debug")
    assert debug["worker"]["errors"] == 0, debug["worker"]["lastError"]
    assert debug["supervisor"]["crashes"] == 0 and debug["sessions"]["failed"] == 0
    assert debug["journal"]["pending"] == 0 and debug["journal"]["parked"] == 0
    assert fuzzed.request("GET", "/api/health")[0] == 200


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def has_tag(text: str) -> bool:
    """Whether ``text`` still holds a privacy tag as the grammar reads one (``<PRIVATE0`` is none)."""
    return next(privacy.tags_in(text), None) is not None


hook_payloads = st.one_of(
    st.dictionaries(st.sampled_from(["session_id", "cwd", "hook_event_name", "tool_name", "tool_input",
                                     "tool_response", "tool_use_id", "prompt", "last_assistant_message", "error",
                                     "agent_id", "agent_type", "reason", "transcript_path"]), json_values, max_size=9),
    json_values,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.data_too_large])
@given(payload=hook_payloads, stage=st.sampled_from(["UserPromptSubmit", "PostToolUse", "PostToolUseFailure", "Stop",
                                                     "SubagentStop", "SessionEnd", "SessionStart", "Other"]))
def test_the_hooks_request_building_never_fails(payload: Any, stage: str) -> None:
    """What a hook does between parsing stdin and sending: any JSON object is a request or nothing."""
    raw = json.dumps(payload)
    parsed = fastjson.loads(raw)
    assert parsed == payload
    if not isinstance(parsed, dict):
        return
    call = encoded_call({**parsed, "hook_event_name": stage}, project=project_of(text_field(parsed, "cwd")), key="k")
    if call is not None and call[2] is not None:
        assert len(call[2]) < 5 * 1024 * 1024
        body = json.loads(call[2])
        for key in ("prompt", "tool_input", "tool_response", "error", "last_user_message", "last_assistant_message",
                    "reason"):
            assert not any(has_tag(text) for text in strings(body.get(key))), (key, body.get(key))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(stdin=st.one_of(st.binary(max_size=2000), hook_payloads.map(lambda p: json.dumps(p).encode())))
def test_hook_processes_always_exit_0_with_valid_output(tmp_path: Path, stdin: bytes) -> None:
    for stage in ("PostToolUse", "UserPromptSubmit"):
        result = run_hook(stage, stdin, tmp_path, SESSIONMEM_PORT="9")
        assert result.returncode == 0 and result.stderr == b""
        assert result.stdout == b"" or isinstance(json.loads(result.stdout), dict)
