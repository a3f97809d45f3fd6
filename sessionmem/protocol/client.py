"""A minimal HTTP/1.1 client for talking to the local worker: every client's transport. Standard library only.

``http.client`` costs a hook ~25 ms of imports (it pulls in the ``email`` package);
a raw ``_socket`` with a hand-written request costs next to nothing, and the worker is ours, on
loopback, answering ``Connection: close``. One request per connection.

Error handling:
    Every failure (refused, timeout, reset, garbage) raises :class:`WorkerUnavailable`;
    what a client then does is decided in one place, :mod:`.delivery`.
"""

from __future__ import annotations

import _socket  # not `socket`: its enum wrappers cost a hook ~3 ms
import time

from sessionmem.protocol import fastjson

TYPE_CHECKING = False  # typing costs a hook ~4 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

MAX_RESPONSE = 8 * 1024 * 1024


class WorkerUnavailable(Exception):
    """The worker could not be reached or did not answer properly in time.

    ``refused`` is true when nothing listens on the port at all; ``timed_out`` when something does and
    its reply did not come (complete) in time: a busy worker, as often as another program.
    """

    def __init__(self, message: str, *, refused: bool = False, timed_out: bool = False) -> None:
        super().__init__(message)
        self.refused = refused
        self.timed_out = timed_out


class Reply:
    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return fastjson.loads(self.body)


def request(host: str, port: int, method: str, path: str, body: bytes | None = None, *,
            timeout: float, token: str | None = None) -> Reply:
    """Send one request (with ``token`` as its bearer credential) and read the whole reply within ``timeout``."""
    head = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}", "Connection: close", "Accept: */*"]
    if token is not None:
        head.append(f"Authorization: Bearer {token}")
    if body is not None:
        head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + (body or b"")
    deadline = time.monotonic() + timeout
    try:
        sock = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            # A bytes host skips the idna codec import (~1.5 ms) that a str host costs.
            sock.connect((host.encode("ascii"), port))
            sock.sendall(data)
            raw = bytearray()
            while not _complete(raw):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise WorkerUnavailable(f"{host}:{port}: no complete reply within {timeout}s", timed_out=True)
                sock.settimeout(remaining)
                chunk = sock.recv(65536)
                if not chunk:
                    break
                raw += chunk
                if len(raw) > MAX_RESPONSE:
                    raise WorkerUnavailable("reply too large")
        finally:
            sock.close()
    except OSError as exc:  # refused, timed out, reset
        raise WorkerUnavailable(f"{host}:{port}: {exc}", refused=isinstance(exc, ConnectionRefusedError),
                                timed_out=isinstance(exc, TimeoutError)) from None
    return _parse(bytes(raw))


def _complete(raw: bytearray) -> bool:
    """Whether ``raw`` holds a whole reply (the server may keep the connection open)."""
    header_end = raw.find(b"\r\n\r\n")
    if header_end < 0:
        return False
    head = bytes(raw[:header_end]).lower()
    marker = head.find(b"content-length:")
    if marker >= 0:
        line_end = head.find(b"\r\n", marker)
        length = int(head[marker + 15 : line_end if line_end >= 0 else len(head)].strip() or b"0")
        return len(raw) - header_end - 4 >= length
    if b"transfer-encoding: chunked" in head:
        return raw.endswith(b"0\r\n\r\n")
    return False  # read to EOF


def _parse(raw: bytes) -> Reply:
    header_end = raw.find(b"\r\n\r\n")
    if header_end < 0:
        raise WorkerUnavailable("incomplete HTTP reply")
    lines = raw[:header_end].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise WorkerUnavailable(f"not an HTTP reply: {lines[0][:80]!r}")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    body = raw[header_end + 4 :]
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = _dechunk(body)
    elif "content-length" in headers:
        body = body[: int(headers["content-length"])]
    return Reply(int(parts[1]), headers, body)


def _dechunk(body: bytes) -> bytes:
    out = bytearray()
    position = 0
    while True:
        line_end = body.find(b"\r\n", position)
        if line_end < 0:
            raise WorkerUnavailable("truncated chunked reply")
        size = int(body[position:line_end].split(b";")[0] or b"0", 16)
        if size == 0:
            return bytes(out)
        start = line_end + 2
        out += body[start : start + size]
        position = start + size + 2
