"""The termination budget: what must fit inside terminationGracePeriodSeconds.

One model, shared by check, serve/run, tune and simulate:

    drain delay + shutdown deadline + buffer <= grace period

- drain delay: time the pod keeps accepting traffic after termination starts, so that
  endpoint removal reaches every proxy (a preStop sleep, or drainsafe's built-in delay).
- shutdown deadline: time the server gives in-flight requests after it stops accepting.
- buffer: slack for process exit and signal delivery.

Kubernetes facts behind it (kubernetes.io/docs/concepts/containers/container-lifecycle-hooks/
and /docs/concepts/workloads/pods/pod-lifecycle/#pod-termination): the grace-period countdown
starts before the preStop hook runs and covers hook and shutdown together; SIGTERM is sent
only when the hook returns; if the hook is still running when the grace period ends, the
kubelet grants a one-off 2 s extension, then sends SIGKILL.

Pure functions of plain numbers; no I/O. Durations are seconds (float).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from drainsafe.kube import objects

DEFAULT_GRACE_SECONDS = float(objects.DEFAULT_GRACE_SECONDS)
"""terminationGracePeriodSeconds when unset (the PodSpec default, kept in kube/objects), as
the float every duration here is."""

PRESTOP_OVERRUN_EXTENSION = 2.0
"""The kubelet's one-off extension when a preStop hook outlives the grace period."""

DEFAULT_BUFFER_SECONDS = 5.0
"""Slack for signal delivery, process exit and clock skew; drainsafe's default."""

DEFAULT_PROPAGATION_SECONDS = 10.0
"""Endpoint propagation a drain delay should cover when nothing is measured (seed: 5-15 s)."""


@dataclass(frozen=True)
class Budget:
    """A pod's termination settings, as the kubelet and the server will apply them."""

    grace: float
    drain_delay: float
    shutdown_deadline: float
    buffer: float = DEFAULT_BUFFER_SECONDS

    @property
    def required(self) -> float:
        return self.drain_delay + self.shutdown_deadline + self.buffer

    @property
    def slack(self) -> float:
        """Seconds to spare (negative: SIGKILL comes before the shutdown can finish)."""
        return self.grace - self.required

    @property
    def fits(self) -> bool:
        return self.slack >= 0

    @property
    def sigkill_at(self) -> float:
        """Seconds after termination starts at which the kubelet sends SIGKILL."""
        if self.drain_delay > self.grace:
            return self.grace + PRESTOP_OVERRUN_EXTENSION
        return self.grace

    @property
    def serving_window(self) -> float:
        """Seconds in-flight work really gets after the listener closes, before SIGKILL."""
        return max(self.sigkill_at - self.drain_delay, 0.0)

    def arithmetic(self) -> str:
        """The sum as a person checks it, e.g. '10 + 90 + 5 = 105 > 60'."""
        relation = "<=" if self.fits else ">"
        return (
            f"{_fmt(self.drain_delay)} + {_fmt(self.shutdown_deadline)} + {_fmt(self.buffer)}"
            f" = {_fmt(self.required)} {relation} {_fmt(self.grace)}"
        )


def covers_propagation(drain_delay: float, propagation: float) -> bool:
    """Whether traffic stops arriving before the listener closes."""
    return drain_delay >= propagation


def covers_requests(shutdown_deadline: float, max_request: float) -> bool:
    """Whether the longest request can finish after the listener closes."""
    return shutdown_deadline >= max_request


@dataclass(frozen=True)
class Recommendation:
    """Settings derived from measured (or declared) figures, with the figures kept."""

    budget: Budget
    propagation: float
    max_request: float
    margin: float

    @property
    def grace_seconds(self) -> int:
        """terminationGracePeriodSeconds is an integer field; round up, never down."""
        return math.ceil(self.budget.grace)


def recommend(
    *,
    propagation: float,
    max_request: float,
    margin: float = 0.2,
    buffer: float = DEFAULT_BUFFER_SECONDS,
) -> Recommendation:
    """Settings that fit: drain delay covers propagation, deadline covers the longest request.

    margin is a fraction added on top of each measured figure (0.2 = 20 %).
    """
    drain_delay, deadline, grace = _recommended(propagation, max_request, margin, buffer)
    return Recommendation(
        budget=Budget(grace=grace, drain_delay=drain_delay, shutdown_deadline=deadline,
                      buffer=buffer),
        propagation=propagation,
        max_request=max_request,
        margin=margin,
    )


def recommended_grace(*, propagation: float, max_request: float, margin: float = 0.2,
                      buffer: float = DEFAULT_BUFFER_SECONDS) -> int:
    """recommend(...).grace_seconds, without its records (check asks once per finding)."""
    return _recommended(propagation, max_request, margin, buffer)[2]


def _recommended(propagation: float, max_request: float, margin: float, buffer: float
                 ) -> tuple[float, float, int]:
    """The drain delay, shutdown deadline and grace period recommend() gives."""
    if propagation < 0 or max_request < 0 or margin < 0 or buffer < 0:
        raise ValueError("durations and margin must be >= 0")
    drain_delay = _round_up(propagation * (1 + margin))
    deadline = _round_up(max_request * (1 + margin))
    return drain_delay, deadline, math.ceil(drain_delay + deadline + buffer)


def fit_deadline(*, grace: float, drain_delay: float, buffer: float = DEFAULT_BUFFER_SECONDS
                 ) -> float:
    """The longest shutdown deadline that still fits in the grace period (0 if none does)."""
    return max(grace - drain_delay - buffer, 0.0)


def _round_up(seconds: float) -> float:
    """Round up to a tenth of a second, so that settings read cleanly (never below `seconds`)."""
    tenths = math.ceil(round(seconds * 10, 9)) / 10
    return tenths if tenths >= seconds else tenths + 0.1


def _fmt(seconds: float) -> str:
    return f"{seconds:g}s"
