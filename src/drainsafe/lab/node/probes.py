"""Readiness, liveness and startup probes, with the kubelet's thresholds and timing.

Semantics from kubernetes/kubernetes pkg/kubelet/prober/worker.go and the Probe API
(k8s.io/api core/v1 types.go, Probe defaults in pkg/apis/core/v1/defaults.go):
- defaults: periodSeconds 10, timeoutSeconds 1, successThreshold 1, failureThreshold 3,
  initialDelaySeconds 0; successThreshold must be 1 for liveness and startup probes.
- initial result: readiness Failure, liveness Success, startup Unknown (not started).
- a result only flips after `successThreshold` consecutive successes or `failureThreshold`
  consecutive failures; before initialDelaySeconds the probe is not run at all.
- liveness and readiness probes wait until the startup probe has succeeded.

The prober's own lateness. A kubelet runs on its node with reserved CPU; the lab's prober
runs in the lab's one event loop, beside the API server and every other kubelet, on a
machine it shares. When that loop is starved, every probe in flight times out together, and
a pod that answered in time would be failed for the lab's own delay. The kubelet does not
count a probe it could not run properly: pkg/kubelet/prober/worker.go `doProbe` (since the
worker's introduction, PR #14221 in v1.1, and unchanged at v1.29, the release that added
PR #119089's "Triggerd Probe" log) throws the result away when the prober itself errs
("Prober error, throw away the result."), leaving `lastResult` and `resultRun` as they
were, so it counts toward neither threshold; prober.go keeps a pod's own timeout a Failure.
Its probe loop waits on a `time.Ticker`, which drops ticks for a slow receiver rather than
firing a burst of late probes. The lab follows that:
- `LoopStalls` measures how long the loop was kept from running (a timer's lateness);
- each probe records when it was due, sent and answered (`ProbeTiming`), and `verdict`
  makes a timeout during whose wait the loop stalled for `STALL_SHARE` of that timeout
  or more UNKNOWN: thrown away like the kubelet's prober error, counted as neither
  success nor failure;
- a worker late by more than a period skips the missed ticks, as the Ticker does.
A success is always a success, and a failure that is the pod's answer (refused, HTTP 500,
an exit code) always counts, however late the lab read it, so a failing pod still fails.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar

import httpx

from drainsafe.lab.node.handlers import ActionError, Outcome, Target, action_kind, run_action

log = logging.getLogger(__name__)

# A failure is thrown away when the lab's loop stalled for this share of the probe's timeout
# while it waited for the answer: the pod no longer had the whole timeout to answer in.
STALL_SHARE = 0.1


class ProbeType(Enum):
    READINESS = "readinessProbe"
    LIVENESS = "livenessProbe"
    STARTUP = "startupProbe"


class ProbeSpecError(ValueError):
    pass


@dataclass(frozen=True)
class ProbeSpec:
    kind: ProbeType
    action: Mapping[str, Any]
    initial_delay: float = 0.0
    period: float = 10.0
    timeout: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3

    @classmethod
    def from_manifest(cls, kind: ProbeType, spec: Mapping[str, Any], *,
                      where: str = "") -> ProbeSpec:
        at = f"{where}.{kind.value}" if where else kind.value
        try:
            action_kind(spec)
        except ActionError as exc:
            raise ProbeSpecError(f"{at}: {exc}") from None

        def number(key: str, default: float, minimum: float) -> float:
            raw = spec.get(key)
            if raw is None:
                return default
            if not isinstance(raw, (int, float)) or isinstance(raw, bool) or raw < minimum:
                raise ProbeSpecError(f"{at}.{key}: {raw!r} must be a number >= {minimum:g}")
            return float(raw)

        probe = cls(
            kind=kind,
            action=spec,
            initial_delay=number("initialDelaySeconds", 0, 0),
            period=number("periodSeconds", 10, 1),
            timeout=number("timeoutSeconds", 1, 1),
            success_threshold=int(number("successThreshold", 1, 1)),
            failure_threshold=int(number("failureThreshold", 3, 1)),
        )
        if kind is not ProbeType.READINESS and probe.success_threshold != 1:
            raise ProbeSpecError(f"{at}.successThreshold: must be 1 for {kind.value}")
        return probe


def container_probes(container: Mapping[str, Any], *,
                     where: str = "") -> dict[ProbeType, ProbeSpec]:
    found: dict[ProbeType, ProbeSpec] = {}
    for kind in ProbeType:
        spec = container.get(kind.value)
        if spec:
            found[kind] = ProbeSpec.from_manifest(kind, spec, where=where)
    return found


class Threshold:
    """Consecutive-result counting: the probe's reported state (pure, no I/O)."""

    def __init__(self, spec: ProbeSpec) -> None:
        self.spec = spec
        # None: no result yet (startup probe "unknown").
        self.result: bool | None = {ProbeType.READINESS: False, ProbeType.LIVENESS: True,
                                    ProbeType.STARTUP: None}[spec.kind]
        self._last: bool | None = None
        self._run = 0

    def observe(self, ok: bool) -> bool | None:
        self._run = self._run + 1 if self._last == ok else 1
        self._last = ok
        needed = self.spec.success_threshold if ok else self.spec.failure_threshold
        if self._run >= needed:
            self.result = ok
        return self.result


