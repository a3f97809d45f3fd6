"""The embedding process: ``python -m sessionmem.embed.isolated_child NAME [NICE]``.

Started by :class:`~sessionmem.embed.isolated.IsolatedEmbedder` (the wire format is
described there). It lowers its own priority to ``NICE`` (default 19), builds the
embedder ``NAME`` (:func:`~sessionmem.embed.choice.choose_embedder`; the model loads on
the first request), then answers requests from stdin on its original stdout until end
of input.

Resource handling:
    Nothing outlives the loop: at end of input (the worker closed the pipe, or died) or
    when the worker stops reading, the embedder is closed and the process exits 0.
    SIGINT is ignored (a Ctrl-C meant for the worker reaches its whole process group).

Error handling:
    An exception while embedding is sent back as the reply's ``error`` and the loop goes
    on; a request that does not decode is answered the same way. A broken stream (a frame
    that cannot be read) ends the process, which the worker sees as a dead child.
"""

from __future__ import annotations

import os
import signal
import sys

import numpy as np

from sessionmem.embed.choice import choose_embedder
from sessionmem.embed.isolated import CHILD_NICE, Reply, decode_request, encode, read_frame, write_frame
from sessionmem.protocol.oskit import lower_priority


def serve(name: str, nice: int) -> int:
    """Answer requests until end of input; the exit status."""
    lower_priority(nice)
    # Ctrl-C in the worker's terminal reaches the whole process group: the worker decides
    # when this process ends (by closing its input), not the keyboard.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The replies get a descriptor of their own; whatever a library writes to stdout
    # goes to stderr instead of into the stream.
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    requests = sys.stdin.buffer
    embedder = choose_embedder(name)
    try:
        while True:
            payload = read_frame(requests)
            if payload is None:
                return 0
            try:
                request = decode_request(payload)
                vectors = np.ascontiguousarray(embedder.embed(request.texts, threads=request.threads or None),
                                               dtype=np.float32)
                reply = Reply(vectors=vectors.tobytes(), statistics=embedder.statistics())
            except Exception as exc:  # the worker raises it; this process carries on
                reply = Reply(error=f"{type(exc).__name__}: {exc}", statistics=embedder.statistics())
            try:
                write_frame(replies, encode(reply))
            except BrokenPipeError:  # the worker is gone
                return 0
    finally:
        embedder.close()


if __name__ == "__main__":
    raise SystemExit(serve(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else CHILD_NICE))
