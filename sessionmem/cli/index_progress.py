"""How far the vector index is: the line ``sessionmem status`` prints, and the progress ``sessionmem backfill`` shows.

Both read ``/debug``'s ``index`` (``vectors``, ``pending``, ``state``, ``catchUpPerSecond``)
and ``journal`` (events accepted, not yet stored). Standard library only; the progress
bar is tqdm's, imported by the caller that shows one.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from sessionmem.cli.client import CommandFailed, call
from sessionmem.protocol import routes
from sessionmem.protocol.client_settings import ClientConfig
from sessionmem.protocol.delivery import Patience

POLL_S = 0.5
# Caught up only when two polls in a row say so: a commit wakes the index a moment after it lands.
CONFIRMATIONS = 2
WATCH = Patience(10.0, 10.0, retry_failures=False)
# Catch-up attempts failed while watching (the index retries after 1, 2, 4... s) before watching
# stops and says why: an embedder that cannot load would otherwise keep backfill waiting forever.
FAILURES_BEFORE_GIVING_UP = 3


def index_line(index: dict[str, Any], *, unavailable: str = "") -> str:
    """``vector index: 2,140 of 3,595 documents (60 %), ~40 s to go``, or the index's state when it has no backlog.

    ``unavailable``: why the worker's embedder is off although a model was asked for (``/debug``'s
    ``embedder.embedder.unavailable``)."""
    state, vectors, pending = index["state"], index["vectors"], index["pending"]
    if state == "off":
        return f"vector index: off ({unavailable})" if unavailable else \
            "vector index: off (the none embedder: search by words only)"
    if state == "loading":
        return "vector index: loading"
    if state == "failed":
        return (f"vector index: failed, {vectors:,} of {vectors + pending:,} documents "
                f"(last error: {index['lastError']})")
    if not pending:
        return f"vector index: ready, {vectors:,} documents"
    total = vectors + pending
    line = f"vector index: {vectors:,} of {total:,} documents ({100 * vectors // total} %)"
    return line + (f", {to_go(pending, index['catchUpPerSecond'])}" if index["catchUpPerSecond"] else
                   ", waiting for hooks to pause" if index.get("yields") else "")


def to_go(pending: int, per_second: float) -> str:
    seconds = pending / per_second
    return f"~{seconds:.0f} s to go" if seconds < 90 else f"~{seconds / 60:.0f} min to go"


def caught_up(debug: dict[str, Any]) -> bool:
    """Every accepted event is stored and every stored document has its vector (or vectors are off)."""
    index = debug["index"]
    return debug["journal"]["pending"] == 0 and not debug["sessions"]["queued"] and (
        index["state"] == "off" or (index["state"] == "ready" and index["pending"] == 0))


def follow_catch_up(config: ClientConfig, bar_factory: Any, *, out: Any = sys.stderr, poll_s: float = POLL_S) -> bool:
    """Show the index catching up (``bar_factory(total)``: a tqdm bar, made only if it has not) until it has;
    Ctrl-C stops watching only.

    Returns False when the worker stopped answering, or when the index failed
    :data:`FAILURES_BEFORE_GIVING_UP` catch-up attempts while watched (what failed is
    printed; the worker keeps retrying, and search by words has everything). The worker
    catches up on its own whether or not anyone watches: Ctrl-C says so and returns True.
    """
    bar = None
    confirmed = 0
    failures_before: int | None = None
    try:
        while True:
            debug = call(config, "GET", routes.DEBUG, patience=WATCH)
            index = debug["index"]
            if index["state"] == "off":  # vectors off: stored is searchable
                return True
            failures_before = index["failures"] if failures_before is None else failures_before
            if index["state"] == "failed" and index["failures"] - failures_before >= FAILURES_BEFORE_GIVING_UP:
                if bar is not None:
                    bar.close()
                    bar = None
                print(f"sessionmem: stopped watching: {index_line(index)}; the worker keeps trying, search by "
                      "words has everything stored (`sessionmem status`, and worker.log in the data dir)", file=out)
                return False
            done = caught_up(debug)
            confirmed = confirmed + 1 if done else 0
            if confirmed >= CONFIRMATIONS:
                return True
            if bar is None and not done:
                print("sessionmem: the worker stores what it accepted and embeds it for search by meaning "
                      "(Ctrl-C stops watching, not the worker)", file=out)
                bar = bar_factory(index["vectors"] + index["pending"])
            if bar is not None:
                bar.total = max(index["vectors"] + index["pending"], 1)
                bar.n = index["vectors"]
                storing, rate = debug["journal"]["pending"], index["catchUpPerSecond"]
                bar.set_postfix_str((f"{storing:,} events to store, " if storing else "")
                                    + (f"{rate:g} documents/s" if rate else index["state"]), refresh=False)
                bar.refresh()
            time.sleep(poll_s)
    except KeyboardInterrupt:
        if bar is not None:
            bar.close()
            bar = None
        print("sessionmem: stopped watching; the worker goes on embedding on its own "
              "(`sessionmem status` shows how far it is)", file=out)
        return True
    except (CommandFailed, KeyError, TypeError) as exc:  # the worker went away: the events it accepted are journaled
        print(f"sessionmem: cannot follow the index: {exc}", file=out)
        return False
    finally:
        if bar is not None:
            bar.close()
