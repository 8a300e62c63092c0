"""Counting requests, vectorised, per deleted pod and per capacity interval.

Nothing here loops over requests. For a pod deleted at t0, consumer c sending it r_c requests
per second (the lifecycle's pod_rate: c's share of the workload's rate over the pods c routes
to) and stopping after its propagation delay p_c, listener closed at `close` and stragglers
cut at `cut` (both seconds after t0, from drainsafe.budget.Budget):

- refused/reset in the race: arrivals in [close, p_c), Poisson with mean
  sum_c r_c max(p_c - close, 0);
- cut (at the shutdown deadline or by SIGKILL): requests accepted until a_c = min(close, p_c)
  and still running at `cut`, Poisson with mean sum_c r'_c I(cut - a_c), where
  I(w) = E[(D - w)+] is the duration's integrated survival and r'_c the part of r_c the pod
  could accept (lifecycle's accepted_rate);
- rejected for lack of capacity: while k pods are Ready with at most C requests each, offered
  concurrency is rate * E[D] (Little's law); the share above k * C is rejected, and with no
  Ready pod all of it is (a fluid approximation, see docs/simulate.md).

The lifecycle already decided, per pod, whether anything was still running at `cut` (it drew
the pod's exit time from the same Poisson law), so the cut count is drawn conditionally on
that: zero when the pod exited early, zero-truncated Poisson when it lasted until `cut`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from drainsafe.simulate.lifecycle import Lifecycle
from drainsafe.simulate.traffic import Rate

CAUSES = ("race", "cut_deadline", "cut_sigkill", "capacity")
"""race: refused or reset because the pod stopped listening before its traffic stopped;
cut_deadline: ended by the server at its shutdown deadline (drainsafe's explicit error event);
cut_sigkill: killed mid-request by SIGKILL; capacity: rejected, no Ready pod had room."""

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class FailureEvents:
    """Failures as points in time (for the picture): time, count, cause index into CAUSES."""

    time: FloatArray
    count: NDArray[np.int64]
    cause: NDArray[np.int64]


@dataclass(frozen=True)
class Counts:
    requests: int
    failures: dict[str, int]
    expected: dict[str, float]
    """The Poisson means behind `failures` (given the lifecycle that happened)."""
    events: FailureEvents


def count_requests(lc: Lifecycle, rng: np.random.Generator) -> Counts:
    n = len(lc.deleted_at)
    times = lc.times
    close = np.array([t.close for t in times])[lc.workload] if n else np.zeros(0)
    cut = np.array([t.cut for t in times])[lc.workload] if n else np.zeros(0)
    by_deadline = np.array([t.cut_by_deadline for t in times], dtype=bool)[lc.workload] \
        if n else np.zeros(0, dtype=bool)

    race_mean = (lc.pod_rate * np.maximum(lc.propagation - close[:, None], 0.0)).sum(axis=1)
    # Only requests the pod accepted can be in flight (a full pod rejects the rest).
    accepted = lc.accepted_rate

    accepted_until = np.minimum(close[:, None], lc.propagation)
    cut_mean = np.zeros(n)
    for w, table in enumerate(lc.survival):
        rows = lc.workload == w
        if rows.any():
            lag = cut[rows, None] - accepted_until[rows]
            cut_mean[rows] = (accepted[rows] * table.at(lag)).sum(axis=1)

    race = rng.poisson(race_mean)
    lasted = lc.gone_after >= cut - 1e-9
    cut_n = np.where(lasted & (cut > close), _zero_truncated_poisson(cut_mean, rng), 0)
    # A server with no drain at all (cut == close) loses every request in flight at SIGTERM.
    instant = cut <= close
    cut_n = np.where(instant, rng.poisson(cut_mean), cut_n)

    cap_t, cap_n, cap_mean, total_mean = _capacity(lc, rng)
    total = int(rng.poisson(total_mean))

    cut_dl = int(cut_n[by_deadline].sum())
    cut_kill = int(cut_n[~by_deadline].sum())
    failures = {
        "race": int(race.sum()),
        "cut_deadline": cut_dl,
        "cut_sigkill": cut_kill,
        "capacity": int(cap_n.sum()),
    }
    expected = {
        "race": float(race_mean.sum()),
        "cut_deadline": float(cut_mean[by_deadline].sum()),
        "cut_sigkill": float(cut_mean[~by_deadline].sum()),
        "capacity": cap_mean,
    }
    cut_cause = np.where(by_deadline, 1, 2)
    events = FailureEvents(
        time=np.concatenate([lc.deleted_at, lc.deleted_at + cut, cap_t]),
        count=np.concatenate([race, cut_n, cap_n]).astype(np.int64),
        cause=np.concatenate([np.zeros(n, dtype=np.int64), cut_cause,
                              np.full(len(cap_t), 3, dtype=np.int64)]),
    )
    return Counts(requests=max(total, sum(failures.values())), failures=failures,
                  expected=expected, events=events)


def _capacity(lc: Lifecycle, rng: np.random.Generator
              ) -> tuple[FloatArray, NDArray[np.int64], float, float]:
    """Rejections per interval of constant Ready counts; also the expected total arrivals."""
    s = lc.scenario
    starts = lc.ready_times
    ends = np.append(starts[1:], lc.end)
    mids = (starts + ends) / 2
    all_t: list[FloatArray] = []
    all_n: list[NDArray[np.int64]] = []
    mean_sum = 0.0
    total = 0.0
    for w, wl in enumerate(s.workloads):
        rate = Rate(wl.rate, s.start_hour, wl.diurnal)
        arrivals = rate.integral(starts, ends)
        total += float(arrivals.sum())
        ready = lc.ready_counts[:, w].astype(np.float64)
        offered = rate.at_many(mids) * wl.durations.mean
        if wl.max_concurrency is None:
            frac = np.where(ready > 0, 0.0, 1.0)
        else:
            room = ready * wl.max_concurrency
            with np.errstate(divide="ignore", invalid="ignore"):
                frac = np.where(offered > 0, np.clip(1.0 - room / offered, 0.0, 1.0), 0.0)
            frac = np.where(ready > 0, frac, 1.0)
        mean = arrivals * frac
        keep = mean > 0
        mean_sum += float(mean.sum())
        all_t.append(mids[keep])
        all_n.append(rng.poisson(mean[keep]).astype(np.int64))
    return (np.concatenate(all_t) if all_t else np.zeros(0),
            np.concatenate(all_n) if all_n else np.zeros(0, dtype=np.int64),
            mean_sum, total)


def _zero_truncated_poisson(mean: FloatArray, rng: np.random.Generator) -> NDArray[np.int64]:
    """Poisson(mean) conditioned on >= 1, by inversion (means near 0 give 1, as they should)."""
    out = np.ones(len(mean), dtype=np.int64)
    big = mean > 30
    out[big] = np.maximum(rng.poisson(mean[big]), 1)
    small = ~big & (mean > 0)
    if not small.any():
        return out
    m = mean[small]
    p0 = np.exp(-m)
    u = rng.uniform(p0, 1.0)
    k = np.zeros(len(m), dtype=np.int64)
    term = p0.copy()
    cdf = p0.copy()
    active = u > cdf
    step = 0
    while active.any() and step < 200:
        step += 1
        term = term * m / step
        cdf = cdf + term
        k = np.where(active, step, k)
        active = active & (u > cdf)
    out[small] = np.maximum(k, 1)
    return out
