"""Stopping a container exactly as the kubelet does: preStop, SIGTERM, SIGKILL at the deadline.

kubernetes/kubernetes pkg/kubelet/kuberuntime/kuberuntime_container.go:
- killContainer: the grace period is the pod's deletionGracePeriodSeconds (else
  terminationGracePeriodSeconds). If the container has a preStop hook and the grace period
  is > 0, executePreStopHook runs it and waits at most the grace period; the time it took,
  truncated to whole seconds (`int64(metav1.Now().Sub(start.Time).Seconds())`), is taken off
  the grace period. Whatever is left, but never less than minimumGracePeriodInSeconds (2 s,
  pkg/kubelet/kuberuntime/kuberuntime_manager.go), is passed to StopContainer, which sends
  SIGTERM and SIGKILL when that timeout expires. So a hook that overruns the grace period
  gets a one-off 2 s extension, and a hook that returns in the last second gets the same 2 s.
- The hook is not cancelled when the grace period runs out (the kubelet stops waiting, and
  the hook dies with the container); here a hook still running is cancelled once the
  container is stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from drainsafe.budget import PRESTOP_OVERRUN_EXTENSION
from drainsafe.lab.process import Container

MINIMUM_GRACE_SECONDS = int(PRESTOP_OVERRUN_EXTENSION)
"""minimumGracePeriodInSeconds in the kubelet: the floor of the SIGTERM-to-SIGKILL window."""


def stop_timeout(grace: int, prestop_elapsed: float | None) -> int:
    """Seconds between SIGTERM and SIGKILL, given the grace period and the hook's duration."""
    remaining = grace if prestop_elapsed is None else grace - int(prestop_elapsed)
    return max(remaining, MINIMUM_GRACE_SECONDS)


def grace_period(pod: dict[str, object]) -> int:
    """The grace period the kubelet applies: deletionGracePeriodSeconds, else the spec's."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    assert isinstance(meta, dict) and isinstance(spec, dict)
    for value in (meta.get("deletionGracePeriodSeconds"),
                  spec.get("terminationGracePeriodSeconds")):
        if value is not None:
            return int(value)
    return 30


@dataclass
class TerminationRecord:
    """When each step happened (monotonic seconds), for status, tests and the race analysis."""

    grace: int
    started: float
    prestop_started: float | None = None
    prestop_ended: float | None = None
    prestop_completed: bool | None = None
    stop_timeout: int | None = None
    sigterm_at: float | None = None
    sigkill_at: float | None = None
    exited_at: float | None = None
    exit_code: int | None = None

    @property
    def killed(self) -> bool:
        return self.sigkill_at is not None


PreStop = Callable[[], Awaitable[object]]


async def kill_container(container: Container, *, grace: int, prestop: PreStop | None,
                         clock: Callable[[], float] = time.monotonic) -> TerminationRecord:
    record = TerminationRecord(grace=grace, started=clock())
    hook: asyncio.Future[object] | None = None
    elapsed: float | None = None
    try:
        if prestop is not None and grace > 0 and container.returncode is None:
            record.prestop_started = clock()
            hook = asyncio.ensure_future(prestop())
            done, _ = await asyncio.wait({hook}, timeout=grace)
            record.prestop_ended = clock()
            record.prestop_completed = bool(done)
            elapsed = record.prestop_ended - record.prestop_started
        timeout = stop_timeout(grace, elapsed)
        record.stop_timeout = timeout
        if container.returncode is None:
            container.send(signal.SIGTERM)
            record.sigterm_at = clock()
            try:
                await asyncio.wait_for(container.wait(), timeout)
            except TimeoutError:
                container.send(signal.SIGKILL)
                record.sigkill_at = clock()
        record.exit_code = await container.wait()
        record.exited_at = clock()
    finally:
        if hook is not None and not hook.done():
            hook.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await hook
    return record
