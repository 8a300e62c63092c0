"""The simulator's clock: a heap of timed events, taken in time order (ties in the order
they were pushed), so a run is a pure function of its scenario and seed.

Events are per node and per pod (drain start, eviction attempt, pod gone, replacement
Ready, node back, surge node joins, the wave planner's retry after a deferral), never
per request (drainsafe.simulate.lifecycle).
"""

from __future__ import annotations

import heapq

# Event kinds
DRAIN, EVICT, GONE, READY, BACK, SURGE, WAVE = range(7)


class EventLoop:
    """The clock (`now`) and the events still to come."""

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, int, int]] = []
        self.seq = 0
        self.events = 0
        self.now = 0.0

    def push(self, t: float, kind: int, arg: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, arg))
