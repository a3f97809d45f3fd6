"""The framework ceilings: bare endpoints on Hypercorn, configured like the worker.

Each accepts the same ``POST /api/sessions/observations`` body, decodes it with the
same msgspec type, and answers 202 -- no journal, no actors. ``quart`` is a bare
Quart-Trio route; ``asgi`` is a bare ASGI callable (what the worker's ingest fast path
costs at the least). Run as its own process (``python bench/bare_app.py STATE_FILE
[quart|asgi]``); it writes ``{"pid", "port"}`` to STATE_FILE once bound and stops on
SIGTERM.
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


async def bare_asgi(scope: dict, receive: object, send: object) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            kind = message["type"].replace("lifespan.", "")
            await send({"type": f"lifespan.{kind}.complete"})
            if kind == "shutdown":
                return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    decode(body, ObservationRequest)
    payload = _encoder.encode({"status": "accepted"})
    await send({"type": "http.response.start", "status": 202,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload})


async def main(state_file: str, kind: str = "quart") -> None:
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    stop = trio.Event()
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            app = create_bare_app() if kind == "quart" else bare_asgi
            binds = await nursery.start(partial(serve, app, config, shutdown_trigger=stop.wait))
            with open(state_file, "w") as f:
                json.dump({"pid": os.getpid(), "port": int(binds[0].rsplit(":", 1)[1])}, f)
            async for _ in signals:
                break
            stop.set()


if __name__ == "__main__":
    trio.run(main, *sys.argv[1:3])
