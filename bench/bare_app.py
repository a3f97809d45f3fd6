"""The framework ceiling: a bare Quart-Trio endpoint on Hypercorn, configured like the worker.

It accepts the same ``POST /api/sessions/observations`` body, decodes it with the
same msgspec type, and answers 202 -- no journal, no actors. Run as its own process
(``python bench/bare_app.py STATE_FILE``); it writes ``{"pid", "port"}`` to STATE_FILE
once bound and stops on SIGTERM.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from functools import partial

import msgspec
import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from quart import Response, request
from quart_trio import QuartTrio

from sessionmem.server.payloads import ObservationRequest, decode

_encoder = msgspec.json.Encoder()


def create_bare_app() -> QuartTrio:
    app = QuartTrio("bare")

    @app.post("/api/sessions/observations")
    async def observations() -> Response:
        decode(await request.get_data(cache=False), ObservationRequest)
        return Response(_encoder.encode({"status": "accepted"}), status=202, content_type="application/json")

    return app


async def main(state_file: str) -> None:
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    stop = trio.Event()
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(partial(serve, create_bare_app(), config, shutdown_trigger=stop.wait))
            with open(state_file, "w") as f:
                json.dump({"pid": os.getpid(), "port": int(binds[0].rsplit(":", 1)[1])}, f)
            async for _ in signals:
                break
            stop.set()


if __name__ == "__main__":
    trio.run(main, sys.argv[1])
