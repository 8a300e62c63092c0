"""Propagation delay: how long after an EndpointSlice change a consumer acts on it.

In a cluster, endpoint removal reaches each kube-proxy and ingress controller a few
seconds after the pod starts terminating (the seeds give 5-15 s); meanwhile traffic still
arrives. Each consumer here draws its own delay once (fixed, or uniform in a range) and
applies every snapshot that long after it was observed, in order.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Propagation:
    low: float
    high: float

    def __post_init__(self) -> None:
        if self.low < 0 or self.high < self.low:
            raise ValueError(f"propagation range {self.low:g}..{self.high:g}s is not valid "
                             "(need 0 <= low <= high)")

    @classmethod
    def fixed(cls, seconds: float) -> Propagation:
        return cls(seconds, seconds)

    @classmethod
    def parse(cls, text: str) -> Propagation:
        """'1.5' (fixed) or '0.5-3' (uniform per consumer)."""
        try:
            if "-" in text.strip().lstrip("-"):
                low, high = text.split("-", 1)
                return cls(float(low), float(high))
            return cls.fixed(float(text))
        except ValueError as exc:
            raise ValueError(f"propagation {text!r}: expected seconds like 1.5 or 0.5-3 "
                             f"({exc})") from None

    def draw(self, rng: random.Random) -> float:
        return self.low if self.low == self.high else rng.uniform(self.low, self.high)


class DelayedFeed(Generic[T]):
    """Applies each pushed snapshot `delay` seconds later, in order, one at a time."""

    def __init__(self, delay: float, apply: Callable[[T], Awaitable[None]]) -> None:
        self.delay = delay
        self._apply = apply
        self._pending: deque[tuple[float, T]] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.applied = 0

    def push(self, snapshot: T) -> None:
        loop = asyncio.get_running_loop()
        self._pending.append((loop.time() + self.delay, snapshot))
        self._wake.set()
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._pending:
                self._wake.clear()
                await self._wake.wait()
                continue
            due, snapshot = self._pending.popleft()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            # Snapshots are whole states: of those already due, only the newest matters.
            while self._pending and self._pending[0][0] <= loop.time():
                _, snapshot = self._pending.popleft()
            await self._apply(snapshot)
            self.applied += 1

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
