"""An embedder that runs its model in a child process at the lowest CPU priority.

Why a process: background embedding (the vector index catching up) must take only the
CPU that accepting events leaves. A thread of the worker given nice 19 does not do that:
it shares the worker's GIL, and when the kernel preempts it while it holds the GIL (it
does, a niced thread runs last), the Trio thread waits for a thread that is not
running. Measured on the bench's open loop (500 events/s, a quiet 2-core machine,
``bench/run.py openloop``): with a niced thread the worker accepted 166 events/s and
its p99 was 24 s; with vectors off, 499/s and 257 ms. A process has its own GIL and can
be niced whole, so it really does run only on spare CPU.

:class:`IsolatedEmbedder` keeps the :class:`~sessionmem.embed.base.Embedder` contract:
``embed`` is synchronous (call it on a worker thread); it sends the texts to the child
and waits for the vectors. The child (``python -m sessionmem.embed.isolated_child NAME``,
:mod:`sessionmem.embed.isolated_child`) runs the embedder of that name at nice 19.

Wire format, both ways: a 4-byte little-endian length, then that many bytes of msgpack
(a :class:`Request`: the texts and the threads the call may use; a :class:`Reply` back):
:func:`write_frame`, :func:`read_frame`.

Resource handling:
    The child starts on the first ``embed`` and lives until :meth:`IsolatedEmbedder.close`,
    which closes its stdin (it exits at end of input) and waits up to
    ``EXIT_GRACE_S`` before killing it. It exits by itself when the worker dies in any
    way, ``kill -9`` included: its stdin then reaches end of input. One request is on
    the pipe at a time (a lock). The child's stderr is the worker's; anything a library
    prints to its stdout goes there too, never into the replies.

Error handling:
    A child that dies or answers garbage makes ``embed`` raise
    :class:`EmbedderProcessError` (with its exit status); the next ``embed`` starts a
    new child. An exception inside the child's embedder comes back as the same error
    with the child's message. After ``close``, ``embed`` raises
    :class:`~sessionmem.embed.base.EmbedderClosedError`.
"""

from __future__ import annotations

import struct
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import IO

import msgspec
import numpy as np

from sessionmem.embed.base import Embedder, EmbedderClosedError, EmbedderStatistics

CHILD_NICE = 19  # the lowest priority: the child takes what the worker leaves
EXIT_GRACE_S = 2.0  # after its stdin closes, how long the child may take to exit before it is killed
_LENGTH = struct.Struct("<I")
MAX_FRAME = 256 * 1024 * 1024  # a sanity bound on a frame's length: more means the stream is broken


class EmbedderProcessError(RuntimeError):
    """The embedding process died, answered garbage, or its embedder raised."""


class Request(msgspec.Struct, frozen=True):
    """What the worker asks the child: vectors of ``texts``, on ``threads`` threads (0: the embedder's default)."""

    texts: list[str]
    threads: int = 0


class Reply(msgspec.Struct, frozen=True):
    """What the child answers to one request."""

    vectors: bytes = b""  # float32, row-major, (len(texts), dimensions)
    error: str = ""
    statistics: EmbedderStatistics | None = None  # the child's own counters after this request


encode = msgspec.msgpack.Encoder().encode
decode_request = msgspec.msgpack.Decoder(Request).decode
_decode_reply = msgspec.msgpack.Decoder(Reply).decode


def write_frame(stream: IO[bytes], payload: bytes) -> None:
    stream.write(_LENGTH.pack(len(payload)))
    stream.write(payload)
    stream.flush()


def read_frame(stream: IO[bytes]) -> bytes | None:
    """The next frame's payload; ``None`` at end of input (or a cut-off frame)."""
    header = stream.read(_LENGTH.size)
    if len(header) < _LENGTH.size:
        return None
    (length,) = _LENGTH.unpack(header)
    if length > MAX_FRAME:
        raise EmbedderProcessError(f"a frame of {length} bytes: the stream is broken")
    payload = stream.read(length)
    return payload if len(payload) == length else None


