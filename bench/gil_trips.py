"""What the writer's trips through the GIL cost while the Trio thread is busy.

Every SQLite statement (and every row handed back) gives the GIL up and must take it
back. While the Trio thread is busy, a thread waiting for the GIL gets it only when
the interpreter forces a switch, after ``sys.getswitchinterval()``. This measures, on
the real ``SQLiteStore`` in a temporary directory, an accept (``accept_event``: one hook
event journaled and committed) and a store of 64 observations (``store_observations``),
with the process otherwise idle and with a thread that never waits (pure Python, as the
Trio thread under load), at CPython's default switch interval and at the worker's. The
busy thread's own progress is measured too: what the shorter interval costs it.

Under load the writer's transactions carry many writes: ``accept_burst`` times
``BURST_ACCEPTS`` accepts made at once (of ``BURST_SESSIONS`` sessions), ``store_burst``
``BURST_STORES`` stores of ``BURST_ROWS`` observations made at once (one a session, as
session actors make them): each burst to its last commit.

    .venv/bin/python bench/gil_trips.py [--smoke] [--out FILE.json]

``--smoke`` takes a few of each (:data:`SMOKE`): every figure, not a steady one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import trio

from sessionmem.events import ObservationEvent
from sessionmem.records import CompressedObservation
from sessionmem.storage.sqlite.store import SQLiteStore, open_sqlite_store
from sessionmem.worker import GIL_SWITCH_INTERVAL_S

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sampler import BackgroundThread  # noqa: E402

CPYTHON_DEFAULT_S = 0.005
ACCEPTS = 60
STORES = 12
ROWS = 64
BURSTS = 12
BURST_ACCEPTS = 20
BURST_SESSIONS = 8
BURST_STORES = 8
BURST_ROWS = 8


@dataclass(frozen=True)
class Rounds:
    """How many of each are timed, per phase: single accepts, stores of :data:`ROWS`, bursts of each kind."""

    accepts: int = ACCEPTS
    stores: int = STORES
    bursts: int = BURSTS


SMOKE = Rounds(accepts=10, stores=3, bursts=3)


class BusyThread(BackgroundThread):
    """A thread that holds the GIL whenever it is let: the Trio thread under load."""

    def __init__(self) -> None:
        super().__init__(interval=0.0)
        self.loops = 0

    def _run(self) -> None:
        total = 0
        while not self._stop.is_set():
            for i in range(1000):
                total += i
            self.loops += 1


class Events:
    def __init__(self) -> None:
        self.count = 0

    def next(self, session: str = "gil") -> ObservationEvent:
        self.count += 1
        n = self.count
        return ObservationEvent(claude_session_id=session, project="bench-gil", tool_name="Read", tool_use_id=f"t{n}",
                                tool_input={"file_path": f"/repo/src/f{n}.py"}, tool_response="x" * 200, key=f"k{n}")


async def _accepts(store: SQLiteStore, events: Events, count: int) -> list[float]:
    took = []
    for _ in range(count):
        event = events.next()
        started = time.perf_counter()
        await store.accept_event(event, lambda _: None)
        took.append((time.perf_counter() - started) * 1000)
        await trio.sleep(0.002)
    return took


async def _items(store: SQLiteStore, events: Events, count: int, session: str = "gil") -> list[Any]:
    """``count`` accepted events of ``session`` with their observations, ready to store."""
    items = []
    for _ in range(count):
        accepted = await store.accept_event(events.next(session), lambda _: None)
        n = accepted.envelope.event_id
        items.append((accepted.envelope, accepted.envelope.event, CompressedObservation(
            "discovery", f"Read f{n}.py", "src", ("a fact",), "what the read showed", ("gil",),
            (f"/repo/src/f{n}.py",), (), input_tokens=3)))
    return items


async def _batches(store: SQLiteStore, events: Events, count: int) -> list[list[Any]]:
    """``count`` batches of ``ROWS`` accepted events with their observations, ready to store."""
    return [await _items(store, events, ROWS) for _ in range(count)]


async def _at_once(jobs: list[Any]) -> float:
    """Milliseconds from starting every job of ``jobs`` at once to the last one's end."""
    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for job in jobs:
            nursery.start_soon(job)
    return (time.perf_counter() - started) * 1000


