"""PodDisruptionBudget arithmetic, as the disruption controller does it.

Transcribed in meaning (not code) from kubernetes/kubernetes
pkg/controller/disruption/disruption.go (getExpectedPodCount, updatePdbStatus)
and apimachinery intstr.GetScaledValueFromIntOrPercent:

- maxUnavailable (int or %): expected = sum of the owning controllers' scales;
  desiredHealthy = expected - scaled(maxUnavailable, expected, round up), floored at 0.
- minAvailable int: desiredHealthy = minAvailable; expected = number of matched pods.
- minAvailable %: expected = sum of scales;
  desiredHealthy = scaled(minAvailable, expected, round up).
- disruptionsAllowed = currentHealthy - desiredHealthy, and 0 when that is negative
  or when expected <= 0 (a PDB matching no pods yet is kept safe).
- Groups (a LeaderWorkerSet, kubernetes-sigs/lws v0.10.0): the budget still counts pods
  (leaders and workers are owned by StatefulSets whose scales add up to groups x size), but
  one eviction under restartPolicy RecreateGroupOnPodRestart takes the whole group
  (pkg/controllers/pod_controller.go deletes the leader), so a budget is read in groups.

Pure functions of plain data; no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Literal

IntOrPercent = int | str
UnhealthyPodEvictionPolicy = Literal["IfHealthyBudget", "AlwaysAllow"]

_PERCENT = re.compile(r"^(\d+)%$")


class BudgetSpecError(ValueError):
    """A PDB field that the API server would reject."""


def scaled_value(value: IntOrPercent, total: int, *, round_up: bool) -> int:
    """intstr.GetScaledValueFromIntOrPercent: an int is itself, "N%" is N% of total."""
    if isinstance(value, bool):
        raise BudgetSpecError(f"invalid value {value!r}: expected an integer or a percentage")
    if isinstance(value, int):
        return value
    match = _PERCENT.match(value.strip()) if isinstance(value, str) else None
    if match is None:
        raise BudgetSpecError(f"invalid value {value!r}: a string must be a percentage like '50%'")
    scaled = int(match.group(1)) * total / 100
    return math.ceil(scaled) if round_up else math.floor(scaled)


def is_percent(value: IntOrPercent) -> bool:
    return isinstance(value, str)


@dataclass(frozen=True)
class PdbSpec:
    """The parts of a PodDisruptionBudget's spec that decide its arithmetic."""

    min_available: IntOrPercent | None = None
    max_unavailable: IntOrPercent | None = None
    unhealthy_pod_eviction_policy: UnhealthyPodEvictionPolicy = "IfHealthyBudget"

    def __post_init__(self) -> None:
        if self.min_available is not None and self.max_unavailable is not None:
            raise BudgetSpecError("minAvailable and maxUnavailable cannot both be set")

    @classmethod
    def from_manifest(cls, spec: dict[str, object]) -> PdbSpec:
        policy = spec.get("unhealthyPodEvictionPolicy") or "IfHealthyBudget"
        min_available = spec.get("minAvailable")
        max_unavailable = spec.get("maxUnavailable")
        if cls is PdbSpec and type(policy) is str and type(min_available) in _SCALARS \
                and type(max_unavailable) in _SCALARS:
            # A fleet's budgets repeat a few specs: each distinct one is checked once.
            return _from_fields(min_available, max_unavailable, policy)
        return cls._from_fields(min_available, max_unavailable, policy)

    @classmethod
    def _from_fields(cls, min_available: object, max_unavailable: object,
                     policy: object) -> PdbSpec:
        if policy not in ("IfHealthyBudget", "AlwaysAllow"):
            raise BudgetSpecError(f"unknown unhealthyPodEvictionPolicy {policy!r}")
        return cls(
            min_available=_int_or_percent(min_available, "minAvailable"),
            max_unavailable=_int_or_percent(max_unavailable, "maxUnavailable"),
            unhealthy_pod_eviction_policy=policy,
        )

    @property
    def uses_scale(self) -> bool:
        """Whether expected pods come from the controllers' scale (not from the pod count)."""
        return self.max_unavailable is not None or (
            self.min_available is not None and is_percent(self.min_available)
        )


_SCALARS = (int, str, type(None))
"""Field types whose values are hashable and compared by type too (True is not 1 here)."""


@lru_cache(maxsize=4096, typed=True)
def _from_fields(min_available: object, max_unavailable: object, policy: str) -> PdbSpec:
    return PdbSpec._from_fields(min_available, max_unavailable, policy)


def _int_or_percent(value: object, field: str) -> IntOrPercent | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise BudgetSpecError(f"{field}: expected an integer or a percentage, got {value!r}")
    if isinstance(value, str):
        # validates the form; above 100% is refused as the API server refuses it
        # (pkg/apis/policy/validation ValidatePodDisruptionBudgetSpec: IsNotMoreThan100Percent)
        if scaled_value(value, 100, round_up=True) > 100:
            raise BudgetSpecError(f"{field}: must not be greater than 100%, got {value!r}")
    elif value < 0:
        raise BudgetSpecError(f"{field}: must be >= 0, got {value}")
    return value


