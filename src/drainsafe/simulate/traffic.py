"""Request arrival rate over virtual time: constant, or diurnal (a daily cosine).

rate(t) = mean * (1 + amplitude * cos(2 pi (hour(t) - peak_hour) / 24)),
hour(t) = start_hour + t / 3600. Arrivals are Poisson with this rate, so the count in an
interval is Poisson with the rate's integral as mean; both are closed forms here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from drainsafe.simulate.scenario import Diurnal

DAY_SECONDS = 86400.0
_OMEGA = 2 * math.pi / DAY_SECONDS


@dataclass(frozen=True)
class Rate:
    mean: float
    start_hour: float = 0.0
    diurnal: Diurnal | None = None

    def _phase(self, t: NDArray[np.float64] | float) -> NDArray[np.float64] | float:
        peak = self.diurnal.peak_hour if self.diurnal else 0.0
        return _OMEGA * (np.asarray(t) + (self.start_hour - peak) * 3600.0)

    def at(self, t: float) -> float:
        if self.diurnal is None:
            return self.mean
        return self.mean * (1 + self.diurnal.amplitude * math.cos(float(self._phase(t))))

    def integral(self, a: NDArray[np.float64], b: NDArray[np.float64]) -> NDArray[np.float64]:
        """Expected arrivals in [a, b), vectorised."""
        a = np.asarray(a, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
        base = self.mean * (b - a)
        if self.diurnal is None:
            return base
        wave = (np.sin(self._phase(b)) - np.sin(self._phase(a))) / _OMEGA
        return base + self.mean * self.diurnal.amplitude * wave

    def at_many(self, t: NDArray[np.float64]) -> NDArray[np.float64]:
        if self.diurnal is None:
            return np.full(np.shape(t), self.mean)
        return self.mean * (1 + self.diurnal.amplitude * np.cos(self._phase(t)))
