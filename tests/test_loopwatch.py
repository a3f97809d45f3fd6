"""The loop watch: how late the Trio thread wakes, on a real Trio run and a real clock."""

from __future__ import annotations

import logging
import time

import pytest
import trio

from sessionmem.runtime.loopwatch import LoopWatch


async def test_a_held_trio_thread_shows_as_a_stall(caplog: pytest.LogCaptureFixture) -> None:
    watch = LoopWatch(interval_s=0.02, log_stall_s=0.25)
    async with trio.open_nursery() as nursery:
        await nursery.start(watch.run)
        while watch.statistics().samples < 3:
            await trio.sleep(0.02)
        before = watch.statistics()
        with caplog.at_level(logging.WARNING, logger="sessionmem.runtime.loopwatch"):
            time.sleep(0.4)  # what a long synchronous step on the Trio thread does
            await trio.sleep(0.1)
        after = watch.statistics()
        nursery.cancel_scope.cancel()
    assert before.samples >= 3 and before.lag_max_at is not None
    assert after.samples > before.samples
    assert after.stalls >= before.stalls + 1
    # The watch was asleep with a deadline at most 20 ms into the hold: it woke at least 380 ms late.
    assert 380 <= after.lag_max_ms < 5_000
    assert after.lag_max_ms >= after.lag_p99_ms >= after.lag_p50_ms >= 0
    assert after.lag_max_at is not None and after.lag_max_at >= time.time() - 5
    assert any("could not run for" in record.getMessage() for record in caplog.records)


async def test_the_percentiles_cover_only_the_recent_window() -> None:
    watch = LoopWatch(interval_s=0.01, window_s=0.1)  # the last ten wake-ups
    async with trio.open_nursery() as nursery:
        await nursery.start(watch.run)
        await trio.sleep(0.05)
        time.sleep(0.3)
        await trio.sleep(0.02)
        held = watch.statistics()
        # Wait until the late wake-up has left the window (every wake-up since on time, or nearly).
        while watch.statistics().samples < held.samples + 15:
            await trio.sleep(0.01)
        later = watch.statistics()
        nursery.cancel_scope.cancel()
    assert held.lag_p99_ms >= 250  # the late one is among the last ten
    assert later.lag_max_ms == held.lag_max_ms  # kept since the start...
    assert later.lag_p99_ms < later.lag_max_ms  # ...but no longer among the recent ones


def test_statistics_before_the_first_wake_up() -> None:
    statistics = LoopWatch().statistics()
    assert (statistics.samples, statistics.stalls, statistics.lag_p50_ms, statistics.lag_max_at) == (0, 0, 0.0, None)
    assert statistics.interval_ms == 100
