"""What the security work at the ingest edge costs, per event of the recorded corpus, in one run.

    python bench/edge_cost.py [--corpus DIR] [--limit N]

For every tool use, prompt and message of the corpus, as hooks send them:

- ``guard``: the access checks of a request (Host, Origin, token, content type);
- ``clean``: privacy, size caps and secret redaction of its fields, against the same
  without redaction (``clean_no_redaction``) -- their difference is the redaction;
- ``accept``: the whole accept of the event by the in-process worker (the ASGI app:
  guard, decode, clean, journal commit), to put the others in proportion;
- ``redaction_total``: the redactor alone over every field of every event, all at once,
  best of five, with a digest of what it gave back: two trees that redact alike print the
  same digest, whatever their speed.

Prints medians, p95 and means in microseconds, and each part as a share of ``accept``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec
import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sessionmem.protocol import routes  # noqa: E402
from sessionmem.protocol.requests import encoded_call  # noqa: E402
from sessionmem.redaction import Redactor  # noqa: E402
from sessionmem.replay.convert import ConversionStats, convert, transcript_files  # noqa: E402
from sessionmem.server.guard import AccessGuard  # noqa: E402
from sessionmem.server.ingest import EdgeCleaner  # noqa: E402
from sessionmem.testing.asgi import asgi_request  # noqa: E402
from sessionmem.testing.harness import open_worker  # noqa: E402

DEFAULT_CORPUS = REPO.parent / "shared" / "corpus" / "transcripts"
FIELDS = ("tool_input", "tool_response", "error", "prompt", "last_user_message", "last_assistant_message")


def summary(values_us: list[float]) -> dict[str, float]:
    ordered = sorted(values_us)
    return {"n": len(ordered), "median_us": round(statistics.median(ordered), 2),
            "p95_us": round(ordered[int(0.95 * (len(ordered) - 1))], 2), "mean_us": round(statistics.fmean(ordered), 2)}


def requests_of(corpus: Path, limit: int | None) -> list[tuple[str, bytes]]:
    sessions = convert(transcript_files(corpus), ConversionStats())[:limit]
    out = []
    for session in sessions:
        for event in session.events:
            call = encoded_call(event.payload, project="bench", key=f"edge:{event.key}")
            if call is not None and call[2] is not None:
                out.append((call[1], call[2]))
    return out


def redaction_total(redactor: Redactor, bodies: list[dict[str, Any]], runs: int = 5) -> dict[str, Any]:
    """Every field of ``bodies`` through ``redactor`` (texts and structured values): the best of
    ``runs`` totals, and a digest of the redacted fields."""
    encode = msgspec.json.Encoder().encode
    fields = [value for body in bodies for field in FIELDS if (value := body.get(field)) is not None]
    encoded = [None if isinstance(value, str) else encode(value) for value in fields]
    best, redacted = math.inf, []
    for _ in range(runs):
        started = time.perf_counter()
        redacted = [redactor.text(value) if raw is None else redactor.value(value, raw)
                    for value, raw in zip(fields, encoded)]
        best = min(best, time.perf_counter() - started)
    return {"fields": len(fields), "best_ms": round(best * 1000, 1), "per_field_us": round(best / len(fields) * 1e6, 2),
            "digest": hashlib.sha256(encode(redacted)).hexdigest()[:16]}


def clean_all(cleaner: EdgeCleaner, bodies: list[dict[str, Any]]) -> list[float]:
    times = []
    for body in bodies:
        started = time.perf_counter()
        for field in FIELDS:
            value = body.get(field)
            if isinstance(value, str):
                cleaner.text(value)
            elif value is not None:
                cleaner.value(value)
        times.append((time.perf_counter() - started) * 1e6)
    return times


async def accept_all(requests: list[tuple[str, bytes]]) -> list[float]:
    times = []
    with tempfile.TemporaryDirectory() as data_dir:
        async with open_worker(Path(data_dir), mailbox_size=100_000) as worker:
            headers = worker.client_headers(**{"content-type": "application/json"})
            for path, body in requests:
                started = time.perf_counter()
                reply = await asgi_request(worker.app, "POST", path, body, headers=headers)
                times.append((time.perf_counter() - started) * 1e6)
                assert reply.status < 300, (reply.status, reply.body[:200])
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--limit", type=int, help="first N sessions")
    args = parser.parse_args()
    requests = requests_of(args.corpus, args.limit)
    bodies = [json.loads(body) for _, body in requests]

    guard = AccessGuard(token="t" * 64, port=37777)
    scope = {"type": "http", "method": "POST", "path": routes.OBSERVATIONS, "headers": [
        (b"host", b"127.0.0.1:37777"), (b"content-type", b"application/json"), (b"content-length", b"2048"),
        (b"authorization", b"Bearer " + b"t" * 64), (b"connection", b"close"), (b"accept", b"*/*")]}
    guard_times = []
    for _ in range(len(requests)):
        started = time.perf_counter()
        assert guard._refusal(scope) is None
        guard_times.append((time.perf_counter() - started) * 1e6)

    redactor = Redactor()
    redactor.load()
    with_redaction = clean_all(EdgeCleaner(65536, redactor), bodies)
    without = clean_all(EdgeCleaner(65536, Redactor(enabled=False)), bodies)
    accept = trio.run(accept_all, requests)

    results = {"events": len(requests), "guard": summary(guard_times), "clean": summary(with_redaction),
               "clean_no_redaction": summary(without), "accept": summary(accept),
               "redactions": redactor.redactions, "redaction_total": redaction_total(redactor, bodies)}
    accept_mean = results["accept"]["mean_us"]
    results["share_of_accept"] = {
        "guard": round(results["guard"]["mean_us"] / accept_mean, 4),
        "redaction": round((results["clean"]["mean_us"] - results["clean_no_redaction"]["mean_us"]) / accept_mean, 4),
    }
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
