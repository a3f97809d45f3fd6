"""The connection wrapper under Hypercorn: a close and a response's last write take turns; a response
head goes out with its body, in one write."""

from __future__ import annotations

import socket

import trio
import trio.testing

from sessionmem.server.http_server import EOF_WAIT_S, _Connection


def connection_pair() -> tuple[_Connection, socket.socket]:
    ours, theirs = socket.socketpair()
    return _Connection(trio.SocketStream(trio.socket.from_stdlib_socket(ours))), theirs


async def test_an_eof_during_a_send_waits_for_it_instead_of_failing_it() -> None:
    """Hypercorn's close sends the EOF outside its send lock; trio refused the write that came
    during it (BusyResourceError, logged as "Error in ASGI Framework" under load)."""
    connection, client = connection_pair()
    with client:
        failures: list[BaseException] = []

        async def last_write() -> None:
            try:
                await connection.send_all(b"0\r\n\r\n")
            except trio.ClosedResourceError:
                pass  # written after the EOF: Hypercorn takes that as the connection closed
            except trio.BusyResourceError as exc:
                failures.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(connection.send_eof)  # first: it holds the stream across a checkpoint
            nursery.start_soon(last_write)
        assert failures == []
        client.settimeout(5)
        received = b""
        while chunk := client.recv(100):
            received += chunk
        assert received in (b"", b"0\r\n\r\n")  # the write, if it came first, then the EOF
        await connection.aclose()


async def test_an_eof_behind_a_stuck_send_gives_up_and_the_close_goes_on() -> None:
    connection, client = connection_pair()
    with client:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        ended: list[type[BaseException]] = []

        async def stuck_send() -> None:
            try:
                await connection.send_all(b"x" * 50_000_000)  # the client never reads
            except trio.ClosedResourceError as exc:
                ended.append(type(exc))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(stuck_send)
            await trio.testing.wait_all_tasks_blocked()  # the send is stuck: the client's buffers are full
            with trio.fail_after(EOF_WAIT_S + 5):
                await connection.send_eof()  # gives up after EOF_WAIT_S
                await connection.aclose()
        assert ended == [trio.ClosedResourceError]  # the close ended the stuck send



HEAD = b"HTTP/1.1 202 \r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n"


class CountingStream:
    """A socket stream that counts its writes (trio's streams cannot be subclassed)."""

    def __init__(self, sock: trio.socket.SocketType) -> None:
        self._stream = trio.SocketStream(sock)
        self.socket = self._stream.socket
        self.writes: list[bytes] = []

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))
        await self._stream.send_all(data)

    async def send_eof(self) -> None:
        await self._stream.send_eof()

    async def aclose(self) -> None:
        await self._stream.aclose()


async def test_a_response_goes_out_in_one_write_and_an_empty_one_in_none() -> None:
    ours, client = socket.socketpair()
    stream = CountingStream(trio.socket.from_stdlib_socket(ours))
    connection = _Connection(stream)
    with client:
        # As Hypercorn sends a response: head, body, end of message (empty with a content-length).
        await connection.send_all(HEAD)
        assert stream.writes == []  # the head waits for its body
        await connection.send_all(b'{"ok":true}')
        await connection.send_all(b"")
        assert stream.writes == [HEAD + b'{"ok":true}']
        # A head with nothing to come goes at once: an empty body, a stream, an informational answer.
        for head in (b"HTTP/1.1 204 \r\ncontent-length: 0\r\n\r\n",
                     b"HTTP/1.1 200 \r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
                     b"HTTP/1.1 100 \r\n\r\n"):
            await connection.send_all(head)
            assert stream.writes[-1] == head
        # A head left waiting (its body never came) is still sent before the EOF.
        await connection.send_all(HEAD.replace(b"202", b"500"))
        await connection.send_eof()
        client.settimeout(5)
        received = b""
        while chunk := client.recv(4096):
            received += chunk
        assert received.endswith(HEAD.replace(b"202", b"500"))
        assert received.count(b"HTTP/1.1 ") == 5
        await connection.aclose()
