"""A NodeMaintenance's `spec.capacityFloor`, read into drain.floors.CapacityFloors.

    capacityFloor:
      default: "100%"          # int or percent of desired; "100%" unless drain.strategy is evict
      workloads:               # the first that matches a workload wins
      - {kind: StatefulSet, namespace: ml, name: embed, floor: 0}
      - {selector: {matchLabels: {tier: batch}}, floor: "50%"}

A floor is an int (Ready replicas, or Ready groups for a LeaderWorkerSet) or a percent of
desired from 0% to 100%, as a PodDisruptionBudget's minAvailable (pdb.scaled_value rejects
any other string). A rule names at least one of kind, namespace, name or selector (a rule
that matches every workload is the default); the selector is a metav1.LabelSelector on the
workload's labels (drainsafe.labels.from_label_selector). `drain.strategy: evict` is an
explicit ask for break before make: its default floor is 0 unless one is given.

Pure; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drainsafe.drain.floors import DEFAULT_FLOOR, CapacityFloors, FloorRule
from drainsafe.labels import SelectorError, from_label_selector
from drainsafe.pdb import BudgetSpecError, IntOrPercent, scaled_value

RULE_KEYS = ("kind", "namespace", "name", "selector", "floor")


class FloorSpecError(ValueError):
    """A capacityFloor the reconciler will not act on (the message names the field)."""


def _value(raw: Any, where: str) -> IntOrPercent:
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise FloorSpecError(f"{where}: {raw!r} is not an integer or a percent like '50%'")
    try:
        scaled = scaled_value(raw, 100, round_up=True)
    except BudgetSpecError as e:
        raise FloorSpecError(f"{where}: {e}") from e
    if scaled < 0 or (isinstance(raw, str) and scaled > 100):
        raise FloorSpecError(f"{where}: {raw!r} is outside 0..100% (or a negative count)")
    return raw


def parse_floors(raw: Mapping[str, Any] | None, strategy: str) -> CapacityFloors:
    raw = raw or {}
    if not isinstance(raw, Mapping):
        raise FloorSpecError("capacityFloor: expected an object with default and workloads")
    fallback: IntOrPercent = 0 if strategy == "evict" else DEFAULT_FLOOR
    default = _value(raw["default"], "capacityFloor.default") if "default" in raw \
        else fallback
    rules = []
    for i, rule in enumerate(raw.get("workloads") or []):
        where = f"capacityFloor.workloads[{i}]"
        unknown = sorted(set(rule) - set(RULE_KEYS))
        if unknown:
            raise FloorSpecError(f"{where}: unknown field(s) {', '.join(unknown)}")
        if "floor" not in rule:
            raise FloorSpecError(f"{where}: floor is required")
        if not any(rule.get(k) for k in ("kind", "namespace", "name", "selector")):
            raise FloorSpecError(f"{where}: name a kind, namespace, name or selector (a "
                                 "floor for every workload is capacityFloor.default)")
        try:
            selector = from_label_selector(rule["selector"]) if rule.get("selector") else None
        except SelectorError as e:
            raise FloorSpecError(f"{where}.selector: {e}") from e
        rules.append(FloorRule(
            floor=_value(rule["floor"], f"{where}.floor"), kind=str(rule.get("kind") or ""),
            namespace=str(rule.get("namespace") or ""), name=str(rule.get("name") or ""),
            selector=selector))
    return CapacityFloors(default=default, rules=tuple(rules))
