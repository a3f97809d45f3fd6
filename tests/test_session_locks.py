"""One lock per session: two holders of one session take turns, other sessions do not wait, and a lock is
gone once nobody holds it or waits for it (cancelled waiters included)."""

from __future__ import annotations

import trio
import trio.testing

from sessionmem.server.session_locks import SessionLocks


async def test_one_sessions_holders_take_turns_and_its_lock_is_gone_after() -> None:
    locks = SessionLocks()
    order: list[str] = []

    async def hold(session: str, name: str, seconds: float) -> None:
        async with locks.hold(session):
            order.append(f"{name} in")
            await trio.sleep(seconds)
            order.append(f"{name} out")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(hold, "s", "first", 0.05)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(hold, "s", "second", 0)
        nursery.start_soon(hold, "other", "other", 0)
        await trio.testing.wait_all_tasks_blocked()
        assert locks.held() == 1 and "other out" in order  # "s" held and waited for; "other" done already
    assert order.index("first out") < order.index("second in")  # one session: one after the other
    assert order.index("other out") < order.index("first out")  # another session: not held up
    assert locks.held() == 0


async def test_a_cancelled_waiter_leaves_the_lock_to_its_holder_and_nothing_behind() -> None:
    locks = SessionLocks()
    release = trio.Event()

    async def holder() -> None:
        async with locks.hold("s"):
            await release.wait()

    async def waiter(cancel_scope: trio.CancelScope) -> None:
        with cancel_scope:
            async with locks.hold("s"):
                raise AssertionError("a cancelled waiter never holds the lock")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(holder)
        await trio.testing.wait_all_tasks_blocked()
        scope = trio.CancelScope()
        nursery.start_soon(waiter, scope)
        await trio.testing.wait_all_tasks_blocked()
        scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert locks.held() == 1  # still held by the holder
        release.set()
    assert locks.held() == 0
