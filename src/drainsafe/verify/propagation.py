"""The propagation bound: by when each terminating pod was out of rotation, from verify's record.

The seed's advice, "measure the delay between deletionTimestamp and the last request reaching
the pod", holds only when new routing decisions are dense. A proxy routes a connection once,
when it opens (kube-proxy DNATs the SYN; an L7 proxy picks an upstream per downstream
connection or request), so a request on a reused keep-alive connection says nothing about
whether the pod was still in rotation. The evidence is the requests that opened a fresh
connection and were answered by a pod that names itself (x-drainsafe-pod).

Per terminating pod, from the time verify saw its deletionTimestamp (t0):
- `last`: the last fresh arrival at the pod, as seconds after t0 (0 if none came after t0);
- `rate`: fresh arrivals per second that would reach the pod while in rotation. The lower of
  the pod's own rate in the `window` before t0, and the rate of fresh arrivals at all pods
  then, divided by the number of pods answering fresh connections from the window's start
  to the bound (pods joining during a rollout thin each pod's share);
- if the pod had still been in rotation t seconds after `last`, the chance of no fresh
  arrival in those t seconds is exp(-rate * t) (arrivals spread like a Poisson process over
  random or round-robin balancing), so the pod was out of rotation by
  `last + ln(1 / (1 - confidence)) / rate` at that confidence. The second term is the
  `resolution`.
The bound holds only if fresh connections kept coming until it (`load_ended`) and none of
them failed after `last` (`stopped_answering`: a closed listener hides whether the pod was
still being routed to); a resolution above `max_resolution` of the figure (and above
RESOLUTION_FLOOR_SECONDS) is too coarse to tune from (`too_coarse`).

Pure functions of plain data; `evidence(record)` is the only link to verify's record.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from drainsafe.verify.load import RequestResult
from drainsafe.verify.record import POD_TERMINATING, Record

CONFIDENCE = 0.99
RATE_WINDOW_SECONDS = 5.0
"""Fresh arrivals in this many seconds before termination give the pod's rate."""
MAX_RESOLUTION = 0.5
"""The resolution may be at most this fraction of the figure..."""
RESOLUTION_FLOOR_SECONDS = 0.5
"""...or at most this many seconds (a preStop sleep is set in whole seconds anyway)."""
DEFAULT_PROBE_RATE = 20.0


class Gap(StrEnum):
    """Why a pod's lag could not be bounded."""

    NO_FRESH_ARRIVALS = "no_fresh_arrivals"
    LOAD_ENDED = "load_ended"
    STOPPED_ANSWERING = "stopped_answering"
    TOO_COARSE = "too_coarse"


@dataclass(frozen=True)
class Arrival:
    """One request that opened a fresh connection."""

    t: float
    pod: str | None
    """The pod that answered (its name header), None if none named itself."""
    failed: bool = False
    """No pod answered it: refused, reset, a proxy's 502... (a failed request)."""


@dataclass(frozen=True)
class Evidence:
    fresh: tuple[Arrival, ...]
    """Sorted by time."""
    terminations: Mapping[str, float]
    """Pod -> when verify saw its deletionTimestamp (seconds since the run started)."""
    served: frozenset[str]
    """Pods that answered any request of the run, fresh or not."""


@dataclass(frozen=True)
class PodBound:
    pod: str
    started: float
    """When its termination was seen (t0)."""
    last: float
    """Seconds from t0 to its last fresh arrival (0 if none came after t0)."""
    rate: float
    """Fresh connections per second that reached it while in rotation (lower estimate)."""
    endpoints: int
    resolution: float
    confidence: float
    gap: Gap | None = None
    detail: str = ""

    @property
    def value(self) -> float:
        """Seconds after t0 by which the pod was out of rotation, at `confidence`."""
        return self.last + self.resolution

    @property
    def bounded(self) -> bool:
        return self.gap is None

    @property
    def basis(self) -> str:
        if self.rate <= 0:
            return f"pod {self.pod}: {self.detail}"
        return (f"pod {self.pod}: last fresh arrival {self.last:.2f} s, resolution "
                f"{self.resolution:.2f} s from {self.rate:.1f} fresh connections/s "
                f"({self.endpoints} pod(s) answering)")


