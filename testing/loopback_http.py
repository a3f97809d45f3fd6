"""An HTTP server of the tests on 127.0.0.1, in a daemon thread: the scripted model servers and the forward proxy.

:class:`QuietHandler` speaks HTTP/1.1 and logs nothing; :class:`LoopbackServer` serves a
handler class on a free port (:attr:`~LoopbackServer.port`).

Error handling:
    A client that goes away mid-request (``ConnectionError``: a killed hook, a stopped
    worker) is passed over; any other error in a handler is printed as the standard
    library does.

Resource handling:
    A ``ThreadingHTTPServer`` (one daemon thread a connection) in a daemon thread, shut down
    by :meth:`LoopbackServer.close` or by leaving the ``with`` block.
"""

from __future__ import annotations

import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


class QuietHandler(BaseHTTPRequestHandler):
    """HTTP/1.1, with no line logged per request."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return


class _Server(ThreadingHTTPServer):
    """One daemon thread a connection; a client gone mid-request is not printed as an error."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A killed hook or worker drops its connection while a reply is written: the tests do
        # that on purpose, and the traceback would bury a real failure's in the log.
        if isinstance(sys.exception(), ConnectionError):
            return
        super().handle_error(request, client_address)


class LoopbackServer:
    """A subclass passes its handler class to :meth:`_serve`, once, from its ``__init__``."""

    def _serve(self, handler: type[BaseHTTPRequestHandler], thread_name: str) -> None:
        self._server = _Server(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name=thread_name, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
