"""tune: settings from measurements, each number with the measurement behind it.

"Tune, do not guess" (seed: drain connections before pod termination): the drain delay must
cover the time from termination start to the last request reaching the pod; the shutdown
deadline must cover the longest request; the grace period holds both plus a buffer
(drainsafe.budget, the project's one budget model, does the arithmetic).

Measurements come from:
- the server: drainsafe serve/run export `drainsafe_last_request_after_drain_seconds` (drain
  start to the last request received) per pod, in /metrics and in the JSON phase log line at
  exit; `drainsafe_drain_delay_seconds` tells whether that figure was cut off by the listener
  closing (then it is only a lower bound), and a `*_request_duration_seconds` histogram, if
  exported, gives request durations;
- verify's record: request durations of successful requests; when responses name their pod
  (x-drainsafe-pod), the propagation bound of drainsafe.verify.propagation (from fresh
  connections only: verify's probe load and the user's new connections); and the
  terminating pods' drainsafe figures that verify read through the API server's pod proxy.

The propagation figure is an upper bound at a stated confidence. The servers' "last request
after the drain began" is a sample (it may be cut short by the listener closing, and requests
on reused connections are not routing evidence), so it only raises a bound, never makes one.
When no bound can be made tune raises CannotBound, naming the run that would make one.

Pure functions over plain data; reading files is in tune_cli.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from drainsafe.budget import DEFAULT_BUFFER_SECONDS, Budget, Recommendation, recommend
from drainsafe.verify.propagation import (
    CONFIDENCE,
    MAX_RESOLUTION,
    PropagationBound,
    bound,
    evidence,
)
from drainsafe.verify.record import ENDPOINT_NOT_READY, POD_TERMINATING, Record, percentile

LAST_REQUEST_METRIC = "drainsafe_last_request_after_drain_seconds"
DRAIN_DELAY_METRIC = "drainsafe_drain_delay_seconds"
DURATION_SUFFIX = "_request_duration_seconds"
MAX_REQUEST_ANNOTATION = "drainsafe.io/max-request-seconds"
SHUTDOWN_ANNOTATION = "drainsafe.io/shutdown-seconds"
"""The annotations drainsafe check reads (drainsafe.check.context)."""

CENSORED_FRACTION = 0.9
"""A last request this close to the configured drain delay may have been cut off by the
listener closing: traffic was probably still arriving, so the figure is a lower bound."""

TEMPLATE_KINDS = {"deployment": "Deployment", "statefulset": "StatefulSet",
                  "daemonset": "DaemonSet", "replicaset": "ReplicaSet"}


@dataclass(frozen=True)
class Sample:
    value: float
    source: str
    censored: bool = False


@dataclass
class Measurements:
    propagation: list[Sample] = field(default_factory=list)
    """The servers' own figures: seconds from drain start to the last request received
    (samples, lower bounds of the lag)."""
    routing: list[PropagationBound] = field(default_factory=list)
    """The bounds from verify's records (drainsafe.verify.propagation)."""
    durations: list[float] = field(default_factory=list)
    """Request durations (seconds) of requests that completed."""
    duration_sources: list[str] = field(default_factory=list)
    histogram_p99: list[Sample] = field(default_factory=list)
    endpoint_lag: list[float] = field(default_factory=list)
    """Terminating -> endpoint not ready/removed (control-plane part of propagation)."""
    notes: list[str] = field(default_factory=list)

    def merge(self, other: Measurements) -> None:
        self.propagation += other.propagation
        self.routing += other.routing
        self.durations += other.durations
        self.duration_sources += other.duration_sources
        self.histogram_p99 += other.histogram_p99
        self.endpoint_lag += other.endpoint_lag
        self.notes += other.notes


# -- reading measurements out of the inputs ------------------------------------------