@dataclass(frozen=True)
class PropagationBound:
    pods: tuple[PodBound, ...]
    confidence: float
    max_resolution: float
    unnamed: bool = False
    """No response of the run named its pod."""

    @property
    def bounded(self) -> bool:
        return bool(self.pods) and all(p.bounded for p in self.pods)

    @property
    def value(self) -> float:
        """The figure: the largest per-pod bound (inf when not bounded)."""
        return max(p.value for p in self.pods) if self.bounded else math.inf

    @property
    def widest(self) -> PodBound | None:
        return max(self.pods, key=lambda p: p.value) if self.bounded else None

    def explain(self) -> str:
        if self.unnamed:
            return ("no response named its pod (x-drainsafe-pod): without it no arrival "
                    "can be placed on a pod")
        if not self.pods:
            return "no pod that served requests began terminating while verify watched"
        return "; ".join(f"pod {p.pod}: {p.detail}" for p in self.pods if not p.bounded)

    def what_to_run(self) -> str:
        """The run that would give a bound, in the terms of verify's flags."""
        if self.unnamed:
            return ("serve the pods with drainsafe serve/run or drainsafe.asgi, which name "
                    "the pod in x-drainsafe-pod (or give --pod-header with your own)")
        if not self.pods:
            return ("run verify with --namespace and --selector of the pods behind the URL "
                    "through a rollout (kubectl rollout restart)")
        advice: list[str] = []
        gaps = {p.gap for p in self.pods}
        if gaps & {Gap.NO_FRESH_ARRIVALS, Gap.TOO_COARSE}:
            rate = max(needed_probe_rate(p, self.confidence, self.max_resolution)
                       for p in self.pods if p.gap in (Gap.NO_FRESH_ARRIVALS, Gap.TOO_COARSE))
            advice.append(f"run verify with its probe load of fresh connections at "
                          f"--probe-rate {rate:g} or more (to a path the pods answer: "
                          "--probe-path), watching the pods through a rollout")
        if Gap.LOAD_ENDED in gaps:
            advice.append("keep verify running until the terminating pods are gone (a longer "
                          "--duration, or --linger S: the probe runs while verify watches)")
        if Gap.STOPPED_ANSWERING in gaps:
            longest = max(p.value for p in self.pods if p.gap is Gap.STOPPED_ANSWERING)
            advice.append(f"measure under a drain delay well above {longest:.1f} s, so the "
                          "pods answer until they are out of rotation")
        return "; ".join(advice)


def needed_probe_rate(pod: PodBound, confidence: float, max_resolution: float) -> float:
    """Fresh connections per second (all pods) that give this pod an acceptable resolution."""
    allowed = max(max_resolution * pod.last / (1 - max_resolution), RESOLUTION_FLOOR_SECONDS)
    per_pod = -math.log(1 - confidence) / allowed
    return float(max(math.ceil(per_pod * max(pod.endpoints, 1)), DEFAULT_PROBE_RATE))


