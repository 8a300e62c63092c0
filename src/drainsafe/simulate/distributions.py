"""Duration distributions: request durations, propagation delays, replacement start-up.

Each distribution can be sampled with numpy and, for request durations, answers the one
integral the request counting needs: the integrated survival I(w) = E[(D - w)+], i.e. the
expected time by which a request outlives a point w seconds after it started. For Poisson
arrivals at rate r that stop at time a, the number still running at a later time a + w is
Poisson with mean r * I(w). Tabulating I once per distribution makes every lookup a cheap
np.interp, whatever the shape (lognormal or an empirical histogram).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

Z99 = 2.3263478740408408
"""Standard normal quantile at 0.99: a lognormal with median m has p99 = m * exp(Z99 * sigma)."""

FloatArray = NDArray[np.float64]

_TABLE_POINTS = 4096


@dataclass(frozen=True)
class Constant:
    value: float

    def sample(self, rng: np.random.Generator, n: int) -> FloatArray:
        return np.full(n, self.value, dtype=np.float64)

    @property
    def mean(self) -> float:
        return self.value

    @property
    def upper(self) -> float:
        """A value no sample exceeds (or, for unbounded shapes, a far tail quantile)."""
        return self.value

    def describe(self) -> str:
        return f"{self.value:g}s"


@dataclass(frozen=True)
class Uniform:
    low: float
    high: float

    def sample(self, rng: np.random.Generator, n: int) -> FloatArray:
        return rng.uniform(self.low, self.high, n)

    @property
    def mean(self) -> float:
        return (self.low + self.high) / 2

    @property
    def upper(self) -> float:
        return self.high

    def describe(self) -> str:
        return f"uniform {self.low:g}-{self.high:g}s"


@dataclass(frozen=True)
class LogNormal:
    """A lognormal fixed by its median and 99th percentile (the figures people measure).

    `cap` clips it: no value exceeds it (a generation that hits max_tokens or the client's
    timeout ends there), which keeps the far tail from dominating a zero-failure search.
    """

    p50: float
    p99: float
    cap: float | None = None

    @property
    def mu(self) -> float:
        return math.log(self.p50)

    @property
    def sigma(self) -> float:
        return math.log(self.p99 / self.p50) / Z99

    def sample(self, rng: np.random.Generator, n: int) -> FloatArray:
        out = rng.lognormal(self.mu, self.sigma, n)
        return out if self.cap is None else np.minimum(out, self.cap)

    @property
    def mean(self) -> float:
        full = math.exp(self.mu + self.sigma**2 / 2)
        if self.cap is None:
            return full
        # E[min(D, c)] = E[D] Phi((ln c - mu - sigma^2) / sigma) + c (1 - Phi((ln c - mu) / sigma))
        z = (math.log(self.cap) - self.mu) / self.sigma
        return full * _phi(z - self.sigma) + self.cap * (1 - _phi(z))

    @property
    def upper(self) -> float:
        # p99.9999: far enough out that the integrated survival beyond it is negligible.
        tail = math.exp(self.mu + 4.75 * self.sigma)
        return tail if self.cap is None else min(tail, self.cap)

    def cdf(self, x: float) -> float:
        if x <= 0:
            return 0.0
        if self.cap is not None and x >= self.cap:
            return 1.0
        return _phi((math.log(x) - self.mu) / self.sigma)

    def describe(self) -> str:
        capped = "" if self.cap is None else f" max {self.cap:g}s"
        return f"lognormal p50 {self.p50:g}s p99 {self.p99:g}s{capped}"


def _phi(z: float) -> float:
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))


@dataclass(frozen=True)
class Histogram:
    """An empirical distribution: bin edges (seconds) and counts; uniform within a bin."""

    edges: tuple[float, ...]
    counts: tuple[float, ...]
    _cum: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        total = float(sum(self.counts))
        cum = [0.0]
        for c in self.counts:
            cum.append(cum[-1] + c / total)
        object.__setattr__(self, "_cum", tuple(cum))

    def sample(self, rng: np.random.Generator, n: int) -> FloatArray:
        out: FloatArray = np.interp(rng.random(n), np.array(self._cum), np.array(self.edges))
        return out

    @property
    def mean(self) -> float:
        total = float(sum(self.counts))
        return sum(
            c * (lo + hi) / 2
            for c, lo, hi in zip(self.counts, self.edges, self.edges[1:], strict=False)
        ) / total

    @property
    def upper(self) -> float:
        return self.edges[-1]

    def cdf(self, x: float) -> float:
        if x <= self.edges[0]:
            return 0.0
        if x >= self.edges[-1]:
            return 1.0
        i = bisect_right(self.edges, x) - 1
        lo, hi = self.edges[i], self.edges[i + 1]
        return self._cum[i] + (self._cum[i + 1] - self._cum[i]) * (x - lo) / (hi - lo)

    def describe(self) -> str:
        return f"histogram of {sum(self.counts):g} samples, {self.edges[0]:g}-{self.edges[-1]:g}s"


Distribution = Constant | Uniform | LogNormal | Histogram


@dataclass(frozen=True)
class SurvivalTable:
    """I(w) = E[(D - w)+] tabulated on [0, upper]; zero beyond, I(0) = mean for w <= 0."""

    step: float
    values: FloatArray
    mean: float

    def at(self, w: FloatArray) -> FloatArray:
        """Vectorised I(w); for w < 0 it is mean - w (a request started |w| s before)."""
        w = np.asarray(w, dtype=np.float64)
        grid_top = self.step * (len(self.values) - 1)
        inside = np.interp(np.clip(w, 0.0, grid_top), self._grid(), self.values)
        return np.where(w < 0, self.mean - w, inside)

    def at_scalar(self, w: float) -> float:
        if w <= 0:
            return self.mean - w
        i = int(w / self.step)
        if i >= len(self.values) - 1:
            return 0.0
        frac = w / self.step - i
        return float(self.values[i] * (1 - frac) + self.values[i + 1] * frac)

    def _grid(self) -> FloatArray:
        return np.arange(len(self.values), dtype=np.float64) * self.step


def survival_table(dist: Distribution) -> SurvivalTable:
    """Tabulate I(w) = integral from w to infinity of P(D > x) dx."""
    top = max(dist.upper, 1e-9)
    step = top / (_TABLE_POINTS - 1)
    grid = np.arange(_TABLE_POINTS, dtype=np.float64) * step
    if isinstance(dist, Constant):
        values = np.maximum(dist.value - grid, 0.0)
    elif isinstance(dist, Uniform):
        span = max(dist.high - dist.low, 1e-12)
        surv = np.clip((dist.high - grid) / span, 0.0, 1.0)
        values = _integrate_tail(surv, step)
    else:
        surv = 1.0 - np.array([dist.cdf(float(x)) for x in grid])
        values = _integrate_tail(surv, step)
    # The tabulated integral of the survival at 0 is the mean; use it so that I is continuous.
    return SurvivalTable(step=step, values=values, mean=float(values[0]))


def _integrate_tail(surv: FloatArray, step: float) -> FloatArray:
    """Trapezoid integral of surv from each grid point to the end of the grid."""
    pieces = (surv[:-1] + surv[1:]) * step / 2
    tail = np.concatenate([np.cumsum(pieces[::-1])[::-1], [0.0]])
    return tail
