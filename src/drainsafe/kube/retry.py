"""Backoff with jitter, honouring Retry-After. Pure: the caller passes the random source."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """Capped exponential backoff with "equal jitter".

    Half of each step is fixed and half random, so retries from many clients spread out
    (the thundering-herd reason for jitter) yet never retry immediately. A server's
    Retry-After is a floor: we never come back earlier than it asked.
    """

    base: float = 0.5
    cap: float = 10.0
    factor: float = 2.0

    def delay(
        self, attempt: int, rng: random.Random, retry_after: float | None = None
    ) -> float:
        step = min(self.cap, self.base * self.factor ** max(attempt, 0))
        jittered = step / 2 + rng.uniform(0, step / 2)
        if retry_after is not None and retry_after > 0:
            # Spread clients told the same Retry-After by up to 10 % of it.
            return max(jittered, retry_after + rng.uniform(0, retry_after * 0.1))
        return jittered
