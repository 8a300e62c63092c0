"""A capacity floor per workload: the fewest Ready replicas (whole Ready groups for a
LeaderWorkerSet) a drain may take a workload to, beside its PodDisruptionBudgets.

A NodeMaintenance's `spec.capacityFloor` (issue 30: "a capacity floor per workload (never
below desired by default)"): a default, "100%" of desired unless said otherwise, and
per-workload values, the first that matches a workload (by kind, namespace and name, or by
a label selector on the workload's own labels) winning. A percent is of the workload's
desired replicas, rounded up, as a PodDisruptionBudget's minAvailable percent is
(pdb.scaled_value, intstr GetScaledValueFromIntOrPercent with roundUp=true: kubernetes
pkg/controller/disruption/disruption.go getExpectedScale and its callers), so a floor
never rounds down below what was asked; it is at most desired.

What the drain does with it (drain.strategy, drain.plan): a surge keeps Ready at desired,
so it is always within the floor. Evict-first (break before make) takes Ready to desired
minus one while each replacement starts; it is planned only when that stays at or above
the floor: a workload that cannot surge (no room for its stand-ins, a rollout in
progress, no controller that can surge) and whose floor forbids evict-first refuses
("below-floor"), and one whose surge has no room but whose floor allows evict-first is
drained evict-first, one pod (group) at a time. The floor only ever refuses more: every
eviction still goes through its PodDisruptionBudgets (drain.evict), never around them.
`drainsafe drain` has no floor (None), as before.

Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from drainsafe.kube.objects import WorkloadRef
from drainsafe.labels import Selector
from drainsafe.pdb import IntOrPercent, scaled_value

DEFAULT_FLOOR: IntOrPercent = "100%"


@dataclass(frozen=True)
class FloorRule:
    """One workload (kind, namespace, name; an empty part matches any) or those a selector
    matches, and its floor."""

    floor: IntOrPercent
    kind: str = ""
    namespace: str = ""
    name: str = ""
    selector: Selector | None = None

    def matches(self, ref: WorkloadRef, labels: Mapping[str, str]) -> bool:
        if self.kind and self.kind != ref.kind:
            return False
        if self.namespace and self.namespace != ref.namespace:
            return False
        if self.name and self.name != ref.name:
            return False
        return self.selector is None or self.selector.matches(labels)


@dataclass(frozen=True)
class CapacityFloors:
    default: IntOrPercent = DEFAULT_FLOOR
    rules: tuple[FloorRule, ...] = ()

    def value(self, ref: WorkloadRef, labels: Mapping[str, str]) -> IntOrPercent:
        return next((r.floor for r in self.rules if r.matches(ref, labels)), self.default)

    def floor(self, ref: WorkloadRef, labels: Mapping[str, str], replicas: int) -> int:
        """The fewest Ready replicas (groups) allowed, of `replicas` desired."""
        return min(scaled_value(self.value(ref, labels), replicas, round_up=True), replicas)

    def allows_evict_first(self, ref: WorkloadRef, labels: Mapping[str, str],
                           replicas: int) -> bool:
        """Evict-first keeps `replicas - 1` Ready while a replacement starts."""
        return replicas - 1 >= self.floor(ref, labels, replicas)