def bound_pod(ev: Evidence, pod: str, *, confidence: float = CONFIDENCE,
              max_resolution: float = MAX_RESOLUTION,
              window: float = RATE_WINDOW_SECONDS) -> PodBound:
    t0 = ev.terminations[pod]
    answered = [a for a in ev.fresh if a.pod is not None]
    mine = [a.t for a in answered if a.pod == pod]
    last = max(max(mine, default=t0) - t0, 0.0)
    first = ev.fresh[0].t if ev.fresh else t0
    lo = max(t0 - window, first)
    span = t0 - lo
    own = sum(1 for t in mine if lo <= t < t0)
    if span <= 0 or own == 0:
        return PodBound(pod, t0, last, 0.0, 0, math.inf, confidence, Gap.NO_FRESH_ARRIVALS,
                        f"no request on a fresh connection reached it in the {window:g} s "
                        "before it began terminating")
    own_rate = own / span
    all_rate = sum(1 for a in answered if lo <= a.t < t0) / span
    z = -math.log(1 - confidence)
    endpoints = len({a.pod for a in answered if lo <= a.t < t0})
    while True:  # more pods answering -> a thinner share -> a later bound: to a fixed point
        rate = min(own_rate, all_rate / endpoints)
        horizon = t0 + last + z / rate
        seen = len({a.pod for a in answered if lo <= a.t <= horizon})
        if seen <= endpoints:
            break
        endpoints = seen
    result = PodBound(pod, t0, last, rate, endpoints, z / rate, confidence)
    if result.resolution > max(max_resolution * result.value, RESOLUTION_FLOOR_SECONDS):
        # Too coarse to tune from, whatever else the record shows.
        return _gap(result, Gap.TOO_COARSE,
                    f"resolution {result.resolution:.2f} s is more than {max_resolution:.0%} "
                    f"of its bound {result.value:.2f} s ({rate:.2f} fresh connections/s)")
    load_end = ev.fresh[-1].t
    if load_end < horizon:
        return _gap(result, Gap.LOAD_ENDED,
                    f"fresh connections stopped {load_end - t0:.2f} s after it began "
                    f"terminating, before its bound ({result.value:.2f} s)")
    failed = sum(1 for a in ev.fresh if a.failed and t0 + last < a.t <= horizon)
    if failed:
        return _gap(result, Gap.STOPPED_ANSWERING,
                    f"{failed} fresh connection(s) failed after its last fresh arrival "
                    f"({last:.2f} s) and before its bound ({result.value:.2f} s): a closed "
                    "listener hides whether it was still in rotation")
    return result


def _gap(b: PodBound, gap: Gap, detail: str) -> PodBound:
    return PodBound(b.pod, b.started, b.last, b.rate, b.endpoints, b.resolution,
                    b.confidence, gap, detail)


def bound(ev: Evidence, *, confidence: float = CONFIDENCE,
          max_resolution: float = MAX_RESOLUTION,
          window: float = RATE_WINDOW_SECONDS) -> PropagationBound:
    """Every terminating pod that served requests in the run, bounded or with its gap."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1 (got {confidence})")
    if not 0 < max_resolution < 1:
        raise ValueError(f"max resolution must be between 0 and 1 (got {max_resolution})")
    pods: list[PodBound] = []
    for pod in sorted(ev.terminations, key=lambda p: (ev.terminations[p], p)):
        if pod not in ev.served:
            continue  # never in rotation during the run (or unnamed): nothing to bound
        pods.append(bound_pod(ev, pod, confidence=confidence, max_resolution=max_resolution,
                              window=window))
    return PropagationBound(tuple(pods), confidence, max_resolution,
                            unnamed=bool(ev.terminations) and not ev.served)


def evidence(record: Record) -> Evidence:
    """The fresh connections of the user's load and of verify's probe, and the terminations."""
    fresh = [Arrival(r.start, r.pod, failed=r.pod is None and not r.outcome.ok)
             for r in _fresh(record)]
    fresh.sort(key=lambda a: a.t)
    terminations: dict[str, float] = {}
    for e in record.events:
        if e.kind == POD_TERMINATING and e.pod not in terminations:
            terminations[e.pod] = e.t
    served = frozenset(r.pod for r in (*record.requests, *record.probes) if r.pod)
    return Evidence(tuple(fresh), terminations, served)


def _fresh(record: Record) -> Iterable[RequestResult]:
    # Records from before `fresh` was kept: without keep-alive every request was fresh.
    every = record.settings.get("keepalive") is False
    for r in record.requests:
        if r.fresh or (r.fresh is None and every):
            yield r
    yield from record.probes
