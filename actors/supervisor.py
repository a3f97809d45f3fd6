"""A dynamic one-for-one supervisor of session actors (Erlang's simple_one_for_one).

Each child is transient: started when it has work (:meth:`ActorSupervisor.start`),
restarted after a crash with its mailbox and unfinished messages intact, stopped when
its actor returns idle. More crashes than the :class:`~.restart.RestartPolicy`
allows within its period gives that child up: ``give_up`` parks its events and the
supervisor goes on with the others. An exception of a ``transient`` type (the
database cannot write: a full disk) is not the actor's fault and is not counted: the
child waits, longer each time up to :data:`TRANSIENT_BACKOFF_CAP_S`, and starts again
with its messages, until the environment recovers. Which child gets which event is not the
supervisor's business (:mod:`.router`).

Resource handling:
    :meth:`run` owns the nursery every actor runs in. :meth:`shutdown` closes the
    mailboxes of running children; actors finish what they hold, and whatever still
    runs at the drain deadline is cancelled -- its events are still pending in the
    journal and are replayed at the next start.

Error handling:
    ``Exception`` from an actor counts as a crash; ``Cancelled`` and other
    ``BaseException`` propagate untouched. A ``give_up`` that fails is logged; the
    child's events then stay pending in the journal.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable

import msgspec
import trio

from sessionmem.actors.child import SessionChild
from sessionmem.actors.restart import RestartPolicy
from sessionmem.actors.state import ActorState
from sessionmem.runtime.logs import log_exception

log = logging.getLogger(__name__)


TRANSIENT_BACKOFF_FIRST_S = 0.5
TRANSIENT_BACKOFF_CAP_S = 30.0


class AfterCrash(enum.Enum):
    """What the supervisor does with a child that crashed (:meth:`ActorSupervisor._crashed`)."""

    RESTART = "restart"  # within the restart policy
    GIVE_UP = "give up"  # past the policy: the child is parked as failed
    STOP = "stop"  # shutting down: its events stay pending and are replayed at the next start


class SupervisorStatistics(msgspec.Struct, frozen=True):
    max_restarts: int
    restart_period_seconds: float
    running: int  # children with an actor task right now
    starts: int
    restarts: int
    crashes: int
    failed_sessions: int
    parked_events: int
    idle_stops: int
    transient_failures: int  # the environment failed (disk full): waited and restarted, not counted as crashes


class ActorSupervisor:
    def __init__(self, run_actor: Callable[[SessionChild], Awaitable[None]], policy: RestartPolicy, *,
                 give_up: Callable[[SessionChild], Awaitable[int]],
                 transient: tuple[type[Exception], ...] = (),
                 clock: Callable[[], float] = trio.current_time) -> None:
        self._transient = transient
        self._transient_failures = 0
        self._run_actor = run_actor
        self._policy = policy
        self._give_up = give_up
        self._clock = clock
        self._running: set[SessionChild] = set()
        self._nursery: trio.Nursery | None = None
        self._closing = False
        self._drain_s = 0.0
        self._shutdown_requested = trio.Event()
        self._starts = self._restarts = self._crashes = self._failed = self._parked = self._idle_stops = 0

    # -- lifecycle -------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Supervise children until :meth:`shutdown`, then drain them within its deadline."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await self._shutdown_requested.wait()
            self._closing = True
            for child in self._running:
                child.close_mailbox()
            # Actors drain what they hold; past the deadline the rest stays in the journal.
            nursery.cancel_scope.deadline = trio.current_time() + self._drain_s

    def shutdown(self, drain_s: float) -> None:
        """Stop: running actors get ``drain_s`` seconds to finish what they hold."""
        self._drain_s = drain_s
        self._shutdown_requested.set()

    @property
    def closing(self) -> bool:
        return self._closing

    def start(self, child: SessionChild) -> None:
        """Run ``child``'s actor unless it runs already, has failed, or the supervisor is closing."""
        if child.state.alive or child.state is ActorState.FAILED or self._closing:
            return
        if self._nursery is None:
            raise RuntimeError("the supervisor is not running")
        child.transition(ActorState.STARTING)
        self._running.add(child)
        self._nursery.start_soon(self._supervise, child, name=f"session-actor:{child.claude_session_id}")

    # -- supervision -----------------------------------------------------------------

    async def _supervise(self, child: SessionChild) -> None:
        backoff = TRANSIENT_BACKOFF_FIRST_S
        try:
            while True:
                child.started()
                self._starts += 1
                try:
                    await self._run_actor(child)
                except self._transient as exc:
                    self._transient_failures += 1
                    child.crashed(exc)
                    child.transition(ActorState.WAITING)
                    log.warning("session actor %s waits %.1f s: %s", child.claude_session_id, backoff, exc)
                    await trio.sleep(backoff)
                    backoff = min(backoff * 2, TRANSIENT_BACKOFF_CAP_S)
                    child.transition(ActorState.STARTING)
                    continue
                except Exception as exc:
                    match self._crashed(child, exc):
                        case AfterCrash.RESTART:
                            child.transition(ActorState.STARTING)
                            continue
                        case AfterCrash.GIVE_UP:
                            child.transition(ActorState.FAILED)
                            await self._park(child)
                        case AfterCrash.STOP:
                            child.transition(ActorState.STOPPED)
                    return
                # Normal return: idle or shutting down. Decide atomically (no await
                # between this check and leaving) whether work arrived meanwhile.
                if child.has_work() and not self._closing:
                    child.transition(ActorState.STARTING)
                    continue
                child.transition(ActorState.STOPPED)
                if not self._closing:  # idle: let go of the mailbox until work comes
                    self._idle_stops += 1
                    child.drop_mailbox()
                return
        finally:
            self._running.discard(child)
            if child.state.alive:  # cancelled at the drain deadline
                child.transition(ActorState.STOPPED)

    def _crashed(self, child: SessionChild, exc: Exception) -> AfterCrash:
        """Record a crash and decide what follows it."""
        self._crashes += 1
        child.crashed(exc)
        log_exception(log, f"session actor {child.claude_session_id} crashed: {child.last_error}", exc)
        if self._closing:
            return AfterCrash.STOP
        if child.intensity.crashed(self._clock()):
            self._restarts += 1
            return AfterCrash.RESTART
        return AfterCrash.GIVE_UP

    async def _park(self, child: SessionChild) -> None:
        self._failed += 1
        child.empty_mailbox()  # the journal keeps the events; memory lets go of them
        try:
            parked = await self._give_up(child)
        except Exception as exc:
            log_exception(log, f"could not park the events of {child.claude_session_id}; they stay pending", exc)
            return
        self._parked += parked
        log.error("session %s failed after %d crashes; %d event(s) parked", child.claude_session_id,
                  child.intensity.recent(), parked)

    def statistics(self) -> SupervisorStatistics:
        return SupervisorStatistics(
            max_restarts=self._policy.max_restarts,
            restart_period_seconds=self._policy.period_s,
            running=len(self._running),
            starts=self._starts,
            restarts=self._restarts,
            crashes=self._crashes,
            failed_sessions=self._failed,
            parked_events=self._parked,
            idle_stops=self._idle_stops,
            transient_failures=self._transient_failures,
        )