async def _accept_bursts(store: SQLiteStore, events: Events, count: int) -> list[float]:
    took = []
    for _ in range(count):
        took.append(await _at_once([partial(store.accept_event, events.next(f"gil-{n % BURST_SESSIONS}"), lambda _: None)
                                    for n in range(BURST_ACCEPTS)]))
        await trio.sleep(0.002)
    return took


async def _burst_stores(store: SQLiteStore, events: Events, count: int) -> list[list[Any]]:
    """``count`` bursts, each ``BURST_STORES`` sessions' stores of ``BURST_ROWS`` observations, ready to make."""
    sessions = []
    for n in range(BURST_STORES):
        await store.accept_event(events.next(f"gil-{n}"), lambda _: None)
        session = await store.session_info(f"gil-{n}")
        assert session is not None
        sessions.append(session)
    return [[partial(store.store_observations, session,
                     await _items(store, events, BURST_ROWS, session.claude_session_id)) for session in sessions]
            for _ in range(count)]


async def _store_bursts(bursts: list[list[Any]]) -> list[float]:
    """Each burst's stores made at once."""
    return [await _at_once(burst) for burst in bursts]


async def _stores(store: SQLiteStore, batches: list[list[Any]]) -> list[float]:
    session = await store.session_info("gil")
    assert session is not None
    took = []
    for items in batches:
        started = time.perf_counter()
        await store.store_observations(session, items)
        took.append((time.perf_counter() - started) * 1000)
    return took


def _figures(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50_ms": round(statistics.median(ordered), 2), "p90_ms": round(ordered[int(len(ordered) * 0.9)], 2)}


async def measure(interval_s: float, rounds: Rounds = Rounds()) -> dict[str, Any]:
    sys.setswitchinterval(interval_s)
    result: dict[str, Any] = {"switch_interval_ms": interval_s * 1000}
    with tempfile.TemporaryDirectory() as directory:
        async with open_sqlite_store(Path(directory) / "gil.db") as store:
            events = Events()
            idle_batches = await _batches(store, events, rounds.stores)
            busy_batches = await _batches(store, events, rounds.stores)
            idle_bursts = await _burst_stores(store, events, rounds.bursts)
            busy_bursts = await _burst_stores(store, events, rounds.bursts)
            result["idle"] = {"accept": _figures(await _accepts(store, events, rounds.accepts)),
                              "store_64": _figures(await _stores(store, idle_batches)),
                              "accept_burst": _figures(await _accept_bursts(store, events, rounds.bursts)),
                              "store_burst": _figures(await _store_bursts(idle_bursts))}
            with BusyThread() as busy:
                started = time.perf_counter()
                accepts = await _accepts(store, events, rounds.accepts)
                stores = await _stores(store, busy_batches)
                accept_bursts = await _accept_bursts(store, events, rounds.bursts)
                store_bursts = await _store_bursts(busy_bursts)
                loops_per_s = busy.loops / (time.perf_counter() - started)
            result["busy"] = {"accept": _figures(accepts), "store_64": _figures(stores),
                              "accept_burst": _figures(accept_bursts), "store_burst": _figures(store_bursts),
                              "busy_thread_loops_per_s": round(loops_per_s)}
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--smoke", action="store_true", help="a few of each: every figure, in seconds (CI)")
    args = parser.parse_args(argv)
    rounds = SMOKE if args.smoke else Rounds()
    results = [trio.run(measure, interval, rounds) for interval in (CPYTHON_DEFAULT_S, GIL_SWITCH_INTERVAL_S)]
    for result in results:
        idle, busy = result["idle"], result["busy"]
        print(f"switch interval {result['switch_interval_ms']:.1f} ms: "
              f"accept {idle['accept']['p50_ms']} ms idle, {busy['accept']['p50_ms']} ms busy; "
              f"store of {ROWS} {idle['store_64']['p50_ms']} ms idle, {busy['store_64']['p50_ms']} ms busy; "
              f"{BURST_ACCEPTS} accepts at once {idle['accept_burst']['p50_ms']} / {busy['accept_burst']['p50_ms']} ms; "
              f"{BURST_STORES} stores of {BURST_ROWS} at once {idle['store_burst']['p50_ms']} / "
              f"{busy['store_burst']['p50_ms']} ms (idle / busy, medians); "
              f"busy thread {busy['busy_thread_loops_per_s']:,} loops/s")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