class LoopStalls:
    """How long this event loop was kept from running: the lab's own scheduling lateness.

    A timer due every `tick` seconds notes how late it ran; lateness above `floor` is a
    stall covering [due, woke]. One instance per event loop (`for_loop`), shared by every
    prober in it and kept running while anyone holds it; tests read it too, to derive
    their timing margins from the delay the machine really imposed."""

    def __init__(self, *, tick: float = 0.05, floor: float = 0.02, keep: float = 600.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.tick = tick
        self.clock = clock
        self.floor = floor
        self.keep = keep
        self._stalls: deque[tuple[float, float]] = deque()
        self._users = 0
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0

    _by_loop: ClassVar[weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopStalls]] = \
        weakref.WeakKeyDictionary()

    @classmethod
    def for_loop(cls, loop: asyncio.AbstractEventLoop | None = None) -> LoopStalls:
        loop = loop or asyncio.get_running_loop()
        found = cls._by_loop.get(loop)
        if found is None:
            found = cls._by_loop[loop] = cls()
        return found

    def acquire(self) -> None:
        self._users += 1
        if self._handle is None:
            self._due = self.clock() + self.tick
            self._handle = asyncio.get_running_loop().call_later(self.tick, self._woke)

    def release(self) -> None:
        self._users = max(self._users - 1, 0)
        if self._users == 0 and self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _woke(self) -> None:
        now = self.clock()
        if now - self._due > self.floor:
            self._stalls.append((self._due, now))
        while self._stalls and self._stalls[0][1] < now - self.keep:
            self._stalls.popleft()
        self._due = now + self.tick
        self._handle = asyncio.get_running_loop().call_later(self.tick, self._woke)

    def stalled(self, start: float, end: float) -> float:
        """Seconds of [start, end] (on `clock`) during which the loop could not run,
        counting a stall still in progress (its timer has not run yet: this callback ran
        first in the turn that ended it)."""
        stalls: list[tuple[float, float]] = []
        now = self.clock()
        if self._handle is not None and now - self._due > self.floor:
            stalls.append((self._due, now))
        total = 0.0
        for a, b in [*stalls, *reversed(self._stalls)]:  # newest first; none overlap
            if b <= start:
                break
            total += max(0.0, min(end, b) - max(start, a))
        return total

    def total(self) -> float:
        return sum(b - a for a, b in self._stalls)

    def worst(self, start: float, end: float) -> float:
        """The longest single stall overlapping [start, end], in seconds."""
        return max((min(end, b) - max(start, a) for a, b in self._stalls
                    if b > start and a < end), default=0.0)


