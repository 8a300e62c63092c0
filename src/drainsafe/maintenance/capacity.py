"""The lowest capacity a NodeMaintenance saw: status.lowestCapacity and its printer column.

Each node's drain reads, on every change of the pods it watches, what each affected
workload serves with against its desired count (drain.capacity: Available pods, or whole
Ready groups for a LeaderWorkerSet). The operation keeps the lowest of those readings, as
a fraction of desired (capped at 1: a surge above desired is not more than full capacity),
with the workload, the node whose drain read it, and when. It lives in the status, so a
new leader starts from the minimum the last one wrote and only ever lowers it. The
percent is rounded down, so anything below desired never reads 100%. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from drainsafe.drain.capacity import CapacityReading


@dataclass(frozen=True)
class LowestCapacity:
    ready: int
    desired: int
    workload: str
    unit: str = "pods"
    node: str = ""
    at: str = ""  # RFC 3339

    @property
    def fraction(self) -> Fraction:
        return min(Fraction(self.ready, max(self.desired, 1)), Fraction(1))

    @property
    def percent(self) -> int:
        return int(self.fraction * 100)  # floor

    def as_status(self) -> dict[str, Any]:
        return {"percent": f"{self.percent}%", "ready": self.ready, "desired": self.desired,
                "unit": self.unit, "workload": self.workload, "node": self.node,
                "at": self.at}

    @classmethod
    def of(cls, reading: CapacityReading, *, node: str, at: str) -> LowestCapacity:
        return cls(reading.ready, reading.desired, reading.workload, reading.unit, node, at)


def from_status(status: Mapping[str, Any]) -> LowestCapacity | None:
    raw = status.get("lowestCapacity")
    if not isinstance(raw, Mapping):
        return None
    try:
        return LowestCapacity(int(raw["ready"]), int(raw["desired"]), str(raw["workload"]),
                              str(raw.get("unit") or "pods"), str(raw.get("node") or ""),
                              str(raw.get("at") or ""))
    except (KeyError, TypeError, ValueError):
        return None


def lowest(a: LowestCapacity | None, b: LowestCapacity | None) -> LowestCapacity | None:
    """The lower of two; on a tie the first (the one seen first keeps its place)."""
    if a is None:
        return b
    if b is None or a.fraction <= b.fraction:
        return a
    return b
