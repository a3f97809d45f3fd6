"""Supervision: restart intensity, parking and replay, idle stops, back-pressure, drain at shut-down.

The supervisor and router alone, with fake actors and Trio's MockClock (exact virtual
times, no wall time), and the whole worker in-process with injected actor crashes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from sessionmem.actors.child import MailboxFull, SessionChild
from sessionmem.actors.restart import RestartIntensity, RestartPolicy
from sessionmem.actors.router import SessionRouter
from sessionmem.actors.state import TRANSITIONS, ActorState, IllegalTransition
from sessionmem.actors.supervisor import ActorSupervisor
from sessionmem.compress.offline import OfflineCompressor
from sessionmem.events import Envelope, ObservationEvent
from sessionmem.testing.faults import FullDisk
from sessionmem.testing.harness import InProcessWorker, open_worker

OBS = "/api/sessions/observations"
CRASH_TOOL = "SessionmemCrash"


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


def envelope(event_id: int, session: str = "s") -> Envelope:
    return Envelope(event_id, ObservationEvent(claude_session_id=session, project="p", tool_name="Read"))


# -- the state table -------------------------------------------------------------------------


def test_every_state_has_its_transitions_and_nonsense_is_refused() -> None:
    assert set(TRANSITIONS) == set(ActorState)
    child = SessionChild("s", 4, RestartPolicy(1, 10))
    assert child.state is ActorState.STOPPED
    with pytest.raises(IllegalTransition, match="stopped -> running"):
        child.transition(ActorState.RUNNING)
    for state in (ActorState.STARTING, ActorState.RUNNING, ActorState.COMPRESSING, ActorState.STORING,
                  ActorState.IDLE, ActorState.FAILED, ActorState.STOPPED):
        child.transition(state)
    assert not ActorState.FAILED.alive and ActorState.BATCHING.alive and ActorState.STORING.working


def test_restart_intensity_counts_crashes_within_the_period() -> None:
    intensity = RestartIntensity(RestartPolicy(max_restarts=2, period_s=10))
    assert [intensity.crashed(t) for t in (0, 1, 2)] == [True, True, False]
    intensity.reset()
    assert [intensity.crashed(t) for t in (100, 105, 116, 127)] == [True, True, True, True]  # spread out: fine
    assert intensity.restarts == 6


# -- the supervisor and router with fake actors, on virtual time ------------------------------


class FakeActors:
    """Actors that crash ``crash_times`` times, then take their backlog and mailbox and stop when idle."""

    def __init__(self, *, crash_times: int = 0, idle_s: float = 5.0, work_s: float = 0.0) -> None:
        self.crash_times = crash_times
        self.idle_s = idle_s
        self.work_s = work_s
        self.runs = 0
        self.handled: list[int] = []
        self.parked: list[str] = []

    async def run(self, child: SessionChild) -> None:
        self.runs += 1
        child.transition(ActorState.RUNNING)
        if self.crash_times:
            self.crash_times -= 1
            raise RuntimeError(f"boom {self.runs}")
        while child.backlog:
            await self._handle(child, child.backlog.popleft())
        while True:
            child.transition(ActorState.IDLE)
            item = None
            with trio.move_on_after(self.idle_s):
                try:
                    item = await child.receive.receive()
                except trio.EndOfChannel:
                    return
            if item is None:
                return  # idle
            child.transition(ActorState.RUNNING)
            await self._handle(child, item)

    async def _handle(self, child: SessionChild, item: Envelope) -> None:
        child.inflight.append(item)
        await trio.sleep(self.work_s)
        self.handled.append(item.event_id)
        child.finished(item)

    async def give_up(self, child: SessionChild) -> int:
        self.parked.append(child.claude_session_id)
        return 7


async def start(nursery: trio.Nursery, actors: FakeActors, policy: RestartPolicy,
                mailbox: int = 4) -> tuple[ActorSupervisor, SessionRouter]:
    supervisor = ActorSupervisor(actors.run, policy, give_up=actors.give_up)
    await nursery.start(supervisor.run)
    return supervisor, SessionRouter(supervisor, mailbox_size=mailbox, restart_policy=policy)


async def test_restarts_up_to_the_intensity_then_gives_up(autojump_clock: trio.testing.MockClock) -> None:
    actors = FakeActors(crash_times=10)
    async with trio.open_nursery() as nursery:
        supervisor, router = await start(nursery, actors, RestartPolicy(max_restarts=3, period_s=60))
        with router.reservation("s"):
            pass
        router.deliver(envelope(1))
        await trio.testing.wait_all_tasks_blocked()
        assert actors.runs == 3 + 1  # max_restarts + 1 executions, as triotp asserts
        stats = supervisor.statistics()
        assert (stats.crashes, stats.restarts, stats.failed_sessions, stats.parked_events) == (4, 3, 1, 7)
        assert actors.parked == ["s"]
        (actor,) = router.actors()
        assert actor.state is ActorState.FAILED and actor.last_error == "RuntimeError: boom 4"
        router.deliver(envelope(2))  # parked by the store: nothing runs
        await trio.testing.wait_all_tasks_blocked()
        assert actors.runs == 4 and router.statistics().parked_on_arrival == 1
        supervisor.shutdown(drain_s=1)


async def test_replay_after_failure_runs_the_parked_events(autojump_clock: trio.testing.MockClock) -> None:
    actors = FakeActors(crash_times=2)
    async with trio.open_nursery() as nursery:
        supervisor, router = await start(nursery, actors, RestartPolicy(max_restarts=1, period_s=60))
        router.deliver(envelope(1))
        await trio.testing.wait_all_tasks_blocked()
        assert router.actors()[0].state is ActorState.FAILED and actors.handled == []
        router.unparked("s", [envelope(1), envelope(2)])  # what `sessionmem replay` does, after the fix
        await trio.testing.wait_all_tasks_blocked()
        assert actors.handled == [1, 2]
        assert router.actors()[0].last_error == "" and router.actors()[0].recent_crashes == 0
        supervisor.shutdown(drain_s=1)


async def test_crashes_spread_beyond_the_period_never_fail(autojump_clock: trio.testing.MockClock) -> None:
    actors = FakeActors()
    async with trio.open_nursery() as nursery:
        supervisor, router = await start(nursery, actors, RestartPolicy(max_restarts=1, period_s=10))
        for n in range(5):
            actors.crash_times = 1  # one crash, then fine
            router.deliver(envelope(n))
            await trio.sleep(11)  # past the period before the next crash
        assert supervisor.statistics().failed_sessions == 0
        assert actors.handled == [0, 1, 2, 3, 4]
        supervisor.shutdown(drain_s=1)


async def test_idle_actor_stops_and_comes_back_on_demand(autojump_clock: trio.testing.MockClock) -> None:
    actors = FakeActors(idle_s=300)
    async with trio.open_nursery() as nursery:
        supervisor, router = await start(nursery, actors, RestartPolicy(5, 30))
        router.deliver(envelope(1))
        await trio.sleep(299)
        assert router.actors()[0].state is ActorState.IDLE
        await trio.sleep(2)
        (actor,) = router.actors()
        assert actor.state is ActorState.STOPPED and supervisor.statistics().idle_stops == 1
        router.deliver(envelope(2))
        await trio.testing.wait_all_tasks_blocked()
        assert actors.handled == [1, 2] and router.actors()[0].starts == 2
        supervisor.shutdown(drain_s=1)


async def test_full_mailbox_refuses_before_anything_is_written(autojump_clock: trio.testing.MockClock) -> None:
    actors = FakeActors(work_s=100)  # a slow actor holds one message; the mailbox takes two more
    async with trio.open_nursery() as nursery:
        supervisor, router = await start(nursery, actors, RestartPolicy(5, 30), mailbox=2)
        for n in range(3):
            with router.reservation("s"):
                router.deliver(envelope(n))
            await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(MailboxFull), router.reservation("s"):
            pass
        assert router.statistics().rejected_full == 1 and router.queued("s") == 3
        await trio.sleep(301)
        assert actors.handled == [0, 1, 2] and router.queued() == 0
        supervisor.shutdown(drain_s=1)


async def test_shutdown_drains_within_its_deadline(autojump_clock: trio.testing.MockClock) -> None:
    actors = FakeActors(work_s=3)
    async with trio.open_nursery() as nursery:
        supervisor, router = await start(nursery, actors, RestartPolicy(5, 30), mailbox=8)
        for n in range(5):
            router.deliver(envelope(n))
        await trio.sleep(1)
        started = trio.current_time()
        supervisor.shutdown(drain_s=7)  # 0 ends at 3, 1 at 6; 2 would end at 9, past the deadline at 8
    assert trio.current_time() - started == pytest.approx(7)
    assert actors.handled == [0, 1]
    (actor,) = router.actors()
    # What was not finished stays in the journal (pending) for the next start.
    assert actor.state is ActorState.STOPPED and actor.inflight == 1 and actor.mailbox_depth == 2


# -- the whole worker in-process, with injected crashes -----------------------------------------


def observation(session: str, tool_use_id: str, *, crash_times: int = 0) -> dict[str, object]:
    return {"claudeSessionId": session, "cwd": "/work/sup", "tool_use_id": tool_use_id,
            "tool_name": CRASH_TOOL if crash_times else "Read",
            "tool_input": {"times": crash_times} if crash_times else {"file_path": f"/work/sup/{tool_use_id}.py"},
            "tool_response": "x = 1\n"}


async def send(worker: InProcessWorker, path: str, body: dict[str, object], status: int) -> None:
    reply = await worker.request("POST", path, body)
    assert reply.status == status, reply.json()


async def session_round(worker: InProcessWorker, session: str, prompt: str) -> None:
    await send(worker, "/api/sessions/init", {"claudeSessionId": session, "cwd": "/work/sup", "prompt": prompt}, 200)


async def finish(worker: InProcessWorker, session: str) -> None:
    await send(worker, "/api/sessions/summarize", {"claudeSessionId": session, "last_assistant_message": "ok"}, 202)
    await send(worker, "/api/sessions/complete", {"claudeSessionId": session}, 202)


async def observed(worker: InProcessWorker, session: str) -> list[str]:
    rows = (await worker.get("/api/observations?limit=500"))["observations"]
    return [r["toolUseId"] for r in sorted(rows, key=lambda r: r["id"]) if r["claudeSessionId"] == session]


@pytest.fixture
async def faulty(tmp_path: Path) -> InProcessWorker:
    async with open_worker(tmp_path / "data", fault_injection=True, max_restarts=5, restart_window_s=60,
                           batch_quiet_s=0.05, batch_size=2) as worker:
        yield worker


async def test_crashed_actor_restarts_and_keeps_order(faulty: InProcessWorker) -> None:
    await session_round(faulty, "crashy", "explore the module")
    await session_round(faulty, "calm", "a healthy session")
    for session, tool_use_id, crashes in (("crashy", "c1", 0), ("calm", "k1", 0), ("crashy", "c2", 2),
                                          ("crashy", "c3", 0), ("calm", "k2", 0), ("crashy", "c4", 0)):
        await send(faulty, OBS, observation(session, tool_use_id, crash_times=crashes), 202)
    await finish(faulty, "crashy")
    await finish(faulty, "calm")
    await faulty.wait_idle()

    # Every message was processed, in arrival order, by the restarted actor.
    assert await observed(faulty, "crashy") == ["c1", "c2", "c3", "c4"]
    assert await observed(faulty, "calm") == ["k1", "k2"]
    sessions = {s["claudeSessionId"]: s for s in (await faulty.get("/api/sessions"))["sessions"]}
    assert sessions["crashy"]["status"] == sessions["calm"]["status"] == "completed"
    debug = await faulty.debug()
    actors = {a["claudeSessionId"]: a for a in debug["actors"]}
    assert actors["crashy"]["restarts"] == 2 and "injected crash 2/2" in actors["crashy"]["lastError"]
    assert actors["crashy"]["processedByKind"] == {"init": 1, "observation": 4, "summarize": 1, "complete": 1}
    assert actors["calm"]["restarts"] == 0 and actors["calm"]["lastError"] == ""
    assert debug["supervisor"]["crashes"] == 2 and debug["supervisor"]["failedSessions"] == 0


async def test_intensity_limit_fails_only_that_session_and_parks_events(faulty: InProcessWorker) -> None:
    await session_round(faulty, "doomed", "this one will fail")
    await session_round(faulty, "healthy", "this one is fine")
    await send(faulty, OBS, observation("doomed", "d1"), 202)
    await send(faulty, OBS, observation("doomed", "d2", crash_times=7), 202)  # 6 crashes exceed 5 restarts
    await send(faulty, OBS, observation("doomed", "d3"), 202)
    with trio.fail_after(20):
        while (await faulty.debug())["supervisor"]["failedSessions"] == 0:
            await trio.sleep(0.01)
    await send(faulty, OBS, observation("doomed", "d4"), 202)  # arrives after the failure: parked too
    await send(faulty, OBS, observation("healthy", "h1"), 202)
    await finish(faulty, "healthy")
    await faulty.wait_idle()

    debug = await faulty.debug()
    doomed = {a["claudeSessionId"]: a for a in debug["actors"]}["doomed"]
    assert doomed["state"] == "failed" and doomed["restarts"] == 5
    assert debug["supervisor"]["failedSessions"] == 1 and debug["supervisor"]["crashes"] == 6
    # Everything not yet durably processed is parked: d1 (still in the batch the poison
    # interrupted), d2 (the poison), d3, and d4.
    assert debug["journal"]["parked"] == 4 and debug["journal"]["parkedSessions"] == ["doomed"]
    sessions = {s["claudeSessionId"]: s for s in (await faulty.get("/api/sessions"))["sessions"]}
    assert sessions["doomed"]["status"] == "failed" and "gave up after 6 crashes" in sessions["doomed"]["failure"]
    assert sessions["healthy"]["status"] == "completed"
    assert await observed(faulty, "doomed") == [] and await observed(faulty, "healthy") == ["h1"]
    assert (await faulty.request("GET", "/api/health")).status == 200

    # The operator replays the parked events (`sessionmem replay doomed` posts this); the 7th crash restarts.
    replayed = await faulty.post("/api/sessions/doomed/replay", {})
    assert replayed == {"claudeSessionId": "doomed", "replayed": 4}
    await faulty.wait_idle()
    assert await observed(faulty, "doomed") == ["d1", "d2", "d3", "d4"]
    debug = await faulty.debug()
    assert debug["journal"]["parked"] == 0 and debug["journal"]["parkedSessions"] == []
    assert {a["claudeSessionId"]: a for a in debug["actors"]}["doomed"]["state"] != "failed"


async def test_idle_actors_stop_and_come_back(tmp_path: Path) -> None:
    async with open_worker(tmp_path / "data", idle_timeout_s=0.2, batch_quiet_s=0.02) as worker:

        async def stopped(*, started: int) -> dict[str, Any]:
            """The actor once it has stopped after its ``started``-th start (or later)."""
            with trio.fail_after(10):
                while True:
                    actors = (await worker.debug())["actors"]
                    if actors and actors[0]["state"] == "stopped" and actors[0]["starts"] >= started:
                        return actors[0]
                    await trio.sleep(0.02)

        await send(worker, OBS, observation("idle", "t1"), 202)
        first = await stopped(started=1)
        assert first["starts"] == 1
        await send(worker, OBS, observation("idle", "t2"), 202)
        again = await stopped(started=2)
        assert again["starts"] == 2 and again["processed"] == 2
        assert (await worker.debug())["supervisor"]["idleStops"] == 2
        assert set(await observed(worker, "idle")) == {"t1", "t2"}


class StalledCompressor:
    """The offline compressor behind a gate the test opens: a model that stalls, then answers."""

    def __init__(self) -> None:
        self._inner = OfflineCompressor()
        self.name = "stalled"
        self.gate = trio.Event()
        self.waiting = 0

    async def compress(self, context, events):
        self.waiting += 1
        await self.gate.wait()
        return await self._inner.compress(context, events)

    async def summarize(self, context, request, inputs):
        await self.gate.wait()
        return await self._inner.summarize(context, request, inputs)

    def statistics(self):
        return self._inner.statistics()

    def seed_usage(self, tokens_today: int) -> None:
        return None

    async def warm_up(self) -> None:
        return None

    async def aclose(self) -> None:
        return None


async def test_full_mailbox_is_503_with_retry_after_and_nothing_half_written(tmp_path: Path) -> None:
    stalled: list[StalledCompressor] = []

    def build(settings: object) -> StalledCompressor:
        stalled.append(StalledCompressor())
        return stalled[0]

    async with open_worker(tmp_path / "data", compressor=build, mailbox_size=2, batch_size=1) as worker:
        statuses = []
        for n in range(6):
            reply = await worker.request("POST", OBS, observation("busy", f"t{n}"))
            statuses.append(reply.status)
            if reply.status == 503:
                assert reply.headers["retry-after"] == "1" and "busy" in reply.json()["error"]
            with trio.fail_after(10):  # the first is taken to the stalled model however slow the machine
                while n == 0 and stalled[0].waiting == 0:
                    await trio.sleep(0.01)
        # One tool use is with the stalled model, two wait in the mailbox: the rest are refused.
        assert statuses == [202, 202, 202, 503, 503, 503]
        stalled[0].gate.set()
        await worker.wait_idle()
        assert await observed(worker, "busy") == ["t0", "t1", "t2"]
        debug = await worker.debug()
        assert debug["sessions"]["rejectedFull"] == 3 and debug["journal"]["pending"] == 0


def test_fault_injection_is_off_by_default(tmp_path: Path) -> None:
    from sessionmem.settings import load_settings

    assert load_settings({}, data_dir=str(tmp_path)).fault_injection is False


async def test_a_full_disk_is_waited_out_without_losing_or_failing_anything(tmp_path: Path) -> None:
    """The disk fills up (every SQLite write fails with SQLITE_FULL), then has room again."""
    stalled: list[StalledCompressor] = []

    def build(settings: object) -> StalledCompressor:
        stalled.append(StalledCompressor())
        return stalled[0]

    with FullDisk() as disk:
        async with open_worker(tmp_path / "data", compressor=build, batch_quiet_s=0.01, batch_size=1) as worker:
            await send(worker, OBS, observation("disk", "before"), 202)  # accepted, held by the stalled compressor
            disk.fill()
            full = await worker.request("POST", OBS, observation("disk", "during"))
            assert full.status == 503 and full.headers["retry-after"] == "5" and "disk full" in full.json()["error"]
            stalled[0].gate.set()  # the actor now tries to store "before", and cannot
            with trio.fail_after(10):
                while (await worker.debug())["supervisor"]["transientFailures"] < 2:
                    await trio.sleep(0.05)
            actor = {a["claudeSessionId"]: a for a in (await worker.debug())["actors"]}["disk"]
            assert actor["state"] in ("waiting", "starting", "running", "storing") and "full" in actor["lastError"]

            disk.free()
            await send(worker, OBS, observation("disk", "after"), 202)
            await worker.wait_idle(timeout=60)
            assert await observed(worker, "disk") == ["before", "after"]
            debug = await worker.debug()
            assert debug["supervisor"]["crashes"] == 0 and debug["supervisor"]["failedSessions"] == 0
            assert debug["journal"]["parked"] == 0 and debug["journal"]["pending"] == 0
            assert disk.refused_writes > 0