class Verdict(Enum):
    SUCCESS = "Success"
    FAILURE = "Failure"
    UNKNOWN = "Unknown"  # the prober could not judge: thrown away, counted toward nothing


@dataclass(frozen=True)
class ProbeTiming:
    """When one probe was due, sent and answered, and how long the lab's loop stalled
    while it waited for the answer (seconds, on the worker's clock)."""

    due: float
    sent: float
    answered: float
    stalled: float

    @property
    def lateness(self) -> float:
        return self.sent - self.due


def verdict(outcome: Outcome, timing: ProbeTiming, timeout: float) -> Verdict:
    """What one probe's outcome counts as, given the prober's own measured delay (pure)."""
    if outcome.ok:
        return Verdict.SUCCESS
    # Only a timeout can be the lab's doing: a refusal or an HTTP 500 is the pod's answer,
    # however late the lab read it.
    if outcome.timed_out and timing.stalled >= STALL_SHARE * timeout:
        return Verdict.UNKNOWN
    return Verdict.FAILURE


ProbeListener = Callable[[ProbeType, bool | None, Outcome], None]


class ProbeWorker:
    """Runs one probe periodically against one container, calling back on every counted
    result; results the prober could not judge (`Verdict.UNKNOWN`) are only tallied."""

    def __init__(self, spec: ProbeSpec, target: Target, *, started_at: float,
                 on_result: ProbeListener, client: httpx.AsyncClient | None = None,
                 gate: Callable[[], bool] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 run: Callable[..., Awaitable[Outcome]] = run_action,
                 stalls: LoopStalls | None = None) -> None:
        self.spec = spec
        self.target = target
        self.started_at = started_at
        self.on_result = on_result
        self.client = client
        self.gate = gate  # e.g. "startup probe has succeeded"
        self.clock = clock  # the same clock as the stall record's (monotonic)
        self._run = run
        self.threshold = Threshold(spec)
        self.stalls = stalls
        self.unknown = 0         # results thrown away: the lab was too starved to judge
        self.skipped_ticks = 0   # periods missed entirely while the loop was starved
        self.last_timing: ProbeTiming | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.stalls is None:
            self.stalls = LoopStalls.for_loop()
        self.stalls.acquire()
        self._task = asyncio.ensure_future(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
            if self.stalls is not None:
                self.stalls.release()

    async def _loop(self) -> None:
        due = self.started_at + self.spec.initial_delay
        while True:
            delay = due - self.clock()
            if delay > 0:
                await asyncio.sleep(delay)
            if self.gate is None or self.gate():
                await self.probe_once(due=due)
            due += self.spec.period
            behind = self.clock() - due
            if behind > self.spec.period:
                # time.Ticker semantics: ticks missed while the loop was starved are
                # dropped, not sent as a burst of late probes.
                missed = int(behind // self.spec.period)
                self.skipped_ticks += missed
                due += missed * self.spec.period

    async def probe_once(self, *, due: float | None = None) -> bool | None:
        sent = self.clock()
        try:
            outcome = await self._run(self.spec.action, self.target, timeout=self.spec.timeout,
                                      client=self.client)
        except ActionError as exc:
            outcome = Outcome(False, str(exc))
        answered = self.clock()
        stalled = self.stalls.stalled(sent, answered) if self.stalls is not None else 0.0
        timing = ProbeTiming(due=sent if due is None else due, sent=sent, answered=answered,
                             stalled=stalled)
        self.last_timing = timing
        if verdict(outcome, timing, self.spec.timeout) is Verdict.UNKNOWN:
            self.unknown += 1
            log.info("%s %s: result thrown away, the lab's loop stalled %.2f s of the wait "
                     "(sent %.2f s late): %s", self.spec.kind.value, self.target.pod_ip,
                     stalled, timing.lateness, outcome.message)
            return self.threshold.result
        result = self.threshold.observe(outcome.ok)
        self.on_result(self.spec.kind, result, outcome)
        return result