def from_metrics_text(text: str, source: str) -> Measurements:
    """A Prometheus text dump of one drainsafe serve/run process (one pod)."""
    from prometheus_client.parser import text_string_to_metric_families

    found = Measurements()
    values: dict[str, float] = {}
    buckets: dict[str, list[tuple[float, float]]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name.endswith(DURATION_SUFFIX + "_bucket") and "le" in s.labels:
                    buckets.setdefault(s.name, []).append((float(s.labels["le"]), s.value))
                else:
                    values[s.name] = s.value
    except ValueError as exc:
        raise ValueError(f"{source}: not Prometheus text format ({exc})") from exc
    last = values.get(LAST_REQUEST_METRIC)
    if last is not None and not math.isnan(last):
        delay = values.get(DRAIN_DELAY_METRIC)
        found.propagation.append(_server_sample(last, delay, source))
    for name, rows in buckets.items():
        p99 = histogram_quantile(rows, 0.99)
        if p99 is not None:
            found.histogram_p99.append(Sample(p99, f"{source}: {name} p99 (bucket bound)"))
    if last is None and not buckets:
        found.notes.append(f"{source}: no drainsafe drain figures in these metrics")
    return found


def from_log_lines(lines: Iterable[str], source: str) -> Measurements:
    """JSON phase log lines of drainsafe serve/run ("event": "drainsafe.phase")."""
    found = Measurements()
    last: float | None = None
    delay: float | None = None
    for line in lines:
        line = line.strip()
        if not line.startswith("{") or "drainsafe.phase" not in line:
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if entry.get("event") != "drainsafe.phase":
            continue
        if isinstance(entry.get("last_request_after_drain_s"), int | float):
            last = float(entry["last_request_after_drain_s"])
        if isinstance(entry.get("drain_delay_s"), int | float):
            delay = float(entry["drain_delay_s"])
    if last is not None:
        found.propagation.append(_server_sample(last, delay, source))
    else:
        found.notes.append(f"{source}: no request arrived after the drain began "
                           "(or no drainsafe phase lines)")
    return found


def _server_sample(last: float, delay: float | None, source: str) -> Sample:
    censored = delay is not None and delay > 0 and last >= CENSORED_FRACTION * delay
    return Sample(last, f"{source}: last request {last:g}s after drain start", censored)


def from_record(record: Record, source: str, *, confidence: float = CONFIDENCE,
                max_resolution: float = MAX_RESOLUTION) -> Measurements:
    found = Measurements()
    ok = [r.total for r in record.requests if r.outcome.ok]
    found.durations += ok
    if ok:
        found.duration_sources.append(f"{source}: {len(ok)} completed requests")
    terminating = {e.pod: e.t for e in record.events if e.kind == POD_TERMINATING}
    if terminating:
        found.routing.append(bound(evidence(record), confidence=confidence,
                                   max_resolution=max_resolution))
    for m in record.pod_metrics:
        found.merge(from_metrics_text(m.text, f"{source}: pod {m.pod} /metrics at {m.t:.1f}s"))
    # The control-plane part of propagation: termination -> endpoint no longer ready.
    for event in record.events:
        if event.kind == ENDPOINT_NOT_READY and event.pod in terminating:
            found.endpoint_lag.append(event.t - terminating[event.pod])
    failed = record.failed
    if failed:
        found.notes.append(f"{source}: {failed} requests failed in this run; settings tuned "
                           "from it must be verified again")
    return found


def histogram_quantile(buckets: Sequence[tuple[float, float]], q: float) -> float | None:
    """Upper bound of the bucket holding quantile q (cumulative Prometheus buckets)."""
    rows = sorted(buckets)
    if not rows or rows[-1][1] <= 0:
        return None
    want = q * rows[-1][1]
    finite = [le for le, _ in rows if math.isfinite(le)]
    for le, count in rows:
        if count >= want:
            return le if math.isfinite(le) else (finite[-1] if finite else None)
    return None


# -- the recommendation ----------------------------------------------------------------

@dataclass(frozen=True)
class Figure:
    value: float
    basis: str


@dataclass(frozen=True)
class Tuning:
    recommendation: Recommendation
    propagation: Figure
    max_request: Figure
    probe_period: int
    probe_failure_threshold: int
    probe_timeout: int
    drain_via: str = "prestop"
    """'prestop': a preStop sleep holds traffic (an integer field, rounded up);
    'server': drainsafe serve/run's own --drain-delay (tenths of a second)."""
    warnings: tuple[str, ...] = ()

    @property
    def drain_delay_seconds(self) -> float:
        delay = self.recommendation.budget.drain_delay
        return float(math.ceil(delay)) if self.drain_via == "prestop" else delay

    @property
    def shutdown_seconds(self) -> float:
        return self.recommendation.budget.shutdown_deadline

    @property
    def grace_seconds(self) -> int:
        """An integer field; rounded up over the parts as they will be applied."""
        return math.ceil(round(self.drain_delay_seconds + self.shutdown_seconds
                               + self.recommendation.budget.buffer, 6))

    @property
    def applied(self) -> Budget:
        """The budget exactly as the patch and the server flags set it."""
        return Budget(grace=self.grace_seconds, drain_delay=self.drain_delay_seconds,
                      shutdown_deadline=self.shutdown_seconds,
                      buffer=self.recommendation.budget.buffer)


class NotEnoughData(ValueError):
    pass


class CannotBound(ValueError):
    """The inputs cannot bound the propagation lag within the stated resolution."""

    def __init__(self, why: str, what_to_run: str) -> None:
        super().__init__(f"the propagation lag is not bounded: {why}")
        self.why = why
        self.what_to_run = what_to_run


def tune(m: Measurements, *, margin: float = 0.2, buffer: float | None = None,
         max_request: float | None = None, min_propagation: float | None = None,
         drain_via: str = "prestop") -> Tuning:
    warnings = list(m.notes)
    propagation = _propagation_figure(m, min_propagation, warnings)
    longest = _request_figure(m, max_request)
    rec = recommend(propagation=propagation.value, max_request=longest.value, margin=margin,
                    buffer=DEFAULT_BUFFER_SECONDS if buffer is None else buffer)
    period, threshold, timeout = probe_timing(rec.budget.drain_delay)
    return Tuning(rec, propagation, longest, period, threshold, timeout, drain_via,
                  tuple(warnings))


def _propagation_figure(m: Measurements, floor: float | None, warnings: list[str]) -> Figure:
    samples = sorted(m.propagation, key=lambda s: s.value)
    censored = [s for s in samples if s.censored]
    if censored:
        warnings.append(
            f"{len(censored)} pod(s) still received traffic when their listener closed "
            "(last request within 10% of the drain delay): the real propagation lag is longer "
            "than they measured.")
    bounded = [b for b in m.routing if b.bounded]
    if m.routing and len(bounded) == len(m.routing):
        widest = max((b.widest for b in bounded if b.widest is not None),
                     key=lambda p: p.value)
        value = widest.value
        pods = sum(len(b.pods) for b in bounded)
        basis = (f"bound at {widest.confidence:.0%} per pod, the largest of {pods} pod(s); "
                 f"{widest.basis}")
        if samples and samples[-1].value > value:
            value = samples[-1].value
            basis += f"; raised to a server's own figure ({samples[-1].source})"
        if m.endpoint_lag:
            basis += f"; endpoints turned not-ready up to {max(m.endpoint_lag):.3f}s after"
        if floor is not None and floor > value:
            return Figure(floor, f"--min-propagation {floor:g}s (measured {basis})")
        return Figure(value, basis)
    if m.routing:
        unbounded = [b for b in m.routing if not b.bounded]
        why = "; ".join(b.explain() for b in unbounded)
        what = "; ".join(dict.fromkeys(b.what_to_run() for b in unbounded))
    elif samples:
        why = ("the servers' figures are samples of the last request after the drain "
               "began, not bounds")
        what = ("give the verify record of a rollout (verify --namespace --selector --out "
                "DIR, with its probe load)")
    else:
        why = what = ""
    if floor is not None:
        if why:
            warnings.append(f"the propagation lag is not bounded ({why}); the figure is the "
                            f"declared --min-propagation. To bound it: {what}.")
        top = samples[-1].value if samples else 0.0
        if top > floor:
            return Figure(top, f"a server's own figure above --min-propagation "
                               f"({samples[-1].source}); not a bound")
        return Figure(floor, f"--min-propagation {floor:g}s (not measured as a bound)")
    if not why:
        raise NotEnoughData(
            "no propagation measurement: give the verify record of a rollout "
            "(verify --namespace --selector --out DIR), or a floor with --min-propagation")
    raise CannotBound(why, what)


def _request_figure(m: Measurements, declared: float | None) -> Figure:
    if declared is not None:
        return Figure(declared, f"declared --max-request {declared:g}s")
    candidates: list[Figure] = []
    if m.durations:
        values = sorted(m.durations)
        p99 = percentile(values, 99) or 0.0
        candidates.append(Figure(p99, f"p99 of {len(values)} completed requests: {p99:.3f}s "
                                       f"(max {values[-1]:.3f}s)"))
    for s in m.histogram_p99:
        candidates.append(Figure(s.value, s.source))
    if not candidates:
        raise NotEnoughData("no request durations: give a verify record (--from) or "
                            "declare the longest request with --max-request")
    return max(candidates, key=lambda f: f.value)


def probe_timing(drain_delay: float) -> tuple[int, int, int]:
    """Readiness probe (periodSeconds, failureThreshold, timeoutSeconds) that notices the
    drain well inside the drain delay: period x threshold <= a third of the delay, so
    controllers that re-check readiness stop routing before the listener closes (seed:
    "make it fail once shutdown begins"). timeoutSeconds must stay below periodSeconds."""
    period = min(max(int(drain_delay // 3), 1), 10)
    return period, 1, 1


# -- rendering the patch ---------------------------------------------------------------

def parse_workload(text: str) -> tuple[str, str]:
    kind, sep, name = text.partition("/")
    canonical = TEMPLATE_KINDS.get(kind.lower().rstrip("s")) or TEMPLATE_KINDS.get(kind.lower())
    if not sep or not name or canonical is None:
        known = ", ".join(sorted(TEMPLATE_KINDS))
        raise ValueError(f"--workload {text!r}: expected KIND/NAME with KIND one of {known}")
    return canonical, name


def patch_body(t: Tuning, container: str, *, drain_via: str = "prestop") -> dict[str, Any]:
    """A strategic merge patch for the workload's pod template (containers merge by name)."""
    container_patch: dict[str, Any] = {
        "name": container,
        "readinessProbe": {"periodSeconds": t.probe_period,
                           "failureThreshold": t.probe_failure_threshold,
                           "timeoutSeconds": t.probe_timeout},
    }
    if drain_via == "prestop":
        # The sleep action needs no shell in the image (GA in Kubernetes 1.34, beta from
        # 1.30): kubernetes.io/docs/concepts/containers/container-lifecycle-hooks/
        seconds = math.ceil(t.drain_delay_seconds)
        container_patch["lifecycle"] = {"preStop": {"sleep": {"seconds": seconds}}}
    return {"spec": {"template": {
        "metadata": {"annotations": {
            MAX_REQUEST_ANNOTATION: f"{math.ceil(t.max_request.value)}",
            SHUTDOWN_ANNOTATION: f"{t.shutdown_seconds:g}",
        }},
        "spec": {"terminationGracePeriodSeconds": t.grace_seconds,
                 "containers": [container_patch]},
    }}}


def server_flags(t: Tuning, drain_via: str) -> str:
    """What the server itself must be told (a patch cannot edit args safely)."""
    flags = f"--shutdown-timeout {t.shutdown_seconds:g}"
    if drain_via == "server":
        flags = f"--drain-delay {t.drain_delay_seconds:g} " + flags
    return flags


def explain(t: Tuning) -> list[tuple[str, str, str]]:
    """(setting, value, basis) rows a person reads before applying the patch."""
    b = t.recommendation.budget
    margin = f"+{t.recommendation.margin:.0%}"
    applied = t.applied
    return [
        ("drain delay", f"{t.drain_delay_seconds:g}s",
         f"propagation {t.propagation.value:.3f}s {margin} -> {b.drain_delay:g}s; "
         f"{t.propagation.basis}"),
        ("shutdown deadline", f"{t.shutdown_seconds:g}s",
         f"longest request {t.max_request.value:.3f}s {margin} -> {b.shutdown_deadline:g}s; "
         f"{t.max_request.basis}"),
        ("terminationGracePeriodSeconds", f"{t.grace_seconds}s",
         f"{applied.arithmetic()} (an integer field, rounded up)"),
        ("readinessProbe", f"period {t.probe_period}s x {t.probe_failure_threshold}, "
         f"timeout {t.probe_timeout}s",
         f"fails within {t.probe_period * t.probe_failure_threshold}s of drain start, "
         f"inside the {t.drain_delay_seconds:g}s drain delay"),
    ]