class IsolatedEmbedder:
    """``inner``'s vectors, computed by a child process running ``inner``'s name at nice 19.

    ``inner`` is only read for its name, model id and dimensions: nothing is loaded
    through it (the worker passes the embedder its queries use).
    """

    def __init__(self, inner: Embedder, *, nice: int = CHILD_NICE) -> None:
        self.name = inner.name
        self.model_id = inner.model_id
        self.dimensions = inner.dimensions
        self._nice = nice
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._closed = False
        self._starts = 0
        self._child_statistics = EmbedderStatistics(self.name, self.model_id, self.dimensions)
        self._totals = EmbedderStatistics(self.name, self.model_id, self.dimensions)  # of children that exited

    @property
    def pid(self) -> int | None:
        """The child's process id while it runs (tests and ``/debug`` read it)."""
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    @property
    def starts(self) -> int:
        """How many children were started (more than one: a child died and was replaced)."""
        return self._starts

    def embed(self, texts: Sequence[str], *, threads: int | None = None) -> np.ndarray:
        """Unit vectors of ``texts``, float32 ``(len(texts), dimensions)``, computed by the child (on ``threads``
        threads, if given)."""
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        with self._lock:
            if self._closed:
                raise EmbedderClosedError(f"the isolated {self.name} embedder is closed")
            process = self._running()
            assert process.stdin is not None and process.stdout is not None
            try:
                write_frame(process.stdin, encode(Request(list(texts), threads or 0)))
                payload = read_frame(process.stdout)
            except (OSError, ValueError) as exc:  # a broken pipe; ValueError: the pipe was closed under us
                payload = None
                cause: BaseException | None = exc
            else:
                cause = None
            if payload is None:
                raise EmbedderProcessError(f"the embedding process ended ({self._reap()})") from cause
            try:
                reply = _decode_reply(payload)
            except msgspec.DecodeError as exc:
                raise EmbedderProcessError(f"the embedding process answered garbage ({self._reap()})") from exc
            if reply.statistics is not None:
                self._child_statistics = reply.statistics
            if reply.error:
                raise EmbedderProcessError(f"the embedding process failed: {reply.error}")
            vectors = np.frombuffer(reply.vectors, dtype=np.float32)
            if vectors.size != len(texts) * self.dimensions:
                raise EmbedderProcessError(f"the embedding process sent {vectors.size} numbers for "
                                           f"{len(texts)} texts of {self.dimensions} dimensions")
            return vectors.reshape(len(texts), self.dimensions).copy()

    def interrupt(self) -> None:
        """Kill the child mid-request, from any thread: the request under way raises
        :class:`EmbedderProcessError` at once (its caller has gone), the next starts another child."""
        process = self._process
        if process is not None and process.poll() is None:
            process.kill()

    def statistics(self) -> EmbedderStatistics:
        child = self._child_statistics
        return msgspec.structs.replace(self._counted(), loaded=child.loaded and self.pid is not None,
                                       load_seconds=child.load_seconds)

    def _counted(self) -> EmbedderStatistics:
        """The counters of every child so far: those that exited, and the running one."""
        child, done = self._child_statistics, self._totals
        return EmbedderStatistics(self.name, self.model_id, self.dimensions, texts=done.texts + child.texts,
                                  batches=done.batches + child.batches, seconds=done.seconds + child.seconds)

    def close(self) -> None:
        """Stop the child; ``embed`` then raises ``EmbedderClosedError``.

        A request under way may finish for ``EXIT_GRACE_S``; after that the child is killed
        (its caller gets an ``EmbedderProcessError``), so a hung child cannot hold the close.
        """
        self._closed = True
        if not self._lock.acquire(timeout=EXIT_GRACE_S):
            process = self._process
            if process is not None:
                process.kill()
            self._lock.acquire()
        try:
            if self._process is not None:
                self._stop(self._process)
                self._reap()
        finally:
            self._lock.release()

    def _running(self) -> subprocess.Popen[bytes]:
        process = self._process
        if process is not None and process.poll() is None:
            return process
        if process is not None:
            self._reap()
        # Each side flushes a frame as a whole (write_frame): no reply waits in a buffer.
        # -P: not the working directory's modules first (a `sessionmem` folder there would shadow the package).
        self._process = subprocess.Popen(
            [sys.executable, "-P", "-m", "sessionmem.embed.isolated_child", self.name, str(self._nice)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True)
        self._starts += 1
        return self._process

    def _reap(self) -> str:
        """Forget the child (stopping it if it still runs); what became of it, for an error message."""
        process, self._process = self._process, None
        if process is None:
            return "not running"
        for stream in (process.stdin, process.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        status = process.poll()
        if status is None:
            self._stop(process)
            status = process.returncode
        self._totals = self._counted()
        self._child_statistics = EmbedderStatistics(self.name, self.model_id, self.dimensions)
        return f"exit status {status}"

    @staticmethod
    def _stop(process: subprocess.Popen[bytes]) -> None:
        try:
            if process.stdin is not None:
                process.stdin.close()  # end of input: the child's loop ends
        except OSError:
            pass
        try:
            process.wait(EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
