"""The guard's two clocks, injected so its logic never reads the time itself.

- `wall`: seconds since the epoch. Everything that is compared with what the API server
  or another replica wrote is wall time: a pod's Ready lastTransitionTime (Available,
  podutil.IsPodAvailable), the start of a hold on the pod (every replica measures the hold
  limit from that one stored value), Event timestamps.
- `monotonic`: durations this process measures on its own and never shares: the window
  in which a pod this replica let go still counts as gone, a review's latency. A wall
  clock stepped by NTP must not stretch or shrink those.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Clock:
    wall: Callable[[], float] = time.time
    monotonic: Callable[[], float] = time.monotonic
