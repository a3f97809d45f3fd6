"""Bad input gets a clear error, loses nothing else, and leaves the worker healthy."""

from __future__ import annotations

import socket

import pytest

from sessionmem.testing.worker_process import WorkerProcess

from .conftest import data_dir_contains

pytestmark = pytest.mark.slow

OBS = "/api/sessions/observations"


def post_unread(worker: WorkerProcess, path: str, body: bytes) -> tuple[int, bytes]:
    """POST a body the server may refuse before reading it all (it answers, then closes)."""
    with socket.create_connection(("127.0.0.1", worker.port), timeout=10) as sock:
        head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        try:
            sock.sendall(head.encode() + body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused early: the answer is already on its way
        reply = b""
        while b"\r\n\r\n" not in reply or len(reply.split(b"\r\n\r\n", 1)[1]) < 10:
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
    status_line, _, rest = reply.partition(b"\r\n")
    return int(status_line.split()[1]), rest


def observation(session: str = "s-bad", **fields: object) -> dict[str, object]:
    return {"claudeSessionId": session, "cwd": "/work/proj", "tool_name": "Bash",
            "tool_input": {"command": "ls"}, "tool_response": {"stdout": "a\nb"}, "tool_use_id": "t1", **fields}


@pytest.mark.parametrize(
    ("raw", "path", "message"),
    [
        (b"{not json", "$", "malformed JSON"),
        (b"", "$", "empty"),
        (b"[1, 2]", "$", "Expected `object`"),
        (b'{"claudeSessionId": 7, "tool_name": "Bash"}', "$.claudeSessionId", "Expected `str`, got `int`"),
        (b'{"tool_name": "Bash"}', "$", "missing required field `claudeSessionId`"),
        (b'{"claudeSessionId": "", "tool_name": "Bash"}', "$.claudeSessionId", "length >= 1"),
        (b'{"claudeSessionId": "s", "tool_name": "Bash", "failed": "yes"}', "$.failed", "Expected `bool`"),
    ],
)
def test_malformed_bodies_are_400_with_path(worker: WorkerProcess, raw: bytes, path: str, message: str) -> None:
    status, body = worker.request("POST", OBS, raw=raw)
    assert status == 400
    assert body["path"] == path
    assert message in body["error"]


def test_bad_input_loses_nothing_else(worker: WorkerProcess) -> None:
    assert worker.request("POST", OBS, observation(tool_use_id="before"))[0] == 202
    for raw in (b"{", b'{"claudeSessionId": 1}', b"\xff\xfe", b"null"):
        assert worker.request("POST", OBS, raw=raw)[0] == 400
    huge = b'{"claudeSessionId": "s-bad", "tool_name": "Bash", "tool_response": "' + b"x" * (6 * 1024 * 1024) + b'"}'
    status, body = post_unread(worker, OBS, huge)
    assert status == 413 and b"limit" in body
    assert worker.request("POST", OBS, observation(tool_use_id="after"))[0] == 202

    worker.wait_idle()
    ids = {o["tool_use_id"] for o in worker.get("/api/observations")["observations"]}
    assert ids == {"before", "after"}
    assert worker.request("GET", "/api/health")[0] == 200
    assert worker.get("/debug")["journal"]["pending"] == 0


def test_large_tool_response_is_stored_head_and_tail(worker: WorkerProcess) -> None:
    text = "HEAD-" + "m" * 400_000 + "-TAIL"
    assert worker.request("POST", OBS, observation(tool_response={"stdout": text}))[0] == 202
    worker.wait_idle()
    (summary,) = worker.get("/api/observations")["observations"]
    stored = worker.get(f"/api/observations/{summary['id']}")["tool_response"]
    assert stored["stdout"].startswith("HEAD-") and stored["stdout"].endswith("-TAIL")
    assert "characters elided" in stored["stdout"]
    assert len(stored["stdout"]) < 70_000


def test_unknown_ids_and_bad_queries(worker: WorkerProcess) -> None:
    assert worker.request("GET", "/api/observations/999999")[0] == 404
    status, body = worker.request("POST", "/sessions/424242/init", {"project": "p", "userPrompt": "hi"})
    assert status == 404 and "424242" in body["error"]
    status, body = worker.request("GET", "/api/observations?limit=abc")
    assert status == 400 and body["path"] == "?limit"
    status, body = worker.request("GET", "/api/context/inject")
    assert status == 400 and body["path"] == "?project"


def test_observation_for_unknown_session_is_kept(worker: WorkerProcess) -> None:
    # The worker may start mid-session (hooks fail open): the event creates its session.
    status, body = worker.request("POST", OBS, observation(session="never-initialized"))
    assert status == 202 and body["promptNumber"] == 0
    worker.wait_idle()
    sessions = worker.get("/api/sessions")["sessions"]
    assert [s["claudeSessionId"] for s in sessions] == ["never-initialized"]
    assert sessions[0]["observations"] == 1


def test_skip_list_and_private_content(worker: WorkerProcess) -> None:
    status, body = worker.request("POST", OBS, observation(tool_name="TodoWrite"))
    assert status == 200 and body["status"] == "skipped"

    status, body = worker.request("POST", "/api/sessions/init",
                                  {"claudeSessionId": "s-priv", "cwd": "/w/p", "prompt": "<private>only secret</private>"})
    assert status == 200 and body["skipped"] is True and body["promptNumber"] == 0
    assert "private" in body["reason"]
    worker.request("POST", "/api/sessions/init",
                   {"claudeSessionId": "s-priv", "cwd": "/w/p", "prompt": "visible <private>zebra-42</private>"})
    worker.request("POST", OBS, observation(session="s-priv", tool_input={"command": "echo <private>zebra-42</private>"},
                                            tool_response={"stdout": "<private>zebra-42"}))
    worker.request("POST", "/api/sessions/summarize",
                   {"claudeSessionId": "s-priv", "last_assistant_message": "done <private>zebra-42</private>"})
    worker.wait_idle()
    worker.stop()
    assert data_dir_contains(worker.data_dir, b"zebra-42") == []
    assert data_dir_contains(worker.data_dir, b"visible")


def test_chunked_bodies_are_read_and_bounded(worker: WorkerProcess) -> None:
    def chunked(body: bytes, chunk: int = 64 * 1024) -> bytes:
        parts = [b"%x\r\n%s\r\n" % (len(body[i:i + chunk]), body[i:i + chunk]) for i in range(0, len(body), chunk)]
        return b"".join(parts) + b"0\r\n\r\n"

    def post_chunked(body: bytes) -> str:
        with socket.create_connection(("127.0.0.1", worker.port), timeout=10) as sock:
            head = (f"POST {OBS} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    "Transfer-Encoding: chunked\r\n\r\n").encode()
            try:
                sock.sendall(head + chunked(body))
            except (BrokenPipeError, ConnectionResetError):
                pass  # refused before the end: the answer is already on its way
            reply = b""
            while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                reply += chunk
            return reply.decode(errors="replace")

    small = post_chunked(b'{"claudeSessionId": "chunky", "tool_name": "Read", "tool_use_id": "c1"}')
    assert small.startswith("HTTP/1.1 202")
    huge = post_chunked(b'{"claudeSessionId": "chunky", "tool_name": "Read", "tool_response": "'
                        + b"z" * (6 * 1024 * 1024) + b'"}')
    assert huge.startswith("HTTP/1.1 413") and "byte limit" in huge
    worker.wait_idle()
    assert [o["tool_use_id"] for o in worker.get("/api/observations")["observations"]] == ["c1"]