@dataclass(frozen=True)
class PdbStatus:
    expected_pods: int
    desired_healthy: int
    current_healthy: int
    disruptions_allowed: int


def desired_healthy(spec: PdbSpec, *, expected_scale: int, matched_pods: int) -> tuple[int, int]:
    """Return (expectedCount, desiredHealthy) as getExpectedPodCount computes them.

    expected_scale is the sum of the owning controllers' scales (replicas);
    matched_pods is the number of pods the selector matches.
    """
    if spec.max_unavailable is not None:
        expected = expected_scale
        unavailable = scaled_value(spec.max_unavailable, expected, round_up=True)
        return expected, max(expected - unavailable, 0)
    if spec.min_available is not None:
        if is_percent(spec.min_available):
            expected = expected_scale
            return expected, scaled_value(spec.min_available, expected, round_up=True)
        return matched_pods, int(spec.min_available)
    # Neither set: getExpectedPodCount assigns nothing, so expected stays 0 and
    # disruptionsAllowed is 0: such a budget blocks every eviction.
    return 0, 0


def disruptions_allowed(*, current_healthy: int, desired: int, expected: int) -> int:
    allowed = current_healthy - desired
    if expected <= 0 or allowed <= 0:
        return 0
    return allowed


def status(
    spec: PdbSpec, *, expected_scale: int, matched_pods: int, current_healthy: int
) -> PdbStatus:
    expected, desired = desired_healthy(
        spec, expected_scale=expected_scale, matched_pods=matched_pods
    )
    return PdbStatus(
        expected_pods=expected,
        desired_healthy=desired,
        current_healthy=current_healthy,
        disruptions_allowed=disruptions_allowed(
            current_healthy=current_healthy, desired=desired, expected=expected
        ),
    )


def best_case_disruptions(spec: PdbSpec, replicas: int) -> int:
    """disruptionsAllowed with every one of `replicas` pods running and ready.

    Zero means the budget can never allow a voluntary eviction at that scale: a wedge.
    """
    # status() without its record: rules ask this for every budget, several times.
    expected, desired = desired_healthy(spec, expected_scale=replicas, matched_pods=replicas)
    return disruptions_allowed(current_healthy=replicas, desired=desired, expected=expected)


@dataclass(frozen=True)
class GroupBudget:
    """A PDB over the pods of whole groups (a LeaderWorkerSet) read in groups.

    The disruption controller counts pods; lws takes a whole group (size pods) down when one
    of its pods is evicted under a recreating restart policy. A budget fits whole groups when
    the pods it lets go are a whole number of groups.
    """

    pods_allowed: int
    """disruptionsAllowed with every pod of every group ready."""
    size: int

    @property
    def groups_allowed(self) -> int:
        """Whole groups the budget's pods cover."""
        return self.pods_allowed // self.size

    @property
    def fits(self) -> bool:
        return self.pods_allowed % self.size == 0


def group_disruptions(spec: PdbSpec, *, groups: int, size: int) -> GroupBudget:
    """The budget over groups x size pods, all ready (size >= 1)."""
    return GroupBudget(best_case_disruptions(spec, groups * size), size)


def status_disruptions(pdb: Mapping[str, Any]) -> int:
    """A PDB object's status.disruptionsAllowed once the disruption controller has observed
    its current spec (observedGeneration), else 0: a stale status would only earn a 429."""
    status = pdb.get("status") or {}
    generation = (pdb.get("metadata") or {}).get("generation")
    observed = status.get("observedGeneration")
    if isinstance(generation, int) and isinstance(observed, int) and observed < generation:
        return 0
    allowed = status.get("disruptionsAllowed")
    return int(allowed) if isinstance(allowed, int) else 0


def whole_group_spec(spec: PdbSpec, *, groups: int, size: int) -> PdbSpec | None:
    """The spec with its integer field rounded to whole groups, never letting more pods go:
    minAvailable up to (groups - k) x size, maxUnavailable down to k x size, where k is the
    whole groups the budget already covers. None when it already fits, when k is 0 (the only
    whole-group budget would then block every eviction) or the field is a percent."""
    budget = group_disruptions(spec, groups=groups, size=size)
    if budget.fits or budget.groups_allowed == 0:
        return None
    covered = budget.groups_allowed * size
    if spec.max_unavailable is not None and not is_percent(spec.max_unavailable):
        return replace(spec, max_unavailable=covered)
    if spec.min_available is not None and not is_percent(spec.min_available):
        return replace(spec, min_available=groups * size - covered)
    return None


def eviction_bypasses_budget(*, phase: str, terminating: bool) -> bool:
    """Pods the eviction handler deletes without consulting the budget (canIgnorePDB).

    Source: kubernetes/kubernetes pkg/registry/core/pod/storage/eviction.go.
    """
    return terminating or phase in ("Pending", "Succeeded", "Failed")


def unhealthy_pod_may_be_evicted(
    spec: PdbSpec, *, current_healthy: int, desired: int
) -> bool:
    """Whether a Running but not-Ready pod can be evicted (unhealthyPodEvictionPolicy)."""
    if spec.unhealthy_pod_eviction_policy == "AlwaysAllow":
        return True
    return current_healthy >= desired
