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

Which grace period, at kubernetes v1.31.0 (an explicit 0 stays 0 and is never a default):
- a pod the API deleted: pkg/kubelet/pod_workers.go `calculateEffectiveGracePeriod`, passed
  to killContainer as `gracePeriodOverride` (`effective_grace` below);
- a container the kubelet kills itself (failed liveness or startup probe): kuberuntime
  `setTerminationGracePeriod`, with no override (`kill_grace` below).
On the API side a DELETE with gracePeriodSeconds=0 removes the pod at once (pkg/registry/
core/pod/strategy.go `CheckGracefulDelete`, as the lab store does); it is kubectl that turns
`delete --grace-period=0` without `--force` into 1 s (kubectl pkg/cmd/delete/delete.go).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from drainsafe.budget import PRESTOP_OVERRUN_EXTENSION
from drainsafe.lab.node.process import Container

MINIMUM_GRACE_SECONDS = int(PRESTOP_OVERRUN_EXTENSION)
"""minimumGracePeriodInSeconds in the kubelet: the floor of the SIGTERM-to-SIGKILL window."""


def stop_timeout(grace: int, prestop_elapsed: float | None) -> int:
    """Seconds between SIGTERM and SIGKILL, given the grace period and the hook's duration."""
    remaining = grace if prestop_elapsed is None else grace - int(prestop_elapsed)
    return max(remaining, MINIMUM_GRACE_SECONDS)


def effective_grace(pod: dict[str, object], current: int = 0) -> int:
    """The grace period the kubelet gives a pod the API deleted (calculateEffectiveGracePeriod,
    pkg/kubelet/pod_workers.go at v1.31.0).

    `current` is the grace already in force for this pod (0: none yet); it can only shrink.
    deletionGracePeriodSeconds is "bedrock truth" from the API server. Only when nothing
    asked for a grace period (0) does the kubelet fall back to the spec's
    terminationGracePeriodSeconds, and it always supplies at least 1 s. So an API deletion
    of a pod whose spec says 0 gets 1 s, and a force deletion (the DELETED pod carries no
    grace) gets the spec's value: the v1.31 kubelet still terminates it gracefully
    (kubernetes/kubernetes#113717).
    """
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    assert isinstance(meta, dict) and isinstance(spec, dict)
    grace = current
    deletion = meta.get("deletionGracePeriodSeconds")
    if deletion is not None and (grace == 0 or int(deletion) < grace):
        grace = int(deletion)
    if grace == 0 and spec.get("terminationGracePeriodSeconds") is not None:
        grace = int(spec["terminationGracePeriodSeconds"])
    return max(grace, 1)


PROBE_FIELDS = {"liveness": "livenessProbe", "startup": "startupProbe"}


def kill_grace(pod: dict[str, object], container: dict[str, object], reason: str) -> int:
    """The grace period of a kill the kubelet starts itself (setTerminationGracePeriod in
    pkg/kubelet/kuberuntime/kuberuntime_container.go at v1.31.0): the pod's
    deletionGracePeriodSeconds if set; else, if the spec has terminationGracePeriodSeconds,
    the failing probe's own terminationGracePeriodSeconds (reason "liveness"/"startup")
    or the spec's value; else minimumGracePeriodInSeconds. 0 stays 0 (no preStop hook, and
    SIGKILL 2 s after SIGTERM)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    assert isinstance(meta, dict) and isinstance(spec, dict)
    if meta.get("deletionGracePeriodSeconds") is not None:
        return int(meta["deletionGracePeriodSeconds"])
    if spec.get("terminationGracePeriodSeconds") is None:
        return MINIMUM_GRACE_SECONDS
    probe = container.get(PROBE_FIELDS.get(reason, ""))
    if isinstance(probe, dict) and probe.get("terminationGracePeriodSeconds") is not None:
        return int(probe["terminationGracePeriodSeconds"])
    return int(spec["terminationGracePeriodSeconds"])


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
                async with asyncio.timeout(timeout):
                    await container.wait()
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
