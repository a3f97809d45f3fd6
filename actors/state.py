"""The states of a session actor, and every transition between them, in one place.

::

    STOPPED ──start──▶ STARTING ──session loaded──▶ RUNNING ◀──▶ COMPRESSING ─▶ STORING
       ▲                  ▲                            ▲  ▲        SUMMARIZING
       │                  │ crash, restart             │  └──▶ IDLE / BATCHING (waiting)
       │                  └────────────────────────────┤
       ├──── returned (idle, or shut down) ────────────┤
       │                                               │ crash, given up
       └──── replayed ◀──── FAILED ◀───────────────────┤
                                                       │ the environment failed (disk full)
                           STARTING ◀── WAITING ◀──────┘

:meth:`sessionmem.actors.child.SessionChild.transition` refuses any other move, so a
state written from the supervisor and from the actor cannot drift into nonsense.
"""

from __future__ import annotations

import enum


class ActorState(enum.Enum):
    STOPPED = "stopped"  # no task: not started yet, idle-stopped, or shut down
    STARTING = "starting"  # a task is starting (or restarting after a crash) and loads its session
    RUNNING = "running"  # handling a message
    COMPRESSING = "compressing"  # a batch of tool uses is with the compressor
    STORING = "storing"  # results are being committed
    SUMMARIZING = "summarizing"  # a session summary is being made and stored
    IDLE = "idle"  # waiting for a message, nothing batched
    BATCHING = "batching"  # waiting, tool uses batched (flushed after a quiet period)
    WAITING = "waiting"  # the environment failed (disk full): waits, then starts again; not a crash
    FAILED = "failed"  # given up after too many crashes; its events are parked in the journal

    @property
    def alive(self) -> bool:
        """A task exists for the actor."""
        return self not in (ActorState.STOPPED, ActorState.FAILED)

    @property
    def working(self) -> bool:
        """The actor is doing something with a message (not waiting for one)."""
        return self in _WORKING


_WORKING = frozenset({ActorState.RUNNING, ActorState.COMPRESSING, ActorState.STORING, ActorState.SUMMARIZING})
_OWN_PHASES = _WORKING | {ActorState.IDLE, ActorState.BATCHING}
_ENDINGS = frozenset({ActorState.STARTING, ActorState.FAILED, ActorState.STOPPED,  # crash, give up, return
                      ActorState.WAITING})  # the environment failed

TRANSITIONS: dict[ActorState, frozenset[ActorState]] = {
    ActorState.STOPPED: frozenset({ActorState.STARTING}),
    ActorState.STARTING: frozenset({ActorState.RUNNING}) | _ENDINGS,
    ActorState.FAILED: frozenset({ActorState.STOPPED}),
    ActorState.WAITING: frozenset({ActorState.STARTING, ActorState.STOPPED}),
    **{phase: _OWN_PHASES | _ENDINGS for phase in _OWN_PHASES},
}


class IllegalTransition(RuntimeError):
    """A move the table above does not allow: a bug, counted as the actor's crash."""
