"""Readiness, liveness and startup probes, with the kubelet's thresholds and timing.

Semantics from kubernetes/kubernetes pkg/kubelet/prober/worker.go and the Probe API
(k8s.io/api core/v1 types.go, Probe defaults in pkg/apis/core/v1/defaults.go):
- defaults: periodSeconds 10, timeoutSeconds 1, successThreshold 1, failureThreshold 3,
  initialDelaySeconds 0; successThreshold must be 1 for liveness and startup probes.
- initial result: readiness Failure, liveness Success, startup Unknown (not started).
- a result only flips after `successThreshold` consecutive successes or `failureThreshold`
  consecutive failures; before initialDelaySeconds the probe is not run at all.
- liveness and readiness probes wait until the startup probe has succeeded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

import httpx

from drainsafe.lab.node.handlers import ActionError, Outcome, Target, action_kind, run_action


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


ProbeListener = Callable[[ProbeType, bool | None, Outcome], None]


class ProbeWorker:
    """Runs one probe periodically against one container, calling back on every result."""

    def __init__(self, spec: ProbeSpec, target: Target, *, started_at: float,
                 on_result: ProbeListener, client: httpx.AsyncClient | None = None,
                 gate: Callable[[], bool] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 run: Callable[..., Awaitable[Outcome]] = run_action) -> None:
        self.spec = spec
        self.target = target
        self.started_at = started_at
        self.on_result = on_result
        self.client = client
        self.gate = gate  # e.g. "startup probe has succeeded"
        self.clock = clock
        self._run = run
        self.threshold = Threshold(spec)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _loop(self) -> None:
        delay = self.started_at + self.spec.initial_delay - self.clock()
        if delay > 0:
            await asyncio.sleep(delay)
        while True:
            began = self.clock()
            if self.gate is None or self.gate():
                await self.probe_once()
            await asyncio.sleep(max(self.spec.period - (self.clock() - began), 0.0))

    async def probe_once(self) -> bool | None:
        try:
            outcome = await self._run(self.spec.action, self.target, timeout=self.spec.timeout,
                                      client=self.client)
        except ActionError as exc:
            outcome = Outcome(False, str(exc))
        result = self.threshold.observe(outcome.ok)
        self.on_result(self.spec.kind, result, outcome)
        return result
