"""What each workload of a drain serves with, read on every change the drain's watch sees.

A reading is the drain's own measure (drain.nodewatch.NodeWatch.capacity, which counts
Available pods, or whole Ready groups for a LeaderWorkerSet through
kube.objects.lws_ready_groups) against the desired count the plan resolved
(drain.workloads.WorkloadSelector.replicas: the recorded one on a rerun). It is taken from
the drain's pod informers as their events arrive, not by polling: no second watch and no
second definition of Ready. A NodeMaintenance keeps the lowest reading of its operation
(maintenance.capacity). Pure but for the watch's caches it reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from drainsafe.drain.nodewatch import NodeWatch
from drainsafe.drain.workloads import WorkloadSelector

Unit = Literal["pods", "groups"]


@dataclass(frozen=True)
class CapacityReading:
    workload: str  # "Kind/namespace/name"
    ready: int  # Available pods, or whole Ready groups
    desired: int
    unit: Unit = "pods"


CapacityHook = Callable[[CapacityReading], None]


def readings(watch: NodeWatch, selectors: Iterable[WorkloadSelector],
             namespace: str) -> list[CapacityReading]:
    """The readings of the workloads in `namespace` that want any replicas."""
    return [CapacityReading(s.key, watch.capacity(s), s.replicas,
                            "pods" if s.group_size is None else "groups")
            for s in selectors if s.namespace == namespace and s.replicas > 0]
