"""The drain lifecycle shared by `drainsafe serve` and `drainsafe run`, as pure data.

    SERVING --signal or drain request--> DRAINING --drain delay over--> CLOSING
    CLOSING --nothing in flight, or deadline passed and streams cut--> EXIT

- DRAINING: readiness fails at once, liveness stays up; new connections are still accepted
  (endpoint removal has not reached every proxy yet) and every response says
  `Connection: close`, so pooled keep-alive connections retire.
- CLOSING: the listener is closed, then each idle keep-alive connection once it has been
  idle for the idle grace, counted from when it last went idle or from the start of CLOSING,
  whichever is later (`idle_grace_over`; uvicorn/h11 keep-alive: a client may send its next
  request on a connection the moment its last response ended, uvicorn discussion #2315);
  the process exits only once no connection is within its grace; in-flight work runs on until the
  shutdown deadline (counted from the start of CLOSING, as in drainsafe.budget); streams
  still open at the deadline are ended with drainsafe.marker's error event and counted.
- A second signal (SIGTERM or SIGINT) forces exit. A drain request (preStop httpGet) is not
  a signal: the kubelet's SIGTERM that follows the hook is still the first signal.

Functions here take the state and a clock reading and return the next state; the I/O shell
(serve, run) feeds them events and acts on the result.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, replace

from drainsafe.budget import DEFAULT_GRACE_SECONDS, Budget
from drainsafe.server.config import Settings
from drainsafe.shell import EXIT_FAILED, EXIT_FORCED, EXIT_OK

EXIT_CUT = EXIT_FAILED
"""serve's and run's own bad outcome: some requests or streams were still running at the
deadline and were ended on purpose. EXIT_FORCED: a second signal forced exit while work
was in flight (drainsafe.shell has the table)."""


class Phase(enum.StrEnum):
    SERVING = "serving"
    DRAINING = "draining"
    CLOSING = "closing"
    EXIT = "exit"


@dataclass(frozen=True)
class State:
    phase: Phase = Phase.SERVING
    signals: int = 0
    drain_started: float | None = None
    drain_reason: str = ""
    closing_started: float | None = None
    forced: bool = False
    cut_done: bool = False

    def deadline(self, settings: Settings) -> float | None:
        if self.closing_started is None:
            return None
        return self.closing_started + settings.shutdown_timeout


def begin_drain(state: State, now: float, reason: str) -> State:
    """Start draining (idempotent: a drain already under way keeps its start time)."""
    if state.phase is not Phase.SERVING:
        return state
    return replace(state, phase=Phase.DRAINING, drain_started=now, drain_reason=reason)


def on_signal(state: State, now: float, name: str) -> State:
    """A termination signal: the first starts the drain, the second forces exit."""
    signals = state.signals + 1
    if signals >= 2:
        return replace(state, signals=signals, forced=True,
                       drain_started=state.drain_started if state.drain_started is not None
                       else now,
                       drain_reason=state.drain_reason or name)
    return replace(begin_drain(state, now, name), signals=signals)


def idle_grace_over(state: State, now: float, settings: Settings, idle_since: float) -> bool:
    """Whether a keep-alive connection idle since `idle_since` may be closed now: in CLOSING,
    once idle for the idle grace counted from when it last went idle, or from the start of
    CLOSING if it was idle before (the grace never runs out before the listener closed).
    Before CLOSING (serve stopped by uvicorn itself, e.g. --limit-max-requests) it counts
    from when the connection went idle."""
    since = idle_since if state.closing_started is None \
        else max(idle_since, state.closing_started)
    return now >= since + min(settings.idle_grace, settings.shutdown_timeout)


def advance(state: State, now: float, settings: Settings, *, in_flight: int,
            newest_idle: float | None = None) -> State:
    """Move on with time: DRAINING -> CLOSING -> EXIT.

    `newest_idle`: when the most recently idle open connection went idle (None: no open
    idle connection is known). EXIT waits until that connection's idle grace is over too."""
    if state.forced:
        return replace(state, phase=Phase.EXIT)
    if state.phase is Phase.DRAINING and state.drain_started is not None \
            and now >= state.drain_started + settings.drain_delay:
        state = replace(state, phase=Phase.CLOSING, closing_started=now)
    if state.phase is Phase.CLOSING:
        deadline = state.deadline(settings)
        assert deadline is not None
        assert state.closing_started is not None
        # Nothing in flight: exit, once late requests on idle connections had their chance.
        if in_flight == 0 and idle_grace_over(state, now, settings, state.closing_started) \
                and (newest_idle is None or idle_grace_over(state, now, settings, newest_idle)):
            return replace(state, phase=Phase.EXIT)
        if now >= deadline and not state.cut_done:
            return replace(state, cut_done=True)
        if now >= deadline + settings.flush:
            return replace(state, phase=Phase.EXIT)
    return state


def should_cut(state: State, now: float, settings: Settings) -> bool:
    """Whether open streams must be ended with the marker now."""
    deadline = state.deadline(settings)
    return state.forced or (deadline is not None and now >= deadline)


def live(state: State, now: float, settings: Settings) -> bool:
    """Liveness: up through the drain and the shutdown deadline; down once the lifecycle
    is over (EXIT, or the deadline and the flush passed) while the process is still there,
    e.g. the middleware under a uvicorn that did not stop, so that the kubelet restarts it
    instead of keeping a pod that never serves again."""
    if state.phase is Phase.EXIT:
        return False
    deadline = state.deadline(settings)
    return deadline is None or now < deadline + settings.flush


def exit_code(state: State, *, cut: int, in_flight: int) -> int:
    """0 when everything finished; EXIT_CUT when anything was ended on purpose."""
    if state.forced and (cut or in_flight):
        return EXIT_FORCED
    if cut or in_flight:
        return EXIT_CUT
    return EXIT_OK


def budget_warning(settings: Settings, grace: float | None) -> str | None:
    """A warning when drain delay + deadline (+ buffer) does not fit the grace period."""
    budget = Budget(grace=DEFAULT_GRACE_SECONDS if grace is None else grace,
                    drain_delay=settings.drain_delay,
                    shutdown_deadline=settings.shutdown_timeout)
    if budget.fits:
        return None
    source = "DRAINSAFE_GRACE_SECONDS" if grace is not None else "the default grace period"
    return (f"drain delay + shutdown timeout + buffer do not fit {source}: "
            f"{budget.arithmetic()}; the kubelet sends SIGKILL at {budget.sigkill_at:g}s")


def phase_log_line(phase: Phase, now_wall: float, **figures: object) -> str:
    """One structured (JSON) log line for a phase change."""
    record: dict[str, object] = {"ts": round(now_wall, 3), "event": "drainsafe.phase",
                                 "phase": phase.value}
    record.update(figures)
    return json.dumps(record, separators=(",", ":"), default=str)
