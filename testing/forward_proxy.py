"""A tiny HTTP forward proxy on loopback that records what went through it, for tests.

A client configured with a proxy sends a plain-HTTP request to it with the absolute URI
(``POST http://127.0.0.1:PORT/v1/messages HTTP/1.1``); the proxy records it
(:class:`ProxiedRequest`), sends it on to that target, and returns the target's answer
as it came. ``CONNECT host:port`` (what a client sends for an ``https://`` target) is
recorded and tunnelled: bytes both ways, unread. Enough for the scripted model servers
(:mod:`.messages_api`, :mod:`.chat_completions_api`), which are plain HTTP on loopback.

Resource handling:
    A ``ThreadingHTTPServer`` on 127.0.0.1 in a daemon thread, one thread a connection;
    use it as a context manager (or call :meth:`ForwardProxy.close`). Each request
    opens its own connection to the target (``Connection: close`` to the client).
"""

from __future__ import annotations

import http.client
import select
import socket
import threading
from dataclasses import dataclass
from urllib.parse import urlsplit

from sessionmem.testing.loopback_http import LoopbackServer, QuietHandler

TARGET_TIMEOUT_S = 300.0  # a scripted server may stall on purpose: longer than any test waits
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authorization", "proxy-authenticate",
                         "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"})


@dataclass(frozen=True)
class ProxiedRequest:
    method: str
    target: str  # the absolute URI asked for (``host:port`` for CONNECT)
    proxy_authorization: str = ""  # the Proxy-Authorization header, if the client sent one


class ForwardProxy(LoopbackServer):
    """See the module docstring; ``requests`` lists what went through, in order."""

    def __init__(self) -> None:
        self.requests: list[ProxiedRequest] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(QuietHandler):
            def _record(self) -> None:
                with proxy._lock:
                    proxy.requests.append(ProxiedRequest(self.command, self.path,
                                                         self.headers.get("Proxy-Authorization", "")))

            def _forward(self) -> None:
                self._record()
                target = urlsplit(self.path)
                if target.scheme != "http" or not target.hostname:
                    self.send_error(400, "an absolute http:// URI is expected")
                    return
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {name: value for name, value in self.headers.items() if name.lower() not in _HOP_BY_HOP}
                path = target.path or "/"
                if target.query:
                    path += "?" + target.query
                upstream = http.client.HTTPConnection(target.hostname, target.port or 80, timeout=TARGET_TIMEOUT_S)
                try:
                    upstream.request(self.command, path, body=body or None, headers=headers)
                    answer = upstream.getresponse()
                    data = answer.read()
                    status, reason, answer_headers = answer.status, answer.reason, answer.getheaders()
                except OSError as exc:
                    self.send_error(502, f"cannot reach the target: {exc}")
                    return
                finally:
                    upstream.close()
                self.send_response(status, reason)
                for name, value in answer_headers:
                    if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)
                self.close_connection = True

            do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = _forward  # noqa: N815 (stdlib names)

            def do_CONNECT(self) -> None:  # noqa: N802 (stdlib name)
                self._record()
                host, _, port = self.path.rpartition(":")
                try:
                    upstream = socket.create_connection((host.strip("[]"), int(port)), timeout=TARGET_TIMEOUT_S)
                except (OSError, ValueError) as exc:
                    self.send_error(502, f"cannot reach the target: {exc}")
                    return
                self.send_response(200, "Connection established")
                self.end_headers()
                self.close_connection = True
                _tunnel(self.connection, upstream)

        self._serve(Handler, "forward-proxy")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def targets(self) -> list[str]:
        with self._lock:
            return [request.target for request in self.requests]


def _tunnel(client: socket.socket, upstream: socket.socket) -> None:
    """Copy bytes both ways until either side closes."""
    sockets = [client, upstream]
    try:
        while True:
            readable, _, _ = select.select(sockets, [], [], TARGET_TIMEOUT_S)
            if not readable:
                return
            for source in readable:
                data = source.recv(65536)
                if not data:
                    return
                (upstream if source is client else client).sendall(data)
    except OSError:
        return
    finally:
        upstream.close()
